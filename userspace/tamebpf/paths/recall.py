"""Between an advice and path memory: what to store of a probed advice, and
the advice an entry gives under the caller's own limits.

Pure. The curve is recomputed from the stored fit (loss-based: the model's
coefficients; BBR: the measured share points and the capacity), so a stored
entry answers any --max-impact and --max-streams exactly as the probes that
made it would have.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from tamebpf.estimate.advice import path_spread
from tamebpf.estimate.record import TIME_LIMIT, AdviseResult
from tamebpf.estimate.spread import count_range, path_class, spread_for
from tamebpf.model import (
    DEFAULT_MODEL,
    MODEL_LABELS,
    Advice,
    CurvePoint,
    Fit,
    Probe,
    Settings,
    fit_capacity,
    fit_throughput,
    predict,
)
from tamebpf.model.share import as_curve, share_advice
from tamebpf.paths.entry import Estimator, FitData, PathEntry, PathKey, ProbeKind, Source


@dataclass(frozen=True)
class Recalled:
    """An entry's advice for `settings`: the curve 1..max_streams, the
    advice, the fit's parameters (empty for the share advice)."""

    entry: PathEntry
    settings: Settings
    curve: tuple[CurvePoint, ...]
    advice: Advice
    params: dict[str, float]
    model: str
    # The node whose exported entry this is (advise --paths-from), None: ours.
    node: str | None = None
    # A passive entry of ours: (transfers that taught the path, over seconds).
    transfers: tuple[int, float] | None = None
    # The advised count's range on the path's variation (estimate/spread.py).
    streams_range: tuple[int, int] = (0, 0)


def entry_from_advice(result: AdviseResult, key: PathKey, when: float, kind: ProbeKind,
                      ) -> PathEntry | None:
    """What path memory keeps of a probed advice (None: there was no advice)."""
    if result.refused:
        return None
    pred = result.prediction
    adv = pred.advice
    c, e = result.capacity, result.capacity_estimate
    if result.share is not None:
        fit = FitData("share", tuple((p.streams, p.throughput) for p in result.share.probes),
                      capacity=result.share.capacity)
    else:
        f = pred.fit
        estimator: Estimator = "capacity" if result.used == "capacity" else "throughput"
        fit = FitData(estimator, tuple((p.streams, p.throughput) for p in f.probes), f.model,
                      f.coeffs, f.evidence_limit, f.capacity)
    rng = next((r for r in result.confidence if r.streams == adv.num_flows), None)
    capacity = c.goodput_mbps if c is not None else \
        result.share.capacity if result.share is not None else None
    trusted = e is not None and e.trusted
    source: Source = "--capacity" if c is not None and c.link_mbps is not None else "probe"
    first = result.probes[0].steady if result.probes else None
    streams = result.streams_range
    return PathEntry(
        key=key, when=when, source=source, probe_kind=kind, fit=fit,
        advised_streams=adv.num_flows, advised_mbps=adv.max_nondisruptive_thru,
        advised_impact=adv.cross_traffic_impact, max_impact=pred.settings.max_impact,
        capacity_mbps=capacity,
        capacity_low_mbps=e.low_mbps if trusted and e is not None else None,
        capacity_high_mbps=e.high_mbps if trusted and e is not None else None,
        capacity_method=c.source if c is not None else e.method if trusted and e else None,
        link_mbps=c.link_mbps if c is not None else None,
        competing_flows=c.competing_flows if c is not None else None,
        rtt_ms=first.srtt_ms if first is not None else None,
        impact_low=rng.low if rng else None, impact_high=rng.high if rng else None,
        host=result.target.host, streams_low=streams[0] if streams else None,
        streams_high=streams[1] if streams else None, spread=path_spread(result.probes))


def entry_spread(entry: PathEntry) -> float:
    """The spread the entry's range was made with; for an entry stored
    before ranges were (schema 1), its RTT class's, taken as unsettled."""
    if entry.spread is not None:
        return entry.spread
    return spread_for(path_class([entry.rtt_ms or 0.0], [TIME_LIMIT]))


def recall(entry: PathEntry, settings: Settings) -> Recalled:
    """The entry's advice under `settings` (raises ModelInputError if the
    stored numbers do not make a curve: the caller probes instead)."""
    curve, advice, params, model, count = _unranged(entry, settings)
    return Recalled(entry, settings, curve, advice, params, model,
                    streams_range=_recalled_range(entry, settings, advice, count))


def recall_curve(entry: PathEntry, settings: Settings) -> tuple[tuple[CurvePoint, ...], Advice]:
    """The entry's curve and advice under `settings`, without the count
    range recall() adds: that range refits moved probes several times, and
    the callers here (the learner on each refresh, run's starting rate) read
    one point or the advised rate only. Raises as recall() does."""
    curve, advice, _, _, _ = _unranged(entry, settings)
    return curve, advice


def expected_mbps(entry: PathEntry, streams: int, settings: Settings) -> float:
    """The goodput (Mbit/s) the entry predicts at `streams`, under
    `settings` with max_streams raised to reach it. Raises as recall() does."""
    if streams < 1:
        raise ValueError(f"a count of {streams} streams")
    wide = replace(settings, max_streams=max(streams, settings.max_streams))
    curve, _ = recall_curve(entry, wide)
    return curve[streams - 1].throughput


def _unranged(entry: PathEntry, settings: Settings) -> tuple[
        tuple[CurvePoint, ...], Advice, dict[str, float], str,
        Callable[[Sequence[Probe]], int]]:
    """The curve, advice, parameters and model label the entry's stored fit
    gives under `settings`, and how a count is refitted from moved probes
    (for the range)."""
    f = entry.fit
    probes = tuple(Probe(n, g) for n, g in f.probes)
    if f.estimator == "share":
        if f.capacity is None:
            raise ValueError("a share entry without its capacity")
        cap = f.capacity
        share = share_advice(probes, cap, settings)

        def count(ps: Sequence[Probe]) -> int:
            return share_advice(ps, cap, settings).advice.num_flows
        return as_curve(share), share.advice, {"capacity": cap}, "capacity share (BBR)", count
    if f.model is None or f.coeffs is None:
        raise ValueError("a fit entry without its model")
    pred = predict(Fit(f.model, f.coeffs, probes, evidence_limit=f.evidence_limit,
                       capacity=f.capacity), settings)
    return pred.curve, pred.advice, pred.params, f.model, _refit_count(entry, settings)


def _refit_count(entry: PathEntry, settings: Settings) -> Callable[[Sequence[Probe]], int]:
    """The advised count from moved probes, refitted as the entry was made."""
    f = entry.fit
    model = next((m for m, label in MODEL_LABELS.items() if label == f.model), DEFAULT_MODEL)

    def count(ps: Sequence[Probe]) -> int:
        if f.estimator == "capacity" and f.capacity is not None:
            return predict(fit_capacity(ps, f.capacity), settings).advice.num_flows
        return predict(fit_throughput(ps, model), settings).advice.num_flows
    return count


def _recalled_range(entry: PathEntry, settings: Settings, advice: Advice,
                    count: Callable[[Sequence[Probe]], int]) -> tuple[int, int]:
    """The stored range where the advice is the stored one; else (other
    limits, or an entry from before ranges) the same spread rerun."""
    if entry.streams_low is not None and entry.streams_high is not None and \
            advice.num_flows == entry.advised_streams and \
            settings.max_impact == entry.max_impact:
        return entry.streams_low, entry.streams_high
    probes = [Probe(n, g) for n, g in entry.fit.probes]
    return count_range(count, probes, advice.num_flows, entry_spread(entry))


def usable(entry: PathEntry, now: float, max_age_s: float, quick: bool,
           link_mbps: float | None) -> str | None:
    """Why this entry cannot answer (None: it can). A default advise waits
    for settled probes, so it takes only settled or passive entries; --quick
    takes any. With --capacity, only an entry made with the same rate."""
    if entry.changed:
        return "real transfers showed the path changed since"
    if entry.age_s(now) > max_age_s:
        return f"it is {entry.age_s(now):.0f} s old, more than --max-age {max_age_s:g} s"
    if entry.when > now + 60:
        return "it is dated in the future (was the clock set back?)"
    if not quick and entry.probe_kind in ("quick", "fixed"):
        return f"it came from {entry.probe_kind} probes, not settled ones"
    if link_mbps is not None and entry.link_mbps != link_mbps:
        return "it was not made with the same --capacity"
    return None

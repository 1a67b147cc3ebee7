"""Between an advice and path memory: what to store of a probed advice, and
the advice an entry gives under the caller's own limits.

Pure. The curve is recomputed from the stored fit (loss-based: the model's
coefficients; BBR: the measured share points and the capacity), so a stored
entry answers any --max-impact and --max-streams exactly as the probes that
made it would have.
"""

from __future__ import annotations

from dataclasses import dataclass

from tamebpf.advise.record import AdviseResult
from tamebpf.model import Advice, CurvePoint, Fit, Probe, Settings, predict
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
        host=result.target.host)


def recall(entry: PathEntry, settings: Settings) -> Recalled:
    """The entry's advice under `settings` (raises ModelInputError if the
    stored numbers do not make a curve: the caller probes instead)."""
    f = entry.fit
    probes = tuple(Probe(n, g) for n, g in f.probes)
    if f.estimator == "share":
        if f.capacity is None:
            raise ValueError("a share entry without its capacity")
        share = share_advice(probes, f.capacity, settings)
        return Recalled(entry, settings, as_curve(share), share.advice,
                        {"capacity": f.capacity}, "capacity share (BBR)")
    if f.model is None or f.coeffs is None:
        raise ValueError("a fit entry without its model")
    pred = predict(Fit(f.model, f.coeffs, probes, evidence_limit=f.evidence_limit,
                       capacity=f.capacity), settings)
    return Recalled(entry, settings, pred.curve, pred.advice, pred.params, f.model)


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

"""The passive fit of docs/model.md: goodput a group showed at two or more
distinct stream counts, fitted as if they were probes (no probe traffic is
sent), with its advice and the loss x RTT^2 estimator beside it (section 3).
Fitter keeps each group's recent intervals by stream count (Levels) and
refits when they change."""

from __future__ import annotations

import statistics
from collections import Counter as Tally
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from tamebpf.model import (
    DEFAULT_MODEL,
    Advice,
    Fit,
    LossSample,
    ModelInputError,
    Prediction,
    Probe,
    Settings,
    fit_loss_rtt,
    fit_throughput,
    predict,
)

# Congestion controls the square-root law describes (docs/model.md, section 7).
LOSS_BASED = frozenset({"reno", "cubic", "htcp", "highspeed", "scalable", "bic", "westwood"})
# Two advices this far apart (in streams) mean the estimators disagree.
DISAGREEMENT_STREAMS = 2


@dataclass(frozen=True)
class Observation:
    """What the group showed while it ran `streams` streams (recent refreshes)."""

    streams: int
    goodput_mbps: float  # median over the samples
    loss_rate: float | None  # retransmitted / data segments, over the samples
    srtt_s: float | None  # median
    samples: int
    # The samples' goodputs, oldest first, and how many samples the count
    # has taken in all (more than `samples` once old ones went): path
    # memory pools each sample once (paths/passive.py).
    goodputs: tuple[float, ...] = ()
    taken: int = 0


@dataclass(frozen=True)
class PassiveFit:
    """The model fitted to observations instead of probes: the throughput fit
    (whose advice is the group's advice) and the loss x RTT^2 fit beside it."""

    observations: tuple[Observation, ...]
    prediction: Prediction
    loss_rtt: Prediction | None
    warnings: tuple[str, ...]

    @property
    def fit(self) -> Fit:
        return self.prediction.fit

    @property
    def advice(self) -> Advice:
        return self.prediction.advice

    @property
    def loss_rtt_advice(self) -> Advice | None:
        return self.loss_rtt.advice if self.loss_rtt else None


@dataclass
class _Sample:
    """One steady interval of a group: when it ended and what it showed."""

    at_ns: int
    goodput_mbps: float
    retrans: int
    data_segs: int
    srtt_s: float | None


@dataclass
class Levels:
    """One group's recent intervals by the stream count they ran, and the
    fit made of them."""

    prev_streams: int | None = None
    history: dict[int, deque[_Sample]] = field(default_factory=dict)
    dirty: bool = False  # history changed since the last fit
    taken: Tally[int] = field(default_factory=Tally)  # samples taken in all, by count
    observed: tuple[Observation, ...] = ()
    passive: PassiveFit | None = None


class Fitter:
    """The Aggregator's limits for the passive fit, applied to one group's
    Levels at each refresh (Aggregator documents the arguments)."""

    def __init__(self, settings: Settings, history_s: float, samples_per_level: int,
                 min_samples: int) -> None:
        self.settings = settings
        self.history_ns = int(history_s * 1e9)
        self.samples_per_level = samples_per_level
        self.min_samples = max(1, min_samples)

    def step(self, lv: Levels, streams: int, mbps: float | None, retrans: int, data_segs: int,
             srtt: list[int], now: int, ccs: Tally[str]) -> PassiveFit | None:
        """One refresh of a group: its interval (mbps None: no interval or no
        goodput in it, so no observation), the old samples forgotten, and
        the fit, made again only if its samples changed."""
        if mbps is not None:
            self._observe(lv, streams, mbps, retrans, data_segs, srtt, now)
        else:
            lv.prev_streams = streams
        self._prune(lv, now)
        return self._fit(lv, ccs)

    def _observe(self, lv: Levels, streams: int, mbps: float, retrans: int, data_segs: int,
                 srtt: list[int], now: int) -> None:
        """Keep the interval as an observation if the stream count held steady
        across it (an interval where streams came or went mixes two levels)."""
        stable = streams > 0 and lv.prev_streams == streams
        lv.prev_streams = streams
        if not stable:
            return
        level = lv.history.get(streams)
        if level is None:
            level = lv.history[streams] = deque(maxlen=self.samples_per_level)
        rtt = statistics.median(srtt) / 1e6 if srtt else None
        level.append(_Sample(now, mbps, retrans, data_segs, rtt))
        lv.taken[streams] += 1
        lv.dirty = True

    def _prune(self, lv: Levels, now: int) -> None:
        for n in list(lv.history):
            level = lv.history[n]
            while level and now - level[0].at_ns > self.history_ns:
                level.popleft()
                lv.dirty = True
            if not level:
                del lv.history[n]

    def _observations(self, lv: Levels) -> tuple[Observation, ...]:
        out = []
        for n in sorted(lv.history):
            level = lv.history[n]
            if len(level) < self.min_samples:
                continue
            segs = sum(s.data_segs for s in level)
            rtts = [s.srtt_s for s in level if s.srtt_s is not None]
            out.append(Observation(
                streams=n,
                goodput_mbps=statistics.median(s.goodput_mbps for s in level),
                loss_rate=min(sum(s.retrans for s in level) / segs, 1.0) if segs else None,
                srtt_s=statistics.median(rtts) if rtts else None,
                samples=len(level),
                goodputs=tuple(s.goodput_mbps for s in level),
                taken=lv.taken[n],
            ))
        return tuple(out)

    def _fit(self, lv: Levels, ccs: Tally[str]) -> PassiveFit | None:
        if not lv.dirty:
            return lv.passive
        lv.dirty = False
        obs = lv.observed = self._observations(lv)
        lv.passive = passive_fit(obs, self.settings, ccs) if len(obs) >= 2 else None
        return lv.passive


def passive_fit(
    obs: Sequence[Observation], settings: Settings, ccs: Iterable[str] = ()
) -> PassiveFit | None:
    """Fit the default model (the one `advise` uses) to observations at >= 2
    stream counts, with the loss x RTT^2 estimator beside it, as a check,
    when loss and RTT were seen."""
    try:
        probes = [Probe(o.streams, o.goodput_mbps) for o in obs]
        pred = predict(fit_throughput(probes, DEFAULT_MODEL), settings)
    except ModelInputError:
        return None
    adv = pred.advice
    warnings = list(pred.warnings)
    top = max(o.streams for o in obs)
    if adv.num_flows > top:
        warnings.insert(0, (
            f"the advice of {adv.num_flows} streams extrapolates beyond the most streams "
            f"seen ({top}): the fit has no observation of congestion there"))
    lr = None
    samples = [
        LossSample(o.streams, o.loss_rate, o.srtt_s, o.goodput_mbps)
        for o in obs
        if o.loss_rate is not None and o.srtt_s is not None and o.srtt_s > 0
    ]
    if len({x.streams for x in samples}) >= 2:
        try:
            lr = predict(fit_loss_rtt(samples), settings)
        except ModelInputError:
            lr = None
    lr_adv = lr.advice if lr else None
    if lr_adv is not None and abs(lr_adv.num_flows - adv.num_flows) >= DISAGREEMENT_STREAMS:
        warnings.append(
            f"the estimators disagree: throughput fit {adv.num_flows} streams, loss x RTT^2 "
            f"fit {lr_adv.num_flows}; an assumption of the model may not hold (receiver "
            "window, non-loss-based congestion control, synchronised losses)"
        )
    other = sorted(set(ccs) - LOSS_BASED)
    if other:
        warnings.append(
            f"congestion control {','.join(other)} is not loss-based: the square-root "
            "law behind the model does not describe it"
        )
    return PassiveFit(tuple(obs), pred, lr, tuple(warnings))

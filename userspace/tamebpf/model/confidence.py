"""How sure the advice is: the impact at each stream count as a range.

The probes' goodputs are measurements with noise; the fit, and so the
predicted impact, moves with them. DualPats found prediction errors of
this kind close to normal, so the range is the delta method: the impact's
sensitivity to each probe's goodput (a numerical derivative of the same
fit), times that goodput's standard error, added in quadrature, and
z standard errors either side. It covers the measurement noise inside the
probes only, and treats their samples as independent, while a path's
goodput also moves from one round of probes to the next; alone it holds
the measured impact in fewer than half the cases. So the advice widens it
(`widened`) to hold the impacts of the fit rerun on the probes moved by
the path's round-to-round spread (estimate/spread.py, estimate/advice.py).
A path that changes between the probe and the transfer is outside both
(docs/advise.md, "Confidence: how sure the advice is").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from tamebpf.model._checks import ModelInputError
from tamebpf.model.fit import Baseline, Fit, Probe

Z_90 = 1.645  # two-sided 90% of a normal distribution
STEP = 1e-4  # relative step of the numerical derivative


@dataclass(frozen=True)
class ImpactRange:
    streams: int
    impact: float
    low: float
    high: float

    def straddles(self, limit: float) -> bool:
        """The limit lies inside the range: the measurements cannot tell on
        which side of it this stream count is."""
        return self.low <= limit < self.high


def impact_ranges(refit: Callable[[Sequence[Probe]], Fit], probes: Sequence[Probe],
                  rel_se: Sequence[float], streams: Sequence[int], *,
                  baseline: Baseline = "one-stream", z: float = Z_90) -> list[ImpactRange]:
    """The impact at each of `streams` with its range. refit: the fit the
    advice uses, from probes; rel_se: each probe's goodput standard error
    relative to the goodput (0: exact)."""
    if len(rel_se) != len(probes):
        raise ModelInputError(f"{len(probes)} probes but {len(rel_se)} standard errors")
    if any(not (se >= 0.0 and math.isfinite(se)) for se in rel_se):
        raise ModelInputError(f"standard errors must be finite and >= 0: {list(rel_se)}")
    base = refit(probes)
    moved: list[Fit | None] = []
    for k, p in enumerate(probes):
        nudged = list(probes)
        nudged[k] = Probe(p.streams, p.throughput * (1 + STEP))
        try:
            moved.append(refit(nudged))
        except ModelInputError:
            moved.append(None)  # no fit that close: that probe adds no width
    out = []
    for n in streams:
        value = base.impact(n, baseline)
        var = 0.0
        for fit, se in zip(moved, rel_se, strict=True):
            if fit is not None and se > 0.0:
                # d impact / d (relative goodput), times the relative error
                var += ((fit.impact(n, baseline) - value) / STEP * se) ** 2
        half = z * math.sqrt(var)
        out.append(ImpactRange(n, value, max(0.0, value - half), min(1.0, value + half)))
    return out


def widened(ranges: Sequence[ImpactRange],
            impacts: Iterable[Mapping[int, float]]) -> list[ImpactRange]:
    """Each range stretched to hold the impacts at its count that other fits
    give (one mapping, stream count -> impact, a fit; a count a fit does not
    give adds nothing), kept within 0..1."""
    low = {r.streams: r.low for r in ranges}
    high = {r.streams: r.high for r in ranges}
    for by_count in impacts:
        for n, x in by_count.items():
            if n in low:
                low[n], high[n] = min(low[n], x), max(high[n], x)
    return [replace(r, low=max(0.0, low[r.streams]), high=min(1.0, high[r.streams]))
            for r in ranges]


def relative_standard_error(cv: float | None, samples: int) -> float:
    """A probe goodput's standard error relative to the goodput, from the
    coefficient of variation of its per-sample goodput over `samples`
    samples (0 when unknown: nothing to widen the range with)."""
    if cv is None or samples < 2 or not math.isfinite(cv):
        return 0.0
    return cv / math.sqrt(samples)

"""Advice from the capacity share, for senders the loss law does not
describe (BBR).

BBR paces to its own estimate of the bottleneck and does not back off on
loss, so p*RTT^2 = a n^2 + b says nothing about it, and neither does the
per-flow fall in throughput the paper calls impact: against 4 CUBIC flows
one BBR stream takes 78% of a 100 Mbit/s link (docs/advise.md, "BBR
senders"). What does hold for any sender is conservation: with the link
full, the other traffic gets the capacity C less what our n streams got,

    X(n) = C - G(n),

so every probe measures the cross traffic's rate directly. Impact against a
1-stream transfer is 1 - X(n)/X(1); against no transfer at all it is
G(n)/C, taking the other traffic alone to fill the link (elastic bulk flows
do; an application-limited trickle would not, and then this over-states).

Between probed counts G(n) is interpolated as a share n / (n + m) of C, with
m (the flows it competes with, as many as it behaves like) moving in log n
from one probe's m_i = n_i (C / G_i - 1) to the next; beyond the largest
count m stays at its last value. G is taken to rise with n, so between two
probed counts the impact lies between theirs; above the largest, anywhere
from its impact to all of the rest of the link. Those are the ranges shown.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tamebpf.model._checks import ModelInputError, positive
from tamebpf.model.advice import Advice, CurvePoint, LimitReason, Settings
from tamebpf.model.fit import Probe

# A probe may read a little above the capacity estimate; its share is then
# taken as all but this of the link (m > 0 keeps the logarithm finite).
MIN_SHARE_GAP = 0.005


@dataclass(frozen=True)
class SharePoint:
    streams: int
    goodput: float  # ours, interpolated between probes or measured
    cross: float  # the other traffic's: capacity - goodput
    impact: float  # against a 1-stream transfer
    impact_low: float  # the range the probes leave (module docstring)
    impact_high: float
    impact_vs_none: float  # against no transfer: goodput / capacity
    measured: bool


@dataclass(frozen=True)
class ShareAdvice:
    capacity: float
    probes: tuple[Probe, ...]
    curve: tuple[SharePoint, ...]
    advice: Advice
    # The count worth probing to settle the advice: the advised count's
    # next, when the limit lies inside its impact range and it was not
    # probed (None: nothing to gain).
    next_probe: int | None

    def at(self, n: int) -> SharePoint:
        return self.curve[n - 1]


def competing(n: int, goodput: float, capacity: float) -> float:
    """m such that n / (n + m) of the capacity is `goodput`."""
    share = min(goodput / capacity, 1.0 - MIN_SHARE_GAP)
    return n * (1.0 / share - 1.0)


def share_advice(probes: Sequence[Probe], capacity: float, settings: Settings) -> ShareAdvice:
    """The curve for 1..max_streams and the advice from measured goodputs
    (one probe per stream count; one of them must be 1 stream)."""
    capacity = positive(capacity, "capacity")
    pts = sorted({p.streams: p for p in probes}.values(), key=lambda p: p.streams)
    if not pts or pts[0].streams != 1:
        raise ModelInputError("the share advice needs a 1-stream probe")
    # Goodput rises with n (more streams never take less of a full link in
    # the mean); a probe below an earlier one is read as equal to it.
    rising: list[Probe] = []
    for p in pts:
        floor = rising[-1].throughput if rising else 0.0
        rising.append(Probe(p.streams, min(max(p.throughput, floor), capacity)))
    logs = [math.log(p.streams) for p in rising]
    ms = [math.log(competing(p.streams, p.throughput, capacity)) for p in rising]
    x1 = max(capacity - rising[0].throughput, MIN_SHARE_GAP * capacity)

    def impact(goodput: float) -> float:
        return min(1.0, max(0.0, 1.0 - (capacity - goodput) / x1))

    curve = []
    by_n = {p.streams: p for p in rising}
    for n in range(1, settings.max_streams + 1):
        if n in by_n:
            g = lo_g = hi_g = by_n[n].throughput
        else:
            k = sum(1 for p in rising if p.streams < n)  # probes below n
            if k == len(rising):
                m = math.exp(ms[-1])
                lo_g, hi_g = rising[-1].throughput, capacity
            else:
                f = (math.log(n) - logs[k - 1]) / (logs[k] - logs[k - 1])
                m = math.exp(ms[k - 1] + f * (ms[k] - ms[k - 1]))
                lo_g, hi_g = rising[k - 1].throughput, rising[k].throughput
            g = min(max(capacity * n / (n + m), lo_g), hi_g)
        curve.append(SharePoint(n, g, capacity - g, impact(g), impact(lo_g), impact(hi_g),
                                g / capacity, n in by_n))
    advice = _choose(curve, settings)
    nxt = None
    n = advice.num_flows
    if n < settings.max_streams and advice.limited_by == "max-impact":
        # The count after the advised one is over the limit on the estimate;
        # if its range holds the limit, a probe there (or at the advised
        # count, if that is unprobed and uncertain) can move the answer.
        for cand in (n + 1, n):
            c = curve[cand - 1]
            if not c.measured and c.impact_low <= settings.max_impact < c.impact_high:
                nxt = cand
                break
    return ShareAdvice(capacity, tuple(rising), tuple(curve), advice, nxt)


def _choose(curve: Sequence[SharePoint], s: Settings) -> Advice:
    warnings: list[str] = []
    reason: LimitReason = "max-streams"
    n = 1
    while n < len(curve):
        nxt = curve[n]
        if nxt.impact > s.max_impact:
            reason = "max-impact"
            break
        gain = nxt.goodput / curve[n - 1].goodput - 1.0
        if gain <= 0.0 or gain < s.gain_threshold:
            reason = "gain-threshold"
            break
        n += 1
    first = curve[0]
    if first.impact_vs_none > s.max_impact:
        warnings.append(
            f"a single stream already takes {first.impact_vs_none:.0%} of the link from the "
            f"other traffic (more than the {s.max_impact:.0%} limit, measured against no "
            "transfer at all); 1 stream is the least a transfer can use")
    c = curve[n - 1]
    return Advice(n, c.goodput, c.impact, reason, tuple(warnings))


def as_curve(share: ShareAdvice) -> tuple[CurvePoint, ...]:
    """The share curve in the model's common shape (tables, JSON, plots)."""
    return tuple(CurvePoint(p.streams, p.goodput, p.impact) for p in share.curve)

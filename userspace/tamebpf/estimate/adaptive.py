"""When a probe has measured enough (`advise --max-probe-time`).

A probe of fixed length is too long where the path is steady and too short
where it is not. With a time limit instead, a probe ends as soon as
- its steady window is at least MIN_WINDOW_S long and past start-up
  (past_start_up below),
- its goodput's standard error (per-sample variation over the window's
  samples, model/confidence.py) is within `rse` of the goodput, and
- when the capacity is to be estimated from this probe's ACKs, that estimate
  is trusted and its 90% interval within `capacity_halfwidth` either side,
and otherwise runs to the limit.

`past_start_up`: a probe is past start-up when its steady window began after
every stream left slow start and spans enough RTTs. A fixed 2 s is 25 RTTs
at 80 ms of queueing-free RTT but a dozen once a deep queue fills; there the
streams are still in slow start, or just out of it, when the probe ends,
and the competing flows come out anywhere between a 37th of and 4 times
the settled truth's count (each probe against the truth's point nearest
its stream count). The advice warns when a probe ended before that
(estimate/advice.py) rather than running the probes on: probes run on
until past start-up are slower and not clearly more accurate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tamebpf.estimate.acktrain import estimate_capacity
from tamebpf.estimate.steady import Steady, window_samples
from tamebpf.model.confidence import relative_standard_error

MIN_WINDOW_S = 0.75
MIN_SAMPLES = 5


@dataclass(frozen=True)
class Enough:
    rse: float = 0.05
    capacity: bool = False
    capacity_halfwidth: float = 0.05

    def __call__(self, s: Steady, ack_rates: Callable[[], list[float]]) -> bool:
        if not past_start_up_and_tight(s, self.rse):
            return False
        if not self.capacity:
            return True
        return tight_capacity(ack_rates(), s.goodput_mbps, self.capacity_halfwidth)


def past_start_up_and_tight(s: Steady, rse: float) -> bool:
    """The steady window is long enough, past start-up, and its goodput's
    standard error within `rse` of it: what every early stop asks first."""
    samples = window_samples(s)
    if s.end_s - s.start_s < MIN_WINDOW_S or samples < MIN_SAMPLES or s.noise is None:
        return False
    return past_start_up(s) and relative_standard_error(s.noise, samples) <= rse


def tight_capacity(rates: list[float], goodput_mbps: float, halfwidth: float) -> bool:
    """The ACK-spacing capacity estimate from `rates` is trusted, and its 90%
    interval within `halfwidth` (a fraction) either side of it."""
    e = estimate_capacity(rates, goodput_mbps)
    if not e.trusted or e.goodput_mbps is None or e.low_mbps is None or e.high_mbps is None:
        return False
    return (e.high_mbps - e.low_mbps) / 2 <= halfwidth * e.goodput_mbps


# The steady window starts half-way from the end of slow start to the probe's
# end (estimate/steady.py), so a window of this many RTTs has the flows about
# twice as long in congestion avoidance: a few rounds of loss and recovery.
MIN_WINDOW_RTTS = 10.0


def past_start_up(s: Steady, min_rtts: float = MIN_WINDOW_RTTS) -> bool:
    """The steady window began after every stream left slow start and spans
    `min_rtts` smoothed RTTs."""
    rtts = s.window_rtts
    return s.after_slow_start and rtts is not None and rtts >= min_rtts

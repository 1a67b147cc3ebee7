"""When a probe's share of the path has settled: the default stop rule.

A probe joins other users' flows mid-run. Loss-based congestion control
(CUBIC, Reno) moves toward its share one congestion epoch at a time: each
loss event cuts the larger windows by the factor beta (0.7, 0.5), so the gap
between our streams and the others shrinks geometrically per epoch, not per
second. On a short path epochs pass every few hundred milliseconds; on a
long path with full queues one can take seconds, and a probe of fixed
length ends there far from the long-run share. So a probe ends early only
when
- it is past start-up (estimate/adaptive.past_start_up),
- our streams have each been through `epochs` window reductions since they
  left slow start (the kernel counts them: bpf/flows.bpf.c, on_cong_state;
  the median stream, so that one stream that lost less does not hold up
  ten),
- the probe has run for `min_rtts` smoothed RTTs: on long paths with RED or
  many cross flows, losses come faster than the shares move, and probes
  that stop on epochs alone err by twice as much as those that run on;
  100 RTTs are 2 s at 20 ms and the whole limit at 150 ms,
- the goodput over the window is measured tightly (relative standard
  error within `rse`), and
- when the capacity is to be estimated from this probe, that estimate is
  trusted and tight (as estimate/adaptive.Enough);
or, for the probe whose ACKs estimate the capacity, when it saw no loss and
its goodput is flat at that capacity: the link is ours alone, and there is
no share to converge to. Otherwise it runs to its time limit
(DEFAULT_MAX_PROBE_S each, common/defaults.py). Each rule says why it
stopped, for the output.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tamebpf.estimate.acktrain import estimate_capacity
from tamebpf.estimate.adaptive import MIN_SAMPLES, past_start_up_and_tight, tight_capacity
from tamebpf.estimate.steady import Steady, window_samples
from tamebpf.model.confidence import relative_standard_error

# Congestion epochs since slow start, and smoothed RTTs since the probe
# began, after which the default probes may stop early: together they end
# a probe about as near its long-run share as running it to its limit
# does (docs/accuracy.md has how near).
SETTLED_EPOCHS = 4
SETTLED_MIN_RTTS = 100
DEFAULT_EPOCHS = SETTLED_EPOCHS
DEFAULT_MIN_RTTS = SETTLED_MIN_RTTS
# A window's halves within this of each other: its goodput is flat.
FLAT_TREND = 0.05
# ... and at this share of the estimated capacity: the link is ours.
ALONE_SHARE = 0.95

SETTLED = "settled"
STEADY = "alone on the link"
# BBR neither leaves slow start the way the kernel marks it (its ssthresh
# stays unset) nor moves by loss epochs: its probe ends once the window
# spans this many RTTs, three of its 8-RTT bandwidth-probing cycles. The
# window is the probe's last 40% (estimate/steady.py), so that is 60 RTTs
# of probe: 9 s at 150 ms, and three BBR probes (a third where the first two
# leave the answer open) stay within about 30 s.
BBR_WINDOW_RTTS = 24.0


@dataclass(frozen=True)
class Settled:
    epochs: float = DEFAULT_EPOCHS
    min_rtts: float = DEFAULT_MIN_RTTS
    rse: float = 0.05
    capacity: bool = False  # this probe's ACKs must give a tight capacity estimate
    capacity_halfwidth: float = 0.05

    def __call__(self, s: Steady, ack_rates: Callable[[], list[float]]) -> str | None:
        """Why the probe may stop now (SETTLED or STEADY), or None."""
        if not past_start_up_and_tight(s, self.rse):
            return None
        ran_rtts = s.end_s / (s.srtt_ms / 1000) if s.srtt_ms else 0.0
        if s.median_epochs >= self.epochs and ran_rtts >= self.min_rtts:
            if self.capacity and not tight_capacity(
                    ack_rates(), s.goodput_mbps, self.capacity_halfwidth):
                return None
            return SETTLED
        # No loss to count. Without loss a CUBIC or Reno window only grows,
        # so a flat goodput at the link's capacity is a link nothing else
        # shares. Only the probe whose ACKs estimate the capacity can tell
        # (a lone stream's ACKs show its share, not the link): a 1-stream
        # probe beside one CUBIC flow can sit flat at 3/4 of its long-run
        # rate in CUBIC's plateau.
        if not self.capacity or s.retrans or s.trend is None or abs(s.trend) > FLAT_TREND:
            return None
        rates = ack_rates()
        if not tight_capacity(rates, s.goodput_mbps, self.capacity_halfwidth):
            return None
        e = estimate_capacity(rates, s.goodput_mbps)
        alone = e.goodput_mbps is not None and s.goodput_mbps >= ALONE_SHARE * e.goodput_mbps
        return STEADY if alone else None


@dataclass(frozen=True)
class BbrSettled:
    """The stop rule for BBR probes: a window of BBR_WINDOW_RTTS, a tight
    goodput and, for the last probe, a tight capacity estimate."""

    rse: float = 0.05
    capacity: bool = False
    capacity_halfwidth: float = 0.05

    def __call__(self, s: Steady, ack_rates: Callable[[], list[float]]) -> str | None:
        samples = window_samples(s)
        rtts = s.window_rtts
        if rtts is None or rtts < BBR_WINDOW_RTTS or samples < MIN_SAMPLES or s.noise is None:
            return None
        if relative_standard_error(s.noise, samples) > self.rse:
            return None
        if self.capacity and not tight_capacity(ack_rates(), s.goodput_mbps,
                                                 self.capacity_halfwidth):
            return None
        return SETTLED


"""A band of ACK pairs far above what the transfer ever got through is not
the path's capacity (docs/paths.md, "Learned from transfers").

ACKs bunched on the way back (a delay line releasing a batch late, ACK
compression on real paths) leave at the speed of whatever released them,
and in the first seconds of a transfer they can form a band that the pair
estimator trusts, 4-19x the link's rate. Such a band is never filled: the
most all the transfer's connections acknowledge together in any
REACH_WIDTH_MS stays within a few times the link's rate (bunching lifts
it that much). A link-rate band beside cross traffic is at most a few
times that peak too, since slow start pushes the transfer toward the link
until it loses. So a band above REACH x the peak is not trusted. This
misses a far band whose ACKs stay bunched over longer than REACH_WIDTH_MS
(on 120-ms paths, bands 10-13x the link sit only 4.5x above peaks of 2-3x
it); a stretch as long as the round trip is untested.
"""

from __future__ import annotations

from dataclasses import replace

from tamebpf.common.records import AckLog
from tamebpf.estimate.acktrain import CapacityEstimate, advances

# Near-link bands lie within 3.4x of the 50-ms peak, far ones from 5.7x
# above it up: REACH lies between.
REACH = 5.0
REACH_WIDTH_MS = 50.0


def peak_acked_mbps(log: AckLog, width_ms: float = REACH_WIDTH_MS) -> float:
    """The most all the log's connections acknowledged together in any
    `width_ms`, as Mbit/s."""
    steps = sorted(advances(log))
    width = width_ms * 1e6
    most = inside = lo = 0
    for t, acked in steps:
        inside += acked
        while steps[lo][0] <= t - width:
            inside -= steps[lo][1]
            lo += 1
        most = max(most, inside)
    return most * 8e3 / width


def reach_refused(e: CapacityEstimate, peak_mbps: float) -> CapacityEstimate:
    """`e`, not trusted if it lies above REACH x `peak_mbps`."""
    if e.trusted and e.goodput_mbps is not None and e.goodput_mbps > REACH * peak_mbps:
        return replace(e, trusted=False, reason=(
            f"the ACKs ran at {e.goodput_mbps:.1f} Mbit/s, over {REACH:g}x the most the "
            f"connections got through in {REACH_WIDTH_MS:g} ms ({peak_mbps:.1f}): bunched on "
            "the way back, not the link's"))
    return e

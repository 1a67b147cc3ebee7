"""Bottleneck capacity from the spacing of a probe's ACKs (packet dispersion).

Segments a sender emits back to back (an initial window, the two or three
segments each ACK releases) arrive at the bottleneck together, leave it one
transmission time apart and are acknowledged with that spacing. So the rate
of a pair of consecutive ACKs of one connection, bytes newly acknowledged
over the time between them, is the link's rate when nothing else queued
between the two, and lower when cross traffic did. Pairs whose ACKs were
bunched on the way back (ACK compression, the delay line releasing a batch)
read higher. The estimate is the densest narrow band of pair rates among the
upper ones (the mode of the link-rate pairs, as pathrate picks it), with an
interval from the spread inside that band; it is not trusted when that band
holds too few pairs, or holds a small share of them and is not large.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from tamebpf.common.records import AckLog
from tamebpf.estimate.capacity import DEFAULT_MSS

SEQ_MOD = 1 << 32


def advances(log: AckLog) -> list[tuple[int, int]]:
    """(t_ns, bytes newly acknowledged) of each ACK after a connection's
    first, every connection's in turn."""
    return [(t1, (a1 - a0) % SEQ_MOD) for acks in log.flows.values()
            for (_, a0), (t1, a1) in zip(acks, acks[1:], strict=False)]


def acked_bytes(log: AckLog) -> int:
    """The bytes all the log's ACKs newly acknowledged."""
    return sum(b for _, b in advances(log))


def pair_rates(log: AckLog, mss: int) -> list[float]:
    """Mbit/s of each pair of consecutive ACKs of one connection
    that acknowledged at most a few segments (a long gap is an idle or
    recovering sender, not a spacing)."""
    out = []
    most = 4 * (mss or DEFAULT_MSS)
    for acks in log.flows.values():
        for (t0, a0), (t1, a1) in zip(acks, acks[1:], strict=False):
            dt = t1 - t0
            acked = (a1 - a0) % SEQ_MOD
            if dt <= 0 or acked == 0 or acked > most:
                continue
            out.append(acked * 8e3 / dt)
    return out


# Histogram of log2(rate): bins of 1/64 octave (about 1.1%), smoothed over
# +-4 bins (about +-4.4%): narrower than the link-rate peak the testbed's
# delay line spreads (+-5-10%), wider than one timer tick at 150 Mbit/s.
BIN = 1 / 64
SMOOTH = 4
BAND = 0.08  # link-rate pairs: within 8% of the peak
MIN_PAIRS = 20  # in the band, for an estimate to be trusted
MIN_SHARE = 0.25  # of the pairs above the floor, in the band
# A band of at least this many pairs is trusted whatever its share; None:
# off. A large band of a small share can still be a sub-peak below the link
# (estimates only this clause trusted read 20-34% low), so it is off, and
# stays a setting so that the estimator can be scored with it.
LARGE_BAND: int | None = None
FLOOR = 0.95  # x the best probe goodput: the capacity is not below it
Z_90 = 1.645
# Largest error of the estimate on six testbed paths it was designed on
# (20-150 Mbit/s, 1-30 cross flows, DropTail and RED, CUBIC, Reno and BBR).
BIAS = 0.02


@dataclass(frozen=True)
class CapacityEstimate:
    """The bottleneck's capacity as TCP goodput (Mbit/s) from ACK spacing."""

    goodput_mbps: float | None  # None: no estimate at all
    low_mbps: float | None  # 90% interval
    high_mbps: float | None
    pairs: int  # ACK pairs at the link rate
    considered: int  # ACK pairs above the floor
    trusted: bool
    reason: str | None = None  # why not trusted
    method: str = "ack-spacing"


def _smoothed(counts: dict[int, int]) -> dict[int, float]:
    out: dict[int, float] = {}
    for b in counts:
        for k in range(b - SMOOTH, b + SMOOTH + 1):
            if k not in out:
                out[k] = sum(counts.get(j, 0) * (SMOOTH + 1 - abs(j - k))
                             for j in range(k - SMOOTH, k + SMOOTH + 1))
    return out


def estimate_capacity(rates: Sequence[float], floor_mbps: float = 0.0) -> CapacityEstimate:
    """Capacity from ACK pair rates (Mbit/s, `pair_rates` of one probe or
    more), as the densest band of them at or above FLOOR x `floor_mbps` (the
    best probe goodput: a path carries at least what was measured on it, and
    the pairs below it are mostly spaced by other traffic)."""
    floor = floor_mbps * FLOOR
    above = sorted(r for r in rates if r >= floor and r > 0)
    if not above:
        return CapacityEstimate(None, None, None, 0, 0, False,
                                "no ACK pairs above the probes' own goodput")
    counts: dict[int, int] = {}
    for r in above:
        b = math.floor(math.log2(r) / BIN)
        counts[b] = counts.get(b, 0) + 1
    density = _smoothed(counts)
    lowest = math.floor(math.log2(above[0]) / BIN)
    peak = max((b for b in density if b >= lowest), key=lambda b: (density[b], -b))
    centre = 2 ** ((peak + 0.5) * BIN)
    band = [r for r in above if abs(r / centre - 1) <= BAND]
    if not band:
        return CapacityEstimate(None, None, None, 0, len(above), False,
                                "no peak in the ACK spacing")
    k = len(band)
    median = band[k // 2] if k % 2 else (band[k // 2 - 1] + band[k // 2]) / 2
    # Distribution-free 90% interval of a median: order statistics
    # k/2 -+ z sqrt(k)/2, widened by half a bin (the histogram's resolution).
    # The method's own bias on the testbed (docs/advise.md) is added: a
    # median of a thousand pairs is precise, not necessarily exact.
    half = Z_90 * math.sqrt(k) / 2
    lo = min(band[max(0, math.floor(k / 2 - half))] * 2 ** (-BIN / 2), median * (1 - BIAS))
    hi = max(band[min(k - 1, math.ceil(k / 2 + half))] * 2 ** (BIN / 2), median * (1 + BIAS))
    reason = None
    if k < MIN_PAIRS:
        reason = f"only {k} ACK pairs at the link rate (at least {MIN_PAIRS} wanted)"
    elif k < MIN_SHARE * len(above) and (LARGE_BAND is None or k < LARGE_BAND):
        reason = (f"no clear peak in the ACK spacing ({k} of {len(above)} pairs near "
                  f"{median:.1f} Mbit/s)")
    return CapacityEstimate(median, lo, hi, k, len(above),
                            reason is None, reason)


# A transfer's window (not a probe's) nearer than this to the connections'
# own goodput may read their share of a shared path, not the link's rate:
# on the testbed one on a 40 Mbit/s path shared with 2 CUBIC flows gave a
# trusted 19.2, the 2-stream transfer's share (exporter/acksampling.py).
SHARE_MARGIN = 1.2


# A transfer's connections send among other traffic's packets: a pair whose
# two ACKed segments had j of the other traffic's between them in the queue
# reads the link's rate C over 1 + j/2 (a delayed ACK covers 2 segments), so
# its pairs peak at C and below it, at 2C/3, C/2, C/3 ... When a lower peak
# holds more pairs, the densest band is that one: beside 2 CUBIC flows a
# scout's first seconds mostly peak at C/3 or C/2, with a trusted band at
# the link above (tests/integration/test_scout_acks.py). So the estimate
# climbs to a trusted band above, looking from CLIMB x the one it has, but
# only to a band of at least CLIMB_PAIRS x its pairs: ACKs bunched on the
# way back (a delay line draining) also make trusted bands above the link,
# small ones (a few dozen pairs beside a link band of a thousand), while a
# link band holds 0.75-1.6x the pairs of the sub-peak below it.
CLIMB = 1.3  # below 1.5 (2C/3 to C, the nearest sub-peak), clear of a band's +-8%
CLIMB_PAIRS = 0.5
# The climb does not stop at a band it cannot trust: beside 2 CUBIC flows
# a scout's pairs can peak at C/3, then at C/2 with too small a share, and
# at the link above that. And a band's share is judged again among the
# pairs from CLIMB below it up, where no sub-peak of it lies (C/1.5 is the
# nearest), so the sub-peaks a transfer's own streams and the other
# traffic put below the link do not hide it: there a link band can hold
# 21% of all the pairs above the goodput but 32% of those from CLIMB below
# it up. Against the 25% a band needs among all the pairs, it needs RESHARE
# of these: above the 25% a smear between the link and its sub-peaks
# holds, below the link band's 32%.
RESHARE = 0.30
# Any band the climb trusts must also hold RESHARE_OF_ALL of all the
# window's pairs at or above the transfer's own goodput: bands of ACKs
# bunched after a batch hold fewer (4-8%), bands at the link more (10.7%
# or more). Bunched ACKs sit at the top of the pair rates, 4-16x the link,
# where the pairs from CLIMB below a band up are little more than the band
# itself, so its share among them alone would trust it. highest_band's
# `of_all=0` turns this check off.
RESHARE_OF_ALL = 0.09


def _band(rates: Sequence[float], floor_mbps: float, every: int,
          of_all: float) -> CapacityEstimate:
    """The densest band at or above `floor_mbps`; one not trusted for its
    share alone is trusted with RESHARE of the pairs from CLIMB below it.
    Either way it needs `of_all` of the `every` pairs at or above the
    transfer's own goodput."""
    e = estimate_capacity(rates, floor_mbps)
    if e.goodput_mbps is None or e.pairs < MIN_PAIRS:
        return e
    if not e.trusted:
        near = [r for r in rates if r >= max(e.goodput_mbps / CLIMB, floor_mbps * FLOOR)]
        if e.pairs < RESHARE * len(near):
            return e
    if e.pairs < of_all * every:
        return replace(e, trusted=False, reason=(
            f"no clear peak in the ACK spacing ({e.pairs} of {every} pairs near "
            f"{e.goodput_mbps:.1f} Mbit/s)"))
    return replace(e, trusted=True, reason=None)


def highest_band(rates: Sequence[float], floor_mbps: float,
                 of_all: float = RESHARE_OF_ALL) -> CapacityEstimate:
    """The estimate of the highest trusted band of pair rates at or above
    `floor_mbps` (the transfer's own goodput) reached by climbing (a
    transfer's, not a probe's: see CLIMB) that holds CLIMB_PAIRS of the
    largest band below it; the densest band when none qualifies."""
    every = sum(1 for r in rates if r >= floor_mbps * FLOOR and r > 0)
    e = best = _band(rates, floor_mbps, every, of_all)
    most = e.pairs
    while e.goodput_mbps is not None:
        e = _band(rates, CLIMB * e.goodput_mbps / FLOOR, every, of_all)
        if e.goodput_mbps is None:
            break
        if e.trusted and e.pairs >= CLIMB_PAIRS * most:
            best = e
        most = max(most, e.pairs)
    return best


def capacity_above_own(rates: Sequence[float], own_mbps: float,
                       whose: str = "connections'") -> CapacityEstimate:
    """The estimate from a transfer's ACK pair rates at or above its own
    goodput `own_mbps` (its highest trusted band), not trusted within
    SHARE_MARGIN of that goodput."""
    return share_refused(highest_band(rates, own_mbps), own_mbps, whose)


def share_refused(e: CapacityEstimate, own_mbps: float,
                  whose: str = "connections'") -> CapacityEstimate:
    """`e`, not trusted if it lies within SHARE_MARGIN of the goodput
    `own_mbps` of the connections whose ACKs gave it."""
    if e.trusted and e.goodput_mbps is not None and e.goodput_mbps < SHARE_MARGIN * own_mbps:
        return replace(e, trusted=False, reason=(
            f"the ACKs ran at {e.goodput_mbps:.1f} Mbit/s, within {SHARE_MARGIN:g}x of the "
            f"{whose} own {own_mbps:.1f}: on a shared path that is their share, not "
            "the link's"))
    return e

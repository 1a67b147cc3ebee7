"""How far the advised count moves from one round to the next: its range.

A probe's goodput is one draw of the path, not the path: on a crowded path
the same probe run again gets another share (one stream got 12.7 to 34.7
Mbit/s in four rounds of one path, docs/results/truth-rounds.md). The
spread inside one probe (model/confidence.py) treats its samples as
independent and misses that. So the range is the advice recomputed with the
probes' goodputs moved by the round-to-round spread, every probe up or down
by a factor 1 + s: the counts these measurements cannot tell apart.

s is fitted on the stored draws' probes against their truth rounds
(tamebpf_eval/range_design.py, docs/results/range-design.md), by the
path's RTT class and whether a probe ended unsettled (at its time limit, or
a fixed-length probe): those are where the rounds part most.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tamebpf.model import ModelInputError, Probe

LONG_RTT_MS = 80.0  # the RTT classes of issue 44: < 80 ms and >= 80 ms
# (long path, a probe unsettled) -> relative round-to-round spread s; fitted
# by tamebpf_eval/range_design.py (docs/results/range-design.md).
SPREAD: dict[tuple[bool, bool], float] = {
    (False, False): 0.225,
    (False, True): 0.275,
    (True, False): 0.275,
    (True, True): 0.725,
}
SETTLED = "settled"  # the one stop reason that says the probe converged


@dataclass(frozen=True)
class PathClass:
    """What the spread depends on: the path's RTT and how the probes ended."""

    rtt_ms: float | None
    unsettled: bool

    @property
    def long(self) -> bool:
        return self.rtt_ms is not None and self.rtt_ms >= LONG_RTT_MS


def path_class(rtts_ms: Sequence[float], stopped: Sequence[str | None]) -> PathClass:
    """rtts_ms: the probes' path RTTs (the SYN's, else smoothed; 0 unknown);
    stopped: each probe's stop reason (None: a fixed-length probe)."""
    known = [r for r in rtts_ms if r > 0]
    return PathClass(min(known) if known else None, any(s != SETTLED for s in stopped))


def spread_for(cls: PathClass, table: dict[tuple[bool, bool], float] | None = None) -> float:
    return (SPREAD if table is None else table)[(cls.long, cls.unsettled)]


def count_range(count: Callable[[Sequence[Probe]], int], probes: Sequence[Probe], n: int,
                spread: float) -> tuple[int, int]:
    """[low, high] of the counts `count` (probes -> advised count, the
    advice's own fit and rules) gives with each probe's goodput times 1 + s
    or 1 / (1 + s), every combination; always holds n. A combination with
    no fit adds nothing."""
    counts = [n]
    if spread > 0.0:
        f = 1.0 + spread
        for signs in itertools.product((f, 1.0 / f), repeat=len(probes)):
            moved = [Probe(p.streams, p.throughput * k) for p, k in zip(probes, signs, strict=True)]
            try:
                counts.append(count(moved))
            except ModelInputError:
                continue
    return min(counts), max(counts)


def holds(streams_range: tuple[int, int], n: int) -> bool:
    return streams_range[0] <= n <= streams_range[1]

"""How far the advised count moves from one round to the next: its range.

A probe's goodput is one sample of the path, not the path: on a crowded
path the same probe run again gets another share (one stream got 12.7 to
34.7 Mbit/s in four rounds of one path). The spread inside one probe
(model/confidence.py) treats its samples as independent and misses that.
So the range is the advice recomputed with the probes' goodputs moved by
the round-to-round spread, every probe up or down by a factor 1 + s: the
counts these measurements cannot tell apart. The impact range at each
count is widened by the same moves (the impacts the moved fits give,
estimate/advice.py impact_confidence): the delta-method range of
model/confidence.py alone holds the measured impact in fewer than half
the cases.

s is fitted on stored probes against truth rounds of their paths, by the
path's RTT class and whether a probe ended unsettled (at its time limit, or
a fixed-length probe): those are where the rounds part most.

Transfers teach too: path memory pools the settled goodput windows that
transfers (and the scout of a following cap) showed on a path
(paths/pool.py). Their entry's range is made as a probe's is, with the
class spread: windows of one transfer, or of transfers minutes apart,
agree more than rounds an hour apart do, so a range narrowed by their
number held a round's best count less often than a probe's. What the
pool's own variation (`pooled_spread`) sets is how far a reading may stray
from the entry before the path counts as changed:

- the windows' relative spread is measured in logs around each stream
  count's own mean (windows at 2 and at 8 streams differ by the curve, not
  by noise), as a band like the class spreads (BAND_Z standard deviations),
  and shrunk toward the class spread with the weight of PRIOR_WINDOWS
  windows: one window alone says nothing of the spread (it is the class's),
  and two windows that happen to agree must not say "none";
- the pooled value's spread is that over sqrt(k) (k: the windows at the
  count with the fewest): the standard error of a mean of k draws;
- never above the class spread (the measured round-to-round bound), never
  below SPREAD_FLOOR.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

from tamebpf.model import ModelInputError, Probe

T = TypeVar("T")

LONG_RTT_MS = 80.0  # the spread's RTT classes: < 80 ms and >= 80 ms
# (long path, a probe unsettled) -> relative round-to-round spread s: per
# class the smallest s of a grid whose range holds a truth round's best
# count in 85% of rounds. On long paths whose probes ran to their limit no
# s of the grid reaches 85%, so the fit takes the grid's widest, 1.0.
SPREAD: dict[tuple[bool, bool], float] = {
    (False, False): 0.175,
    (False, True): 0.275,
    (True, False): 0.325,
    (True, True): 1.000,
}
SETTLED = "settled"  # the one stop reason that says the probe converged
# The length of the truth windows the class spreads are fitted on.
SPREAD_WINDOW_S = 15.0
# The narrowest a pooled range gets: 5%, the smallest target move the
# follow cap acts on. Below it the windows' agreement would claim more than
# minutes of a path can show; an assumption, as the rate of narrowing is.
SPREAD_FLOOR = 0.05
# How many windows' worth of weight the class spread keeps against the
# windows' own spread (see the module's docstring).
PRIOR_WINDOWS = 2.0
# The class spreads are bands (the range they make holds the best count in
# >= 85% of rounds), not standard deviations: a measured one is made a band
# of 90% of a normal.
BAND_Z = 1.645


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


def over_window(spread: float, seconds: float) -> float:
    """The spread of one reading over `seconds`: a window shorter than
    SPREAD_WINDOW_S is noisier by sqrt(SPREAD_WINDOW_S / seconds) (the
    sawtooth averages out over a window: 8 s give about 30% where 15 s give
    22.5%, as the follow cap's short window showed on the testbed); a longer
    one is taken as no quieter (round-to-round variation does not average
    out within a window)."""
    return spread * math.sqrt(max(1.0, SPREAD_WINDOW_S / seconds))


@dataclass(frozen=True)
class Pooled:
    """What a pool of windows says: one window's relative spread (the
    path's own, shrunk toward the class's) and the pooled value's (the
    change test's), both within SPREAD_FLOOR..the class spread."""

    window: float
    pooled: float


def pooled_spread(by_count: Sequence[Sequence[float]], class_spread: float) -> Pooled:
    """by_count: the windows' goodputs at each stream count (no window at
    all gives the class spread)."""
    cls = math.log1p(class_spread)
    logs = [[math.log(g) for g in ws] for ws in by_count if ws]
    if not logs:
        return Pooled(class_spread, class_spread)
    squares = sum((x - statistics.fmean(ws)) ** 2 for ws in logs for x in ws)
    dof = sum(len(ws) for ws in logs) - len(logs)
    var = (PRIOR_WINDOWS * cls ** 2 + BAND_Z ** 2 * squares) / (PRIOR_WINDOWS + dof)
    k = min(len(ws) for ws in logs)

    def bounded(log_band: float) -> float:
        if log_band >= cls * (1 - 1e-12):  # the class's own: exact, not log1p/expm1's round trip
            return class_spread
        return min(class_spread, max(SPREAD_FLOOR, math.expm1(log_band)))
    return Pooled(bounded(math.sqrt(var)), bounded(math.sqrt(var / k)))


def moved_probes(probes: Sequence[Probe], spread: float,
                 ceiling: float | None = None) -> Iterator[list[Probe]]:
    """The probes with each goodput times 1 + s or 1 / (1 + s), every
    combination (2^k sets; none for s = 0): the rounds these measurements
    cannot be told apart from, on which the ranges rerun the advice. With
    a ceiling (the path's capacity), a goodput moved above it is the
    ceiling: the most a round could have given, where a move past it has
    no fit and would add nothing."""
    if spread <= 0.0:
        return
    f = 1.0 + spread
    top = math.inf if ceiling is None else ceiling
    for factors in itertools.product((f, 1.0 / f), repeat=len(probes)):
        yield [Probe(p.streams, min(p.throughput * k, max(p.throughput, top)))
               for p, k in zip(probes, factors, strict=True)]


def rerun_moved(rerun: Callable[[Sequence[Probe]], T], probes: Sequence[Probe],
                spread: float, ceiling: float | None = None) -> list[T]:
    """`rerun` (the advice's own fit and rules) on each of moved_probes; a
    set with no fit adds nothing."""
    out = []
    for moved in moved_probes(probes, spread, ceiling):
        try:
            out.append(rerun(moved))
        except ModelInputError:
            continue
    return out


def count_range(count: Callable[[Sequence[Probe]], int], probes: Sequence[Probe], n: int,
                spread: float) -> tuple[int, int]:
    """[low, high] of the counts `count` (probes -> advised count, the
    advice's own fit and rules) gives on the moved probes (rerun_moved);
    always holds n."""
    counts = [n, *rerun_moved(count, probes, spread)]
    return min(counts), max(counts)


def holds(streams_range: tuple[int, int], n: int) -> bool:
    return streams_range[0] <= n <= streams_range[1]

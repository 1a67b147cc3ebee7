"""A path's pool of settled windows (docs/paths.md, "Learned from
transfers"): what transfers and a following cap's scout showed on the path,
across transfers and over time, until the path is marked changed.

Each passive entry carries its pool (the windows its fit and spread rest
on); the next one made for the path takes it over and adds its own, so one
long transfer's store steps and the transfers after it accumulate. A pool
restarts after a probe (its entry answers whole), and a path marked changed
learns nothing until a probe has. At each stream count the fit's point is
the median of the pool's windows; the spread narrows as windows accumulate
(estimate/spread.pooled_spread, where the rule and its assumption are).

Pure: no I/O.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

from tamebpf.estimate.spread import (
    SETTLED,
    SPREAD_WINDOW_S,
    Pooled,
    path_class,
    pooled_spread,
    spread_for,
)
from tamebpf.groups.passive_fit import Observation
from tamebpf.model import (
    DEFAULT_MODEL,
    Prediction,
    Probe,
    Settings,
    fit_capacity,
    fit_throughput,
    predict,
)
from tamebpf.paths.entry import PathEntry, Window
from tamebpf.paths.recall import entry_spread

# A window spans at least the truth windows the class spreads were fitted
# on: a few seconds of a sawtooth are no round. Shorter runs of samples
# wait for more.
MIN_WINDOW_S = SPREAD_WINDOW_S
# A pool keeps its newest windows: about half an hour of a transfer's
# minute-long store steps, where the spread is at its floor long before.
POOL_WINDOWS = 32


def window(streams: int, mbps: float, seconds: float) -> Window:
    """A window as the store keeps it (to 1 kbit/s and 0.1 s: a pool of
    POOL_WINDOWS stays a few hundred bytes a row)."""
    return Window(streams, round(mbps, 3), round(seconds, 1))


def fresh_windows(obs: Sequence[Observation], interval_s: float | None,
                  taken_before: Mapping[int, int]) -> dict[int, tuple[Window, int]]:
    """By stream count: the window a group's samples make since those
    already pooled (taken_before: the count's `taken` when its last window
    was pooled), if they span MIN_WINDOW_S, with the `taken` it reaches."""
    out: dict[int, tuple[Window, int]] = {}
    if not interval_s or interval_s <= 0:
        return out
    for o in obs:
        new = o.taken - taken_before.get(o.streams, 0)
        if new < 0:
            new = o.taken  # the group started over: its samples are all new
        recent = o.goodputs[-new:] if new > 0 else ()
        if len(recent) * interval_s >= MIN_WINDOW_S:
            out[o.streams] = (window(o.streams, statistics.median(recent),
                                     len(recent) * interval_s), o.taken)
    return out


def pool_of(known: PathEntry | None) -> tuple[Window, ...]:
    """The pool a new passive entry takes over: the newest entry's, if
    transfers made it and it is not marked changed; else none (after a
    probe, the pool starts anew)."""
    if known is None or known.source != "passive" or known.changed:
        return ()
    return known.windows


def pooled(pool: Sequence[Window], new: Sequence[Window]) -> tuple[Window, ...]:
    return tuple([*pool, *new][-POOL_WINDOWS:])


def by_count(pool: Sequence[Window], provisional: Mapping[int, float] | None = None
             ) -> dict[int, list[float]]:
    """The windows' goodputs at each stream count; a count the pool has no
    window for yet takes its provisional goodput (what the transfer shows
    so far), as one window."""
    out: dict[int, list[float]] = {}
    for w in pool:
        out.setdefault(w.streams, []).append(w.mbps)
    for n, g in (provisional or {}).items():
        out.setdefault(n, [g])
    return dict(sorted(out.items()))


def points(counts: Mapping[int, Sequence[float]]) -> list[Probe]:
    """The fit's points: the median at each count."""
    return [Probe(n, statistics.median(gs)) for n, gs in counts.items()]


def fit_points(ps: Sequence[Probe], capacity_mbps: float | None,
               settings: Settings) -> Prediction:
    """Two counts or more: the throughput fit (the model `advise` uses);
    one, with the capacity: the capacity fit. Raises ModelInputError if
    the points make no fit (ValueError: one count and no capacity)."""
    if len(ps) >= 2:
        return predict(fit_throughput(ps, DEFAULT_MODEL), settings)
    if capacity_mbps is None:
        raise ValueError("one stream count and no capacity")
    return predict(fit_capacity(ps, capacity_mbps), settings)


def class_spread(rtt_ms: float | None) -> float:
    """A transfer's windows are long and steady: the settled class."""
    return spread_for(path_class([rtt_ms or 0.0], [SETTLED]))


def spreads(counts: Mapping[int, Sequence[float]], rtt_ms: float | None) -> Pooled:
    return pooled_spread(list(counts.values()), class_spread(rtt_ms))


def reading_spread(entry: PathEntry) -> float | None:
    """How far one reading (a window) on the path may lie from another for
    noise alone: the pool's measured window spread, else the spread the
    entry's range was made with (a probe's class spread); None for an entry
    stored before ranges were, which says nothing of it."""
    if not entry.windows:
        return entry.spread
    return spreads(by_count(entry.windows), entry.rtt_ms).window


def change_tolerance(entry: PathEntry) -> float:
    """How far (relative) a transfer's goodput may lie from what the entry
    predicts before the path counts as changed: one window's spread and the
    pooled value's, together (in logs: independent errors add in squares),
    never above the class spread. Without a pool (a probed entry) that is
    the round-to-round spread its range was made with."""
    one = reading_spread(entry)
    if not entry.windows or one is None:
        return entry_spread(entry)
    pooled = spreads(by_count(entry.windows), entry.rtt_ms).pooled
    both = math.hypot(math.log1p(one), math.log1p(pooled))
    return min(class_spread(entry.rtt_ms), math.expm1(both))

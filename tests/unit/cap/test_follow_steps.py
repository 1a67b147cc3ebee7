"""The follow cap's steps from the path's spread (cap/follow.decide): a
target move within what the reading's noise allows is no change, one beyond
it is; unknown spread keeps the fixed MIN_CHANGE and FAST_DROP."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from tamebpf.cap.book import FollowSpec
from tamebpf.cap.follow import FAST_DROP, MIN_CHANGE, SHORT_S, WINDOW_S, decide
from tamebpf.cap.scout import ScoutReading, follow_target, target_range
from tamebpf.estimate.spread import SPREAD, over_window
from tamebpf.model import Settings
from tamebpf.paths.entry import Window
from tamebpf.paths.pool import reading_spread
from tests.unit.cap.test_cap_follow import KEY, LIMIT, C, probed_entry

SPEC = FollowSpec("/dtn", "198.18.3.2/32", KEY, LIMIT, "198.18.3.2", 0.0)
SETTINGS = Settings(max_impact=LIMIT)
# A class spread for the scenarios below: the short settled class's when
# they were written. The table itself is refitted as draws come in
# (estimate/spread.py), and these scenarios are about decide, not the table.
CLASS = 0.225


def reading(m: float, window_s: float = WINDOW_S, paced: float = 20.0) -> ScoutReading:
    """The scout beside `paced` Mbit/s of paced streams and m flows."""
    scout = (C - paced) / (m + 1)
    return ScoutReading(scout, paced + scout, window_s)


def target(r: ScoutReading) -> float:
    t = follow_target(r, C, SETTINGS).target_mbps
    assert t is not None
    return t


def test_a_move_within_the_noise_is_no_change_and_one_beyond_it_is() -> None:
    r = reading(5.0)
    band = target_range(r, C, SETTINGS, over_window(CLASS, WINDOW_S))
    assert band is not None
    inside = next(x for x in (band[1], band[0]) if abs(target(r) / x - 1) > MIN_CHANGE)
    # Today's fixed step takes it; the path's spread says it is noise.
    assert decide(SPEC, r, C, inside, 0.0).change is not None
    assert decide(SPEC, r, C, inside, 0.0, spread=CLASS).change is None
    beyond = band[1] * 1.05
    d = decide(SPEC, r, C, beyond, 0.0, spread=CLASS)
    assert d.change is not None and d.change.to_mbps == target(r)
    # The floor holds where the spread is narrower than MIN_CHANGE.
    near = target(r) * (1 + MIN_CHANGE / 2)
    assert decide(SPEC, r, C, near, 0.0, spread=0.001).change is None


def test_the_fast_drop_waits_for_a_drop_beyond_the_short_windows_noise() -> None:
    """A short reading 20% under the target in force: past FAST_DROP (the
    fixed margin takes it), within the sawtooth of 8 s on a path whose
    spread is wide (the spread's margin waits for the whole window)."""
    long = reading(4.0)
    current = target(long)
    short = next(reading(m, SHORT_S) for m in (x / 10 for x in range(40, 200))
                 if target(reading(m, SHORT_S)) < current * (1 - FAST_DROP))
    assert decide(SPEC, long, C, current, 0.0, short).reading == short
    wide = SPREAD[(True, True)]
    band = target_range(short, C, SETTINGS, over_window(wide, SHORT_S))
    assert band is not None and band[1] >= current
    assert decide(SPEC, long, C, current, 0.0, short, spread=wide).reading == long
    # A drop beyond the noise: taken at once.
    much = reading(60.0, SHORT_S)
    assert decide(SPEC, long, C, current, 0.0, much, spread=CLASS).reading == much


def test_a_pooled_entry_gives_the_paths_own_narrower_spread() -> None:
    probe = replace(probed_entry(), spread=CLASS)
    assert reading_spread(probe) == CLASS
    assert reading_spread(replace(probe, spread=None)) is None, "no spread: today's steps"
    agreeing = tuple(Window(1, C / 9 * (1 + 0.01 * (-1) ** i), 20.0) for i in range(12))
    pooled = replace(probe, source="passive", probe_kind="none", windows=agreeing)
    narrow = reading_spread(pooled)
    assert narrow is not None and narrow < CLASS
    # A move the class spread calls noise is a change on the path's own.
    r = reading(8.0)
    wide = target_range(r, C, SETTINGS, over_window(CLASS, WINDOW_S))
    tight = target_range(r, C, SETTINGS, over_window(narrow, WINDOW_S))
    assert wide is not None and tight is not None
    moved = next(x for x in (target(r) * (1 + i / 100) for i in range(-40, 41))
                 if wide[0] <= x <= wide[1] and not tight[0] <= x <= tight[1]
                 and abs(x / target(r) - 1) > MIN_CHANGE)
    assert decide(SPEC, r, C, moved, 0.0, spread=CLASS).change is None
    assert decide(SPEC, r, C, moved, 0.0, spread=narrow).change is not None


@settings(max_examples=60, deadline=None)
@given(st.floats(min_value=0.5, max_value=30.0), st.floats(min_value=5.0, max_value=120.0),
       st.floats(min_value=0.0, max_value=0.8))
def test_the_spread_only_holds_changes_back(m: float, current: float, spread: float) -> None:
    """A change the spread lets through is one the fixed floor takes too,
    and with no spread at all (0) the steps are today's."""
    r = reading(m)
    today = decide(SPEC, r, C, current, 0.0).change is not None
    if decide(SPEC, r, C, current, 0.0, spread=spread).change is not None:
        assert today
    assert (decide(SPEC, r, C, current, 0.0, spread=0.0).change is not None) == today

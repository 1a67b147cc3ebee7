"""Pooling settled windows across transfers and time (paths/pool.py,
paths/passive.py) and the spread that narrows with them
(estimate/spread.pooled_spread)."""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tamebpf.estimate.spread import SPREAD, SPREAD_FLOOR, pooled_spread
from tamebpf.groups.counters import Counters
from tamebpf.groups.group import Group, GroupKey
from tamebpf.groups.passive_fit import Observation
from tamebpf.paths.entry import Window
from tamebpf.paths.passive import PathLearner, learn
from tamebpf.paths.pool import MIN_WINDOW_S, POOL_WINDOWS, change_tolerance, fresh_windows
from tamebpf.paths.recall import recall
from tamebpf.paths.store import PathStore
from tests.unit.paths.test_paths_passive import KEY, SETTINGS, probed, share

CLASS = SPREAD[(False, False)]  # a transfer's windows: the settled class (rtt 20 ms)


def transfer(goodputs: list[float], taken: int | None = None, streams: int = 6,
             owner: str = "iperf3", interval_s: float = 1.0) -> Group:
    """A group at one stream count whose samples (interval_s each) had
    these goodputs; `taken`: how many samples the count took in all."""
    obs = (Observation(streams, statistics.median(goodputs), 0.001, 0.02, len(goodputs),
                       tuple(goodputs), len(goodputs) if taken is None else taken),)
    return Group(GroupKey(owner, "198.18.3.2"), owner, None, "198.18.3.2", streams, streams,
                 goodputs[-1] * 1e6, 0.001, 20000.0, "cubic", Counters(), 0, None, None,
                 interval_s, observed=obs)


def test_every_sample_joins_the_pool_once_and_short_runs_wait() -> None:
    g = transfer([10.0] * 20 + [20.0] * 20, taken=40)
    got = fresh_windows(g.observed, 1.0, {})
    assert list(got) == [6] and got[6][1] == 40
    w = got[6][0]
    assert (w.streams, w.seconds, w.mbps) == (6, 40.0, 15.0)
    # Only the 20 samples taken since the last pooled window.
    later = fresh_windows(g.observed, 1.0, {6: 20})
    assert later[6][0].mbps == 20.0 and later[6][0].seconds == 20.0
    # Fewer seconds than a window: they wait for more.
    assert fresh_windows(g.observed, 1.0, {6: 40 - int(MIN_WINDOW_S) + 1}) == {}
    # A group that started over (fewer taken than pooled): all its samples are new.
    assert fresh_windows(g.observed, 1.0, {6: 400})[6][0].seconds == 40.0
    assert fresh_windows(g.observed, None, {}) == {}


def test_windows_of_two_transfers_pool(tmp_path: Path) -> None:
    store = PathStore(str(tmp_path))
    store.put(replace(probed(), when=time.time() - 600))
    learner = PathLearner(store, "tb-snd", SETTINGS, store_every_s=60.0)
    t0 = time.time() - 500
    first = [share(6) * 0.96] * 30
    learner.observe([transfer(first)], t0)
    e1 = store.newest(KEY)
    assert e1 is not None and e1.source == "passive" and len(e1.windows) == 1
    # The same transfer a minute later: only its new samples make a window.
    learner.observe([transfer(first + [share(6)] * 30, taken=60)], t0 + 60)
    e2 = store.newest(KEY)
    assert e2 is not None and [w.seconds for w in e2.windows] == [30.0, 30.0]
    # Another transfer (another process), later: its windows join the pool.
    learner.observe([], t0 + 200)
    learner.observe([transfer([share(6) * 1.04] * 30, owner="xrdcp")], t0 + 300)
    e3 = store.newest(KEY)
    assert e3 is not None and len(e3.windows) == 3 and e3.pooled_s == 90.0
    assert e3.fit.probes == ((6, pytest.approx(share(6))),), "the point is the pool's median"
    # However well the windows agree, the range is a probe's: the class spread
    # (windows minutes apart agree more than rounds do).
    assert (e1.spread, e2.spread, e3.spread) == (pytest.approx(CLASS),) * 3
    r1, r3 = recall(e1, SETTINGS).streams_range, recall(e3, SETTINGS).streams_range
    assert r3 == r1, (r1, r3)


def test_a_changed_path_or_a_probe_restarts_the_pool() -> None:
    window = Window(6, share(6), 30.0)
    pooled_entry = replace(probed(), source="passive", probe_kind="none", spread=0.1,
                           windows=(window,) * 4)
    fresh = [Window(6, share(6), 30.0)]
    got = learn(transfer([share(6)] * 30), "tb-snd", 2000.0, SETTINGS, pooled_entry,
                fresh=fresh)
    assert got is not None and got.entry is not None and len(got.entry.windows) == 5
    # Marked changed: nothing is learned (advise probes first) ...
    changed = learn(transfer([share(6)] * 30), "tb-snd", 2000.0, SETTINGS,
                    pooled_entry.marked_changed(), fresh=fresh)
    assert changed is not None and changed.entry is None
    # ... and after the probe the pool starts from its own windows only.
    after = learn(transfer([share(6)] * 30), "tb-snd", 2000.0, SETTINGS, probed(), fresh=fresh)
    assert after is not None and after.entry is not None and after.entry.windows == tuple(fresh)
    # A pool keeps its newest windows.
    full = replace(pooled_entry, windows=(window,) * POOL_WINDOWS)
    kept = learn(transfer([share(6)] * 30), "tb-snd", 2000.0, SETTINGS, full,
                 fresh=[Window(6, share(6) * 1.01, 30.0)])
    assert kept is not None and kept.entry is not None
    assert len(kept.entry.windows) == POOL_WINDOWS and kept.entry.windows[-1].mbps > share(6)


def test_the_change_test_narrows_with_the_pool() -> None:
    """A goodput under the prediction by less than the class's spread: noise
    for one probed round, a change for a path whose 20 windows agreed
    within 2%. The move lies midway between the two tolerances, so the
    scenario holds whatever the fitted table says."""
    probe = replace(probed(), rtt_ms=20.0, spread=CLASS)
    windows = tuple(Window(6, share(6) * (1 + 0.02 * (-1) ** i), 60.0) for i in range(20))
    pooled_entry = replace(probe, source="passive", probe_kind="none", windows=windows,
                           spread=pooled_spread([[w.mbps for w in windows]], CLASS).pooled)
    assert change_tolerance(probe) == CLASS
    tight = change_tolerance(pooled_entry)
    assert SPREAD_FLOOR <= tight < CLASS, (tight, CLASS)
    low = transfer([share(6) * (1 - (tight + CLASS) / 2)] * 30)
    assert (got := learn(low, "tb-snd", 2000.0, SETTINGS, probe)) is not None \
        and got.changed is None
    assert (got := learn(low, "tb-snd", 2000.0, SETTINGS, pooled_entry)) is not None \
        and got.changed


def test_a_transfer_at_another_count_joins_the_pool_and_makes_a_fit() -> None:
    """Windows at 2 streams from one transfer and at 8 from a later one:
    two counts, a fit (today one transfer had to show both)."""
    at2 = replace(probed(capacity=None), source="passive", probe_kind="none",
                  windows=(Window(2, share(2), 60.0),))
    got = learn(transfer([share(8)] * 30, streams=8), "tb-snd", 2000.0, SETTINGS, at2,
                fresh=[Window(8, share(8), 30.0)])
    assert got is not None and got.entry is not None
    e = got.entry
    assert e.fit.estimator == "throughput" and [n for n, _ in e.fit.probes] == [2, 8]
    assert recall(e, SETTINGS).curve[3].throughput == pytest.approx(share(4), rel=0.02)


def test_a_pooled_entry_round_trips_through_the_store(tmp_path: Path) -> None:
    store = PathStore(str(tmp_path))
    e = replace(probed(), when=time.time(), source="passive", probe_kind="none",
                windows=(Window(6, 40.123456789, 19.5), Window(1, 11.1, 60.0)))
    store.put(e)
    got = store.newest(KEY)
    assert got is not None and got.windows == e.windows


spreads = st.sampled_from(sorted(set(SPREAD.values())))
goodputs = st.floats(min_value=0.1, max_value=1e4)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(goodputs, min_size=1, max_size=12), min_size=1, max_size=4), spreads)
def test_the_spread_stays_between_the_floor_and_the_class(counts: list[list[float]],
                                                          cls: float) -> None:
    p = pooled_spread(counts, cls)
    assert SPREAD_FLOOR <= p.pooled <= p.window <= cls
    if all(len(ws) == 1 for ws in counts):
        assert p.pooled == p.window == pytest.approx(cls), "one window a count: the class's"


@settings(max_examples=100, deadline=None)
@given(st.floats(min_value=1.0, max_value=1e4), st.floats(min_value=0.0, max_value=0.3),
       spreads)
def test_the_spread_narrows_as_windows_accumulate(level: float, wobble: float,
                                                  cls: float) -> None:
    """Windows that wobble by the same amount: each more narrows the
    pooled spread (or holds it at the floor), the first is the class's."""
    seen = [pooled_spread([[level * (1 + wobble * (-1) ** i) for i in range(k)]], cls).pooled
            for k in range(1, 40)]
    assert seen[0] == cls
    assert all(b <= a + 1e-12 for a, b in zip(seen, seen[1:], strict=False)), seen
    if wobble <= 0.01:
        assert seen[-1] == SPREAD_FLOOR


def test_the_spread_is_the_windows_own_standard_error() -> None:
    """Many windows: the band is BAND_Z standard errors of their mean."""
    from tamebpf.estimate.spread import BAND_Z

    ws = [100.0 * math.exp(0.1 * (-1) ** i) for i in range(400)]
    p = pooled_spread([ws], SPREAD[(True, True)])
    assert p.window == pytest.approx(math.expm1(BAND_Z * 0.1), rel=0.05)  # the prior's weight
    assert p.pooled == SPREAD_FLOOR  # 0.16 / sqrt(400) is below the floor
    assert pooled_spread([ws[:16]], SPREAD[(True, True)]).pooled == pytest.approx(
        math.expm1(math.sqrt((2 * math.log1p(SPREAD[(True, True)]) ** 2
                              + BAND_Z ** 2 * 16 * 0.01) / 17 / 16)), rel=1e-6)


def alternating(k: int, amplitude: float) -> list[float]:
    return [50.0 * (1 + amplitude * (1 if i % 2 else -1)) for i in range(k)]


def test_the_change_tests_pooled_spread_narrows_so() -> None:
    """How the pooled spread (the change test's) narrows with windows on a
    path under 80 ms (a property of the formula, not a measurement):
    windows 1% either side of their level give the class spread, then 9.8%,
    6.9%, 5.3% and the 5% floor at 5; 7.5% either side give 9.2% at 3, 6.7%
    at 5 and the floor first at 8."""
    def s(k: int, amplitude: float) -> float:
        return round(pooled_spread([alternating(k, amplitude)], CLASS).pooled, 3)
    assert [s(k, 0.01) for k in range(1, 6)] == [CLASS, 0.098, 0.069, 0.053, SPREAD_FLOOR]
    assert (s(3, 0.075), s(5, 0.075)) == (0.092, 0.067)
    assert min(k for k in range(1, 20) if s(k, 0.075) == SPREAD_FLOOR) == 8

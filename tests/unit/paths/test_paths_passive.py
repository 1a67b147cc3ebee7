"""Learning paths from transfers (paths/passive.py): points -> entries, the
changed mark, and how often the learner writes."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from tamebpf.estimate.spread import SPREAD
from tamebpf.groups.counters import Counters
from tamebpf.groups.group import Group, GroupKey
from tamebpf.groups.passive_fit import Observation, passive_fit
from tamebpf.model import Probe, Settings, fit_capacity, fit_throughput, predict
from tamebpf.paths.entry import REMOTE_CC, FitData, PathEntry, PathKey
from tamebpf.paths.passive import PathLearner, change_tolerance, learn
from tamebpf.paths.recall import recall
from tamebpf.paths.store import PathStore

SETTINGS = Settings(max_impact=0.10)
KEY = PathKey("198.18.3.2/32", "tb-snd", "cubic")
C = 100.0  # capacity, Mbit/s of goodput
M = 4.0  # competing flows


def share(n: int) -> float:
    return C * n / (n + M)


def group(*counts: int, cc: str = "cubic", scale: float = 1.0, samples: int = 5) -> Group:
    obs = tuple(Observation(n, share(n) * scale, 0.001, 0.02, samples) for n in counts)
    return Group(GroupKey("iperf3", "198.18.3.2"), "iperf3", None, "198.18.3.2", counts[-1],
                 counts[-1], share(counts[-1]) * 1e6, 0.001, 20000.0, cc, Counters(), 0,
                 passive_fit(obs, SETTINGS, [cc]) if len(obs) >= 2 else None, None, 1.0,
                 observed=obs)


def probed(capacity: float | None = C) -> PathEntry:
    """An entry as a settled advise leaves it, anchored on the capacity."""
    probes = [Probe(1, share(1)), Probe(10, share(10))]
    fit = fit_capacity(probes, capacity) if capacity else fit_throughput(probes, "square")
    a = predict(fit, SETTINGS).advice
    return PathEntry(KEY, 1000.0, "probe", "settled",
                     FitData("capacity" if capacity else "throughput",
                             tuple((p.streams, p.throughput) for p in probes), fit.model,
                             fit.coeffs, fit.evidence_limit, fit.capacity),
                     a.num_flows, a.max_nondisruptive_thru, a.cross_traffic_impact, 0.10,
                     capacity_mbps=capacity, capacity_method="ack-train")


def test_two_counts_give_a_fit_that_predicts_a_third() -> None:
    got = learn(group(2, 8), "tb-snd", 2000.0, SETTINGS, None)
    assert got is not None and got.entry is not None and got.changed is None
    e = got.entry
    assert (e.key, e.source, e.probe_kind, e.fit.estimator) == (KEY, "passive", "none",
                                                                "throughput")
    at4 = recall(e, SETTINGS).curve[3].throughput
    assert at4 == pytest.approx(share(4), rel=0.02)
    assert e.rtt_ms == pytest.approx(20.0)


def test_a_download_is_learned_under_its_own_key() -> None:
    """A receiving group's path is the download's: direction receive, its
    remote senders' congestion control unknown (REMOTE_CC)."""
    down = replace(group(2, 8), key=GroupKey("iperf3", "198.18.3.2", "receive"),
                   congestion_control=None, loss_rate=None)
    got = learn(down, "tb-snd", 2000.0, SETTINGS, None)
    assert got is not None and got.entry is not None, got
    assert got.entry.key == PathKey("198.18.3.2/32", "tb-snd", REMOTE_CC, "receive")
    assert recall(got.entry, SETTINGS).curve[3].throughput == pytest.approx(share(4), rel=0.02)


def test_one_count_with_a_known_capacity_gives_the_competing_flows() -> None:
    got = learn(group(6), "tb-snd", 2000.0, SETTINGS, probed())
    assert got is not None and got.entry is not None
    assert got.entry.competing_flows == pytest.approx(M, rel=0.01)
    assert got.entry.capacity_mbps == C
    # Without a capacity one point says nothing about the curve.
    got = learn(group(6), "tb-snd", 2000.0, SETTINGS, probed(capacity=None))
    assert got is not None and got.entry is None and got.changed is None


TOLERANCE = change_tolerance(probed())


@pytest.mark.parametrize("scale", [1 / (1 + 2 * TOLERANCE), 1 + 2 * TOLERANCE])
def test_goodput_outside_the_interval_marks_the_path_changed(scale: float) -> None:
    got = learn(group(6, scale=scale), "tb-snd", 2000.0, SETTINGS, probed())
    assert got is not None and got.changed and got.entry is None, got
    assert "6 streams" in got.changed
    inside = learn(group(6, scale=1 + TOLERANCE / 2), "tb-snd", 2000.0, SETTINGS,
                   probed())
    assert inside is not None and inside.changed is None
    # Once changed, nothing is learned until an advise has probed again.
    again = learn(group(2, 8), "tb-snd", 2000.0, SETTINGS, replace(probed(), changed=True))
    assert again is not None and again.entry is None and again.changed is None


def test_a_path_only_transfers_taught_is_learned_anew_after_a_mark() -> None:
    """No probe will come for such a path (no server answered there): the
    transfer after the mark makes its new entry, a fresh pool on the
    marked entry's capacity, instead of leaving advise nothing."""
    marked = replace(probed(), source="passive", changed=True)
    got = learn(group(6, scale=0.7), "tb-snd", 2000.0, SETTINGS, marked, relearn=True)
    assert got is not None and got.entry is not None and got.changed is None, got
    e = got.entry
    assert not e.changed and e.capacity_mbps == C and e.fit.probes == (
        (6, pytest.approx(share(6) * 0.7)),)
    assert e.competing_flows is not None and e.competing_flows > M  # less share: more flows
    # Without relearn (a path a probe answered), it waits for the probe.
    waits = learn(group(6, scale=0.7), "tb-snd", 2000.0, SETTINGS, marked)
    assert waits is not None and waits.entry is None and waits.changed is None


def test_the_learner_relearns_only_paths_no_probe_answered(tmp_path: Path) -> None:
    t0 = time.time() - 100
    for probe_first in (False, True):
        store = PathStore(str(tmp_path / str(probe_first)))
        if probe_first:
            store.put(replace(probed(), when=t0 - 10))
        learner = PathLearner(store, "tb-snd", SETTINGS, store_every_s=60.0)
        learner.observe([group(2, 8)], t0)
        learner.observe([group(2, 8, scale=0.5)], t0 + 10)  # outside: marked
        newest = store.newest(KEY)
        assert newest is not None and newest.changed
        learner.observe([group(2, 8, scale=0.5)], t0 + 11)  # the next reading
        newest = store.newest(KEY)
        assert newest is not None
        if probe_first:
            assert newest.changed, "a path a probe answered was learned anew"
        else:
            assert not newest.changed and newest.source == "passive", newest
            assert dict(newest.fit.probes)[8] == pytest.approx(share(8) * 0.5)


def test_mixed_or_bbr_transfers_teach_no_fit() -> None:
    assert learn(group(2, 8, cc="bbr,cubic"), "tb-snd", 2000.0, SETTINGS, None) is None
    got = learn(group(2, 8, cc="bbr"), "tb-snd", 2000.0, SETTINGS, None)
    assert got is not None and got.entry is None


def test_the_learner_stores_new_points_and_marks_changes(tmp_path: Path) -> None:
    store = PathStore(str(tmp_path))
    learner = PathLearner(store, "tb-snd", SETTINGS, store_every_s=60.0)
    # The store expires entries older than a week and refuses those dated
    # more than a minute ahead: the readings below span 110 s.
    t0 = time.time() - 200
    learner.observe([group(2, 8)], t0)
    learner.observe([group(2, 8)], t0 + 10)  # the same points a moment later: no write
    assert store.count() == 1
    learner.observe([group(2, 4, 8)], t0 + 20)  # a new count: written at once
    learner.observe([group(2, 8)], t0 + 100)  # the same counts, later: written again
    assert store.count() == 3
    learner.observe([group(2, 8, samples=9)], t0 + 101)  # not yet twice the samples
    learner.observe([group(2, 8, samples=10)], t0 + 102)  # twice: a firmer median, written
    assert store.count() == 4
    newest = store.newest(KEY)
    assert newest is not None and newest.source == "passive" and not newest.changed
    learner.observe([group(2, 8, scale=0.5)], t0 + 110)
    newest = store.newest(KEY)
    assert newest is not None and newest.changed and learner.changed >= 1
    assert "streams got" in learner.why_changed[KEY]  # what run's summary says


def test_an_absurd_lesson_is_not_stored(tmp_path: Path) -> None:
    """What transfers taught passes the check rows pass (paths/valid.py):
    goodputs of some 80 Tbit/s (a counter gone wrong) are no entry."""
    store = PathStore(str(tmp_path))
    learner = PathLearner(store, "tb-snd", SETTINGS)
    learner.observe([group(2, 8, scale=1e6)], time.time())
    assert store.count() == 0 and learner.entries == 0
    learner.observe([group(2, 8)], time.time())
    assert store.count() == 1


def test_advises_own_probes_teach_nothing() -> None:
    from tamebpf.kernel.orphans import PREFIX, probe_name
    from tamebpf.paths.passive import PROBE_CGROUP

    # kernel/orphans.py names the probe cgroups; paths/ sits below kernel/
    # and keeps its own copy of the prefix, which must stay the same.
    assert PREFIX == PROBE_CGROUP and probe_name(123, 10).startswith(PROBE_CGROUP)
    g = replace(group(2, 8, scale=0.3), cgroup=f"/sys/fs/cgroup/{PROBE_CGROUP}123-10")
    assert learn(g, "tb-snd", 2000.0, SETTINGS, probed()) is None


def test_a_paced_group_teaches_nothing_and_marks_nothing() -> None:
    """A pace cap holds the group far below what the entry predicts at its
    count: that is our choice, not a changed path."""
    g = replace(group(16, scale=0.3), paced_bps=30e6)
    got = learn(g, "tb-snd", 2000.0, SETTINGS, probed())
    assert got is not None and got.entry is None and got.changed is None
    unpaced = learn(group(16, scale=0.3), "tb-snd", 2000.0, SETTINGS, probed())
    assert unpaced is not None and unpaced.changed  # the same goodput unpaced: changed


def test_a_pace_cap_that_did_not_bind_lets_the_group_teach() -> None:
    """`tamebpf run` at a target above what the path gives: the goodput
    (well under UNBOUND_SHARE of the target) is the path's own."""
    from tamebpf.paths.passive import UNBOUND_SHARE

    g = group(4)
    target = share(4) * 1e6 / UNBOUND_SHARE * 1.5
    got = learn(replace(g, paced_bps=target), "tb-snd", 2000.0, SETTINGS, probed())
    free = learn(g, "tb-snd", 2000.0, SETTINGS, probed())
    assert got is not None and got.entry is not None, "a cap far above the goodput blocked it"
    assert free is not None and free.entry is not None
    assert got.entry.advised_streams == free.entry.advised_streams
    held = learn(replace(g, paced_bps=share(4) * 1e6), "tb-snd", 2000.0, SETTINGS, probed())
    assert held is not None and held.entry is None, "a cap at the goodput taught the path"


def test_a_target_within_what_the_entry_expects_holds_the_group() -> None:
    """Fresh draw 10's case 9: `tamebpf run`'s following cap set 8 streams'
    target to what the entry gave at their count; beside 12 Reno flows
    they fell short of it (each stream gets the lesser of its pace and its
    share), and the learner marked the path changed, so advise had no
    answer. A target at or under the entry's expectation (times its
    tolerance) holds the group: no entry and no change. The same goodput
    with the cap far above it, or with none, is the path's own: changed."""
    from tamebpf.paths.passive import UNBOUND_SHARE

    expected = share(8)
    low = 1 / (1 + 2 * TOLERANCE)  # outside the interval, and under UNBOUND_SHARE
    assert low < UNBOUND_SHARE
    g = group(8, scale=low)
    for target in (expected, expected * (1 + TOLERANCE * 0.9)):
        held = learn(replace(g, paced_bps=target * 1e6), "tb-snd", 2000.0, SETTINGS, probed())
        assert held is not None and held.changed is None and held.entry is None, (target, held)
    for paced in (expected * (1 + TOLERANCE) * 1.5 * 1e6, None):
        got = learn(replace(g, paced_bps=paced), "tb-snd", 2000.0, SETTINGS, probed())
        assert got is not None and got.changed, (paced, got)


def test_a_target_at_or_above_the_capacity_holds_nothing() -> None:
    """`tamebpf run`'s 100 Mbit/s start on a path that carries 96: 8 streams
    got 83, over UNBOUND_SHARE of the target, yet the cap could not hold
    them; with the capacity its ACKs gave, the group teaches. Under a
    target below the capacity the same goodput is the cap's."""
    from tamebpf.paths.passive import UNBOUND_SHARE, MeasuredCapacity, held_by_its_cap

    g = replace(group(8), paced_bps=share(8) * 1e6 / UNBOUND_SHARE * 0.99)
    assert g.observed[0].goodput_mbps * 1e6 >= UNBOUND_SHARE * (g.paced_bps or 0)
    over = MeasuredCapacity(g.paced_bps / 1e6 * 0.96, None, None)
    got = learn(g, "tb-snd", 2000.0, SETTINGS, None, over)
    assert got is not None and got.entry is not None, "a target above the capacity held it"
    assert got.entry.capacity_mbps == over.mbps
    under = MeasuredCapacity(g.paced_bps / 1e6 * 1.2, None, None)
    held = learn(g, "tb-snd", 2000.0, SETTINGS, None, under)
    assert held is not None and held.entry is None, "a binding target taught the path"
    nothing = learn(g, "tb-snd", 2000.0, SETTINGS, None)
    assert nothing is not None and nothing.entry is None  # no capacity: it may have held
    # The entry's capacity counts as the measured one does.
    at_c = replace(group(8, scale=C * UNBOUND_SHARE / share(8)), paced_bps=C * 1e6)
    assert held_by_its_cap(at_c, None, None)
    assert not held_by_its_cap(at_c, probed(), None)
    assert held_by_its_cap(at_c, probed(C * 1.1), None)


def test_transfers_are_runs_of_entries_close_together() -> None:
    from tamebpf.paths.passive import TRANSFER_GAP_S, transfers

    assert transfers([]) == (0, 0.0)
    one = [100.0, 104.0, 130.0, 190.0]  # one transfer: entries at most STORE_EVERY_S apart
    assert transfers(one) == (1, 90.0)
    later = [190.0 + TRANSFER_GAP_S + 1, 190.0 + TRANSFER_GAP_S + 30]
    assert transfers(one + later) == (2, later[-1] - 100.0)


def test_one_count_with_the_capacity_its_own_acks_gave_makes_an_entry() -> None:
    from tamebpf.paths.passive import MeasuredCapacity

    alone = learn(group(4), "tb-snd", 2000.0, SETTINGS, None)
    assert alone is not None and alone.entry is None, "one count and no capacity taught"
    got = learn(group(4), "tb-snd", 2000.0, SETTINGS, None, MeasuredCapacity(C, 98.0, 102.0))
    assert got is not None and got.entry is not None
    e = got.entry
    assert (e.source, e.capacity_mbps, e.capacity_method) == ("passive", C,
                                                              "ack-spacing (transfer)")
    assert e.competing_flows == pytest.approx(M, rel=0.05)


def test_the_change_test_is_the_paths_round_to_round_spread() -> None:
    """A goodput over the prediction by more than a short settled path's
    spread and less than a long path's (whose probes ran to their limit) is
    a change on the first and noise on the second; the move lies midway
    between the two, so the scenario holds whatever the fitted table says."""
    short = replace(probed(), rtt_ms=20.0, spread=0.225)
    long = replace(probed(), rtt_ms=120.0, spread=None)  # a schema-1 entry: its RTT class
    wide = change_tolerance(long)
    assert change_tolerance(short) == 0.225 and wide == SPREAD[(True, True)]
    assert wide > 0.225, "a long path whose probes ran to their limit is the widest class"
    scale = 1 + (0.225 + wide) / 2
    moved = learn(group(6, scale=scale), "tb-snd", 2000.0, SETTINGS, short)
    assert moved is not None and moved.changed
    same = learn(group(6, scale=scale), "tb-snd", 2000.0, SETTINGS, long)
    assert same is not None and same.changed is None

"""export's ACK sampling windows (exporter/acksampling.py): which group gets
a window, how many a path gets an hour, and what a window's ACKs give. The
window itself is a fake here that hands back synthetic ACKs; the real one
is tested on the kernel (tests/integration/test_export_acks.py)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from tamebpf.common.errors import TamebpfError
from tamebpf.common.records import AckLog, Flow
from tamebpf.estimate.acktrain import CapacityEstimate
from tamebpf.exporter.acksampling import AckSampler
from tamebpf.groups.counters import Counters
from tamebpf.groups.group import Group, GroupKey
from tamebpf.groups.passive_fit import Observation
from tamebpf.model import Settings
from tamebpf.paths.entry import PathEntry, PathKey
from tamebpf.paths.passive import PathLearner
from tamebpf.paths.store import PathStore
from tests.unit.groups.test_groups_fakes import make_flow

LINK = 60.0  # Mbit/s of goodput at the bottleneck: the group below moves 36 of it
MSS = 1448
DEST = "10.0.0.2"


def group(cc: str = "cubic", paced: float | None = None, cgroup: str = "/test",
          observed: bool = True, direction: str = "send") -> Group:
    """A group of 4 streams moving 36 Mbit/s; a receiving one's congestion
    control is unknown (its senders')."""
    obs = (Observation(4, 36.0, 0.001, 0.02, 5),) if observed else ()
    return Group(GroupKey(cgroup, DEST, direction), "iperf3", cgroup, DEST, 4, 4, 36e6,
                 0.001, 20000.0, None if direction == "receive" else cc, Counters(), 0,
                 None, None, 1.0, observed=obs, paced_bps=paced)


def flows(at_s: float, direction: str = "send") -> list[Flow]:
    """Four streams that together moved (received) 36 Mbit/s since time 0;
    receiving, with this host's own bbr, which their data does not run."""
    moved = int(36e6 / 8 / 4 * at_s)
    if direction == "receive":
        return [make_flow(c, cgroup="/test", mss=MSS, bytes_received=moved, bytes_acked=1,
                          congestion_control="bbr", read_monotonic_ns=int(at_s * 1e9))
                for c in (1, 2, 3, 4)]
    return [make_flow(c, cgroup="/test", mss=MSS,
                      bytes_acked=moved, read_monotonic_ns=int(at_s * 1e9))
            for c in (1, 2, 3, 4)]


def key_of(f: Flow) -> GroupKey:
    return GroupKey(f.cgroup, f.remote_addr, f.direction)


class FakeWindow:
    """Each connection's ACKs two segments apart, spaced at `mbps`."""

    def __init__(self, cookies: Sequence[int], mbps: float, pairs: int) -> None:
        gap_ns = int(2 * MSS * 8e3 / mbps)
        self.log = AckLog({c: [(k * gap_ns, (k * 2 * MSS) % (1 << 32)) for k in range(pairs)]
                           for c in cookies})
        self.closed = False

    def read(self) -> AckLog:
        return self.log

    def close(self) -> None:
        self.closed = True


class Opener:
    def __init__(self, mbps: float = LINK, pairs: int = 200) -> None:
        self.mbps, self.pairs = mbps, pairs
        self.opened: list[tuple[list[int], str | None]] = []
        self.receiving: list[bool] = []  # each window's: whether it logged data
        self.windows: list[FakeWindow] = []

    def __call__(self, cookies: Sequence[int], netns: str | None, receive: bool) -> FakeWindow:
        self.opened.append((list(cookies), netns))
        self.receiving.append(receive)
        self.windows.append(FakeWindow(cookies, self.mbps, self.pairs))
        return self.windows[-1]


def sampler(opener: Opener, per_hour: int = 3) -> AckSampler:
    return AckSampler("tb-snd", "tb-snd", open_window=opener, window_s=5.0, per_hour=per_hour)


def sample(s: AckSampler, groups: list[Group], now: float = 100.0,
           newest: dict[PathKey, PathEntry] | None = None,
           direction: str = "send") -> CapacityEstimate | None:
    """One sample (`newest`: path memory's newest entries; none by default):
    the flows read when the window opens, then when it closes."""
    reads = iter([flows(10.0, direction), flows(15.0, direction)])
    return s.sample(groups, newest or {}, lambda: next(reads), key_of, lambda _s: False, now)


def test_a_loss_based_group_without_a_capacity_gets_one_window_and_a_capacity() -> None:
    opener = Opener()
    s = sampler(opener)
    e = sample(s, [group()])
    assert opener.opened == [([1, 2, 3, 4], "tb-snd")], opener.opened
    assert all(w.closed for w in opener.windows), "the window was left open"
    assert e is not None and e.trusted, e
    got = s.measured(100.0)[(DEST, "send")]
    assert got.mbps == pytest.approx(LINK, rel=0.02)
    assert s.measured(100.0 + 3601) == {}, "an hour-old capacity is not the path's now"
    assert s.counts() == {"capacity": 1, "none": 0}


def test_a_download_is_sampled_by_its_data_and_learned_as_one(tmp_path: Path) -> None:
    """A receiving group: its window logs data, its capacity is kept apart
    from an upload's to the same address, and path memory learns the
    download's path from it."""
    opener = Opener()
    s = sampler(opener)
    down = group(direction="receive")
    e = sample(s, [down], direction="receive")
    assert opener.receiving == [True], "a download's window logs its data segments"
    assert e is not None and e.trusted, e
    assert set(s.measured(100.0)) == {(DEST, "receive")}
    got = s.measured(100.0)[(DEST, "receive")]
    assert got.mbps == pytest.approx(LINK, rel=0.02) and got.method.startswith("data-spacing")
    learner = PathLearner(PathStore(str(tmp_path)), "tb-snd", Settings(max_impact=0.10))
    learner.observe([down], time.time(), s.measured(100.0))
    (entry,) = learner.newest([down]).values()
    assert (entry.key.direction, entry.key.congestion) == ("receive", "remote"), entry.key
    assert entry.capacity_method == "data-spacing (transfer)", entry
    # An upload to the same address still has no capacity: it gets its own window.
    sample(s, [group()], now=200.0)
    assert opener.receiving == [True, False]


@pytest.mark.parametrize(("g", "why"), [
    (group(paced=30e6), "a pace cap spaces the ACKs at its own rate"),
    (group(cc="bbr"), "BBR paces"),
    (group(cgroup="/tamebpf-probe-99-1"), "advise's probes"),
    (group(cgroup="/tamebpf-run-99"), "tamebpf run samples its own"),
    (group(observed=False), "no steady stream count: learn could not use it"),
])
def test_no_window_on_groups_it_must_not_sample(g: Group, why: str) -> None:
    opener = Opener()
    s = sampler(opener)
    # Nothing is wanted: not even the flows are read (a snapshot costs an iterator pass).
    assert s.sample([g], {}, lambda: pytest.fail(f"flows read for a group not wanted: {why}"),
                    key_of, lambda _s: False, 100.0) is None
    assert opener.opened == [], why


def test_no_window_when_memory_has_the_capacity(tmp_path: Path) -> None:
    """Once a window's capacity is stored, the path needs no more."""
    opener = Opener()
    s = sampler(opener)
    sample(s, [group()])
    learner = PathLearner(PathStore(str(tmp_path)), "tb-snd", Settings(max_impact=0.10))
    learner.observe([group()], time.time(), s.measured(100.0))
    memory = learner.newest([group()])
    assert len(memory) == 1, memory
    newest = next(iter(memory.values()))
    assert newest.capacity_mbps == pytest.approx(LINK, rel=0.02)
    assert newest.capacity_method == "ack-spacing (transfer)" and newest.source == "passive"
    s2 = sampler(opener)  # a new export: only memory tells it
    assert s2.sample([group()], memory,
                     lambda: pytest.fail("flows read for a path with a capacity"),
                     key_of, lambda _s: False, 100.0) is None
    assert len(opener.opened) == 1


def test_windows_per_path_per_hour_are_bounded() -> None:
    """A window that gave nothing (too few pairs) is retried, at most
    per_hour times an hour."""
    opener = Opener(pairs=3)
    s = sampler(opener, per_hour=2)
    for t in (100.0, 200.0, 300.0, 400.0):
        e = sample(s, [group()], now=t)
        assert e is None or not e.trusted
    assert len(opener.opened) == 2, opener.opened
    assert s.counts() == {"capacity": 0, "none": 2}
    sample(s, [group()], now=100.0 + 3600.0)
    assert len(opener.opened) == 3, "the next hour gets windows again"


def test_paced_streams_give_no_capacity() -> None:
    """Pairs spaced below the connections' own goodput (each stream paced at
    a quarter of it) are under the estimator's floor: nothing trusted."""
    opener = Opener(mbps=36.0 / 4)
    s = sampler(opener)
    e = sample(s, [group()])
    assert e is not None and not e.trusted
    assert s.measured(100.0) == {}


def test_acks_at_the_groups_own_goodput_give_no_capacity() -> None:
    """ACKs spaced at 1.1x the group's own 36 Mbit/s: on a shared path that
    is its share (measured on the testbed: 19.2 Mbit/s for a 2-stream
    transfer on a 40 Mbit/s link), so the estimator's trust is not enough."""
    opener = Opener(mbps=36.0 * 1.1)
    s = sampler(opener)
    e = sample(s, [group()])
    assert e is not None and not e.trusted and "share" in (e.reason or ""), e
    assert s.measured(100.0) == {} and s.counts() == {"capacity": 0, "none": 1}


def test_a_window_cut_short_estimates_nothing_and_closes() -> None:
    opener = Opener()
    s = sampler(opener)
    reads = iter([flows(10.0)])
    assert s.sample([group()], {}, lambda: next(reads), key_of, lambda _s: True, 100.0) is None
    assert opener.windows[0].closed and s.measured(100.0) == {}


def test_a_window_that_cannot_open_stops_sampling() -> None:

    def refuse(cookies: Sequence[int], netns: str | None, receive: bool) -> FakeWindow:
        raise TamebpfError("cannot load the ACK log BPF programs: Operation not permitted")

    s = AckSampler("tb-snd", None, open_window=refuse)
    assert sample(s, [group()]) is None and s.broken is not None
    assert s.sample([group()], {}, lambda: pytest.fail("read flows after it broke"), key_of,
                    lambda _s: False, 200.0) is None

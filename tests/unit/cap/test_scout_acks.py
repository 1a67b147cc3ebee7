"""The scout's ACK windows (cap/scoutacks.py) with a stand-in for the
kernel's window: when one opens and on which stream, one at a time, a few an
hour per path, closed when the cap moves on, and what a trusted estimate
stores, and the capacity a run's first seconds measured, stored and
followed from when the window gives none (the real window:
tests/integration/test_scout_acks.py)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from tamebpf.cap.book import FollowBook, FollowSpec
from tamebpf.cap.follow import SETTLE_S, Follower
from tamebpf.cap.follow import WINDOW_S as FOLLOW_WINDOW_S
from tamebpf.cap.scoutacks import METHOD, WINDOW_S, WINDOWS_PER_HOUR, ScoutAcks
from tamebpf.common.errors import TamebpfError
from tamebpf.common.records import AckLog, Flow
from tamebpf.paths.entry import PathKey
from tamebpf.paths.passive import MeasuredCapacity
from tamebpf.paths.store import PathStore
from tests.unit.cap.test_cap_follow import Kernel, cap, flow

KEY = PathKey("198.18.3.2/32", "tb-snd", "cubic")
SPEC = FollowSpec("/dtn", "198.18.3.2/32", KEY, 0.3, "198.18.3.2", 0.0)
LINK = 20.0  # Mbit/s of TCP goodput the ACKs are spaced at
MSS = 1448


class Window:
    """A window that logs the scout's ACKs two segments apart at LINK (or
    too few of them for the trust rule; or, late, all but the first after
    its first seconds)."""

    def __init__(self, cookies: Sequence[int], netns: str | None, spaced: bool,
                 late: bool) -> None:
        self.cookies, self.netns, self.closed = list(cookies), netns, False
        self.spaced, self.late = spaced, late

    def read(self) -> AckLog:
        assert not self.closed, "read after close"
        t, seq, acks = 0, 0, [(0, 0)]
        if self.late:
            t = int(1.5 * WINDOW_S * 1e9)
        for _ in range(400 if self.spaced else 10):
            t, seq = t + int(2 * MSS * 8e3 / LINK), seq + 2 * MSS
            acks.append((t, seq))
        return AckLog({self.cookies[0]: acks})

    def close(self) -> None:
        self.closed = True


class Opener:
    def __init__(self, spaced: bool = True, fails: bool = False, late: bool = False) -> None:
        self.spaced, self.fails, self.late = spaced, fails, late
        self.windows: list[Window] = []

    def __call__(self, cookies: Sequence[int], netns: str | None, receive: bool) -> Window:
        if self.fails:
            raise TamebpfError("no BPF here")
        self.windows.append(Window(cookies, netns, self.spaced, self.late))
        return self.windows[-1]


def streams(t: float, scout: int = 1, scout_mbps: float = 12.0) -> dict[int, Flow]:
    """Four streams after t seconds: the scout at 12 Mbit/s, the others at 2."""
    return {c: replace(flow(c, int((scout_mbps if c == scout else 2) * 1e6 / 8 * t), 50.0),
                       mss=MSS, read_monotonic_ns=int(t * 1e9), srtt_us=20_000)
            for c in range(1, 5)}


def sampler(tmp_path: Path, opener: Opener) -> ScoutAcks:
    return ScoutAcks(PathStore(str(tmp_path)), "tb-snd", open_window=opener)


def test_a_window_on_a_new_scout_alone_stores_a_trusted_capacity(tmp_path: Path) -> None:
    opener = Opener()
    acks = sampler(tmp_path, opener)
    assert acks.step(SPEC, 1, streams(8.0), 8.0, needed=True) is None
    assert opener.windows == [], "a window on a scout that was not new"
    acks.begin(SPEC, 1, streams(10.0), 10.0)
    assert [(w.cookies, w.netns) for w in opener.windows] == [([1], "tb-snd")]
    assert acks.step(SPEC, 1, streams(11.0), 11.0, needed=True) is None  # not yet
    got = acks.step(SPEC, 1, streams(10.0 + WINDOW_S), 10.0 + WINDOW_S, needed=True)
    assert got is not None and got.capacity_method == METHOD and got.source == "passive"
    assert got.capacity_mbps is not None and abs(got.capacity_mbps / LINK - 1) < 0.02, got
    assert opener.windows[0].closed
    stored = acks.store.newest(KEY, with_capacity=True)
    assert stored is not None and stored.capacity_mbps == got.capacity_mbps
    assert stored.rtt_ms == 20.0 and stored.competing_flows is not None
    assert (acks.windows, acks.trusted) == (1, 1)


def test_only_the_first_seconds_of_the_scout_count(tmp_path: Path) -> None:
    """ACKs logged after the scout's first WINDOW_S unpaced (read late) are
    left out: by then its segments interleave with the other traffic's."""
    acks = sampler(tmp_path, Opener(late=True))
    acks.begin(SPEC, 1, streams(0.0), 0.0)
    assert acks.step(SPEC, 1, streams(2 * WINDOW_S), 2 * WINDOW_S, needed=True) is None
    assert acks.store.newest(KEY) is None and (acks.windows, acks.trusted) == (1, 0)


def test_an_untrusted_window_stores_nothing_and_windows_are_few(tmp_path: Path) -> None:
    opener = Opener(spaced=False)
    acks = sampler(tmp_path, opener)
    t = 0.0
    for k in range(2 * WINDOWS_PER_HOUR):
        scout = k % 4 + 1  # a new scout each time (the last one closed)
        acks.begin(SPEC, scout, streams(t, scout), t)
        assert acks.spent(KEY, t) is (k >= WINDOWS_PER_HOUR)
        t += WINDOW_S
        assert acks.step(SPEC, scout, streams(t, scout), t, needed=True) is None
        assert acks.spent(KEY, t)
    assert len(opener.windows) == WINDOWS_PER_HOUR, "more windows than an hour allows"
    assert all(w.closed for w in opener.windows)
    assert acks.store.newest(KEY) is None
    assert (acks.windows, acks.trusted) == (WINDOWS_PER_HOUR, 0)
    assert not acks.spent(replace(KEY, dest="198.18.3.9/32"), t)
    assert not acks.spent(KEY, t + 3600)
    acks.begin(SPEC, 1, streams(t + 3600), t + 3600)
    assert len(opener.windows) == WINDOWS_PER_HOUR + 1, "no window an hour later"


def test_one_window_at_a_time_closed_when_the_cap_moves_on(tmp_path: Path) -> None:
    opener = Opener()
    acks = sampler(tmp_path, opener)
    other = replace(SPEC, cgroup="/other", path=replace(KEY, dest="198.18.3.9/32"))
    acks.begin(SPEC, 1, streams(0.0), 0.0)
    acks.begin(other, 3, streams(0.5, scout=3), 0.5)
    assert len(opener.windows) == 1, "a second window while one was open"
    acks.step(SPEC, 2, streams(1.0, scout=2), 1.0, needed=True)  # a new scout
    assert opener.windows[0].closed and acks.now is None
    acks.begin(SPEC, 2, streams(1.0, scout=2), 1.0)
    acks.step(SPEC, 2, streams(1.5, scout=2), 1.5, needed=False)  # a capacity came meanwhile
    assert opener.windows[1].closed and acks.now is None
    acks.begin(other, 3, streams(2.0, scout=3), 2.0)
    acks.close()
    assert all(w.closed for w in opener.windows) and acks.now is None
    assert acks.store.newest(KEY) is None


def test_no_window_on_bbr_and_none_after_a_bpf_failure(tmp_path: Path) -> None:
    opener = Opener()
    bbr = replace(SPEC, path=replace(KEY, congestion="bbr"))
    sampler(tmp_path, opener).begin(bbr, 1, streams(0.0), 0.0)
    assert opener.windows == []
    broken = sampler(tmp_path, Opener(fails=True))
    broken.begin(SPEC, 1, streams(0.0), 0.0)
    assert broken.broken == "no BPF here" and broken.now is None and broken.spent(KEY, 0.0)


def test_acks_near_the_scouts_own_goodput_may_be_its_share(tmp_path: Path) -> None:
    """A scout at 18 Mbit/s whose ACKs run at 20: on a shared path that is
    what its own share reads, so it is not trusted and nothing is stored."""
    acks = sampler(tmp_path, Opener())
    acks.begin(SPEC, 1, streams(0.0, scout_mbps=18.0), 0.0)
    assert acks.step(SPEC, 1, streams(WINDOW_S, scout_mbps=18.0), WINDOW_S, needed=True) is None
    assert acks.store.newest(KEY) is None and (acks.windows, acks.trusted) == (1, 0)


MEASURED = MeasuredCapacity(21.0, 20.5, 21.5)  # what a run's first seconds gave


def test_the_transfers_measured_capacity_is_stored_when_the_scouts_window_gave_none(
        tmp_path: Path) -> None:
    """tamebpf run's first seconds measured the capacity (read after the
    scout's window opened, as in a run); the window gives no trusted one:
    the measured capacity is stored, on the scout's reading since it was
    unpaced, with where it came from."""
    measured: dict[tuple[str, str], MeasuredCapacity] = {}
    acks = ScoutAcks(PathStore(str(tmp_path)), "tb-snd", open_window=Opener(spaced=False),
                     measured=measured)
    acks.begin(SPEC, 1, streams(10.0), 10.0)
    measured[("198.18.3.2", "send")] = MEASURED
    got = acks.step(SPEC, 1, streams(10.0 + WINDOW_S), 10.0 + WINDOW_S, needed=True)
    assert got is not None and got.source == "passive", "the measured capacity was dropped"
    assert (got.capacity_mbps, got.capacity_low_mbps, got.capacity_high_mbps) == (21.0, 20.5, 21.5)
    assert got.capacity_method == MEASURED.method == "ack-spacing (transfer)"
    assert got.fit.estimator == "capacity" and got.rtt_ms == 20.0
    assert got.competing_flows is not None
    stored = acks.store.newest(KEY, with_capacity=True)
    assert stored is not None and stored.capacity_method == MEASURED.method
    assert (acks.windows, acks.trusted) == (1, 0) and acks.now is None


def test_no_window_opens_on_a_scout_whose_capacity_was_measured(tmp_path: Path) -> None:
    """Measured before the scout was picked: no window, and the next step
    stores the measured capacity (none for another destination, none while
    memory holds one)."""
    opener = Opener()
    elsewhere = replace(SPEC, host="198.18.3.9", path=replace(KEY, dest="198.18.3.9/32"))
    acks = ScoutAcks(PathStore(str(tmp_path)), "tb-snd", open_window=opener,
                     measured={("198.18.3.2", "send"): MEASURED})
    acks.begin(SPEC, 1, streams(10.0), 10.0)
    assert opener.windows == [] and not acks.spent(KEY, 10.0)
    assert acks.step(SPEC, 1, streams(12.0), 12.0, needed=False) is None
    assert acks.step(SPEC, 2, streams(12.0, scout=2), 12.0, needed=True) is None, \
        "a reading of a scout that was not the one unpaced"
    got = acks.step(SPEC, 1, streams(12.0), 12.0, needed=True)
    assert got is not None and got.capacity_mbps == MEASURED.mbps
    acks.begin(elsewhere, 3, streams(14.0, scout=3), 14.0)
    assert len(opener.windows) == 1, "no window on a destination nothing measured"


def test_the_follower_follows_from_the_transfers_measured_capacity(tmp_path: Path) -> None:
    """The follower of tamebpf run with path memory empty and a scout whose
    window gives no trusted capacity: once the run's first seconds measured
    one, the follower stores it and its next decision has a target (before
    this, the cap never moved: issue 45's fresh draw)."""
    measured: dict[tuple[str, str], MeasuredCapacity] = {}
    store, book, kernel = PathStore(str(tmp_path)), FollowBook(str(tmp_path)), Kernel()
    book.put(SPEC)
    follower = Follower(book, store, kernel, scout_acks=ScoutAcks(
        store, "tb-snd", open_window=Opener(spaced=False), measured=measured))
    t = 0.0
    while t <= SETTLE_S + 2 * FOLLOW_WINDOW_S:
        if t >= 5.0:
            measured[("198.18.3.2", "send")] = MEASURED  # the first seconds' log is read at 5 s
        follower.step(list(streams(t).values()), [cap(8.0)], now=t, now_wall=time.time())
        t += 2.0
    entry = store.newest(KEY, with_capacity=True)
    assert entry is not None and entry.capacity_method == MEASURED.method, \
        "no capacity from the transfer's first seconds"
    s = book.find(SPEC.cgroup, SPEC.dest)
    assert s is not None and s.note is None and s.target_mbps is not None, s
    assert s.changes and s.changes[-1].to_mbps > 8.0, "the cap did not follow"

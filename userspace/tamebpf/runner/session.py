"""One `tamebpf run`: CMD in a cgroup of its own whose TCP streams share a
pace cap that follows the destination they send to, and what the transfer
teaches path memory (docs/run.md).

1. The run's cgroup (kernel/run_cgroups.py) gets a pace cap per address
   family (0.0.0.0/0 and ::/0) before CMD starts: a pace cap paces only
   the streams that connect after it is set (docs/cap.md, "Open streams
   when a cap changes"), and the destination is not known yet. Its target
   is --rate, else DEFAULT_RATE.
2. Every STEP_S the cgroup's flows are read. The first destination CMD
   sends to sets the path: path memory's advice for it becomes the target
   (unless --rate was given), and the cap follows that path as `export`
   makes a `cap set --follow` cap follow (cap/follow.Follower: a scout
   stream, the target from its share and the capacity path memory holds,
   else the one the transfer's ACKs give: its first seconds', or its
   scout's: runner/acks.py, cap/scoutacks.py).
   The spec lives in this process only, so an `export` on the host does
   not step the run's cap too.
3. The same readings feed the passive learner (paths/passive.PathLearner),
   as `export` feeds it every transfer; --no-learn turns both writers off.
4. Signals are held blocked from the first step of set-up to the last of
   the tidy, so none can leave a cap, a cgroup, a BPF program or a
   process behind. One that came during set-up ends the run before CMD
   starts (runner/child.start); while CMD runs they are passed to CMD's
   process group once (runner/signals.py); once CMD has ended they wait
   for the tidy to finish and are dropped, and the status stays CMD's.
   The tidy kills what CMD left in the cgroup first, while the caps still
   pace it, then removes the caps, then the cgroup.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tamebpf.cap.book import FollowBook, FollowSpec
from tamebpf.cap.follow import SAMPLE_EVERY_S, SETTLE_S, WINDOW_S, Follower
from tamebpf.cap.scoutacks import ScoutAcks
from tamebpf.cap.spec import parse_dest
from tamebpf.cap.table import PACE_NO_LIMIT, Add, CapTable
from tamebpf.cap.view import limit_of
from tamebpf.common.defaults import DEFAULT_RATE_MBPS
from tamebpf.common.errors import TamebpfError
from tamebpf.common.logs import log
from tamebpf.common.records import Cap, Flow
from tamebpf.common.units import mbps_over, pace_bytes_per_s
from tamebpf.groups.aggregate import Aggregator
from tamebpf.groups.group import Group
from tamebpf.groups.passive_fit import LOSS_BASED
from tamebpf.kernel import run_cgroups
from tamebpf.kernel.flows import FlowReader
from tamebpf.model import ModelInputError, Settings
from tamebpf.paths.entry import PathEntry, PathKey
from tamebpf.paths.passive import (
    UNBOUND_SHARE,
    MeasuredCapacity,
    PathLearner,
    group_key,
    held_by_its_cap,
)
from tamebpf.paths.recall import recall_curve, usable
from tamebpf.paths.store import PathStore, state_dir
from tamebpf.paths.where import netns_id
from tamebpf.runner.acks import FirstAcks, measured
from tamebpf.runner.child import shell_status, start
from tamebpf.runner.signals import WAITED, Job, foreground_terminal, signals_held
from tamebpf.runner.summary import Destination, Learned, Summary

WIDE = ("0.0.0.0/0", "::/0")
STEP_S = 1.0  # flows read; the learner's refresh (its stream count must hold 3 of them)
# Path memory's advice older than this is not the run's start (advise's --max-age).
MEMORY_MAX_AGE_S = 3600.0
# A connection "moved data" in a step when it moved this share of the busiest
# one's bytes (aggregate.STREAM_SHARE: a control connection beside the data).
STREAM_SHARE = 0.01
TERM_WAIT_S = 5.0  # after our own failure: CMD's time to end on SIGTERM


@dataclass(frozen=True)
class RunOptions:
    argv: Sequence[str]
    settings: Settings
    netns: str | None = None
    rate_mbps: float | None = None  # --rate: the start target, before path memory's
    state_dir: str | None = None
    learn: bool = True
    verbose: bool = False


class MemoryBook(FollowBook):
    """The run's follow spec, in this process only (cap/book.py keeps
    the file that `export`'s follower steps)."""

    def __init__(self) -> None:
        super().__init__(os.devnull)
        self._specs: list[FollowSpec] = []

    def specs(self) -> list[FollowSpec]:
        return list(self._specs)

    def _change(self, fn: Callable[[list[FollowSpec]], list[FollowSpec]]) -> None:
        self._specs = fn(list(self._specs))

    def _stored(self) -> bool:
        # No file, ever: with FollowBook's file check a remove changed
        # nothing, and the run that held its streams at the target kept
        # following (and said so at every step).
        return True


class ReadOnlyStore(PathStore):
    """Path memory read but never written (--no-learn)."""

    def put(self, entry: PathEntry) -> int:
        return 0

    def mark_changed(self, key: PathKey) -> int:
        return 0


@dataclass
class Moved:
    """What the run's connections to one address moved."""

    sent: dict[int, int] = field(default_factory=dict)  # cookie -> bytes acked
    received: dict[int, int] = field(default_factory=dict)
    # Connections that moved data in two readings in a row, at most: a
    # control connection moves a little at the start and at the end (iperf3's
    # results), and in the last reading beside the data streams' tails it
    # counted as one more stream, once in a few runs.
    streams: int = 0
    peak: int = 0  # in one reading, at most: the count of a run read once
    last: int = 0  # in the last reading
    congestion: str | None = None

    @property
    def counted(self) -> int:
        return self.streams or self.peak

    def read(self, amounts: Sequence[int]) -> None:
        """One reading: the bytes each connection that moved any moved."""
        n = sum(1 for a in amounts if a >= max(amounts) * STREAM_SHARE) if amounts else 0
        self.streams, self.peak, self.last = max(self.streams, min(n, self.last)), \
            max(self.peak, n), n


class Session:
    def __init__(self, opts: RunOptions) -> None:
        self.opts = opts
        self.netns = netns_id(opts.netns)
        directory = state_dir(opts.state_dir)
        self.store = PathStore(directory) if opts.learn else ReadOnlyStore(directory)
        self.learner = PathLearner(self.store, self.netns, opts.settings) if opts.learn \
            else None
        self.book = MemoryBook()
        self.table = CapTable("run", verbose=opts.verbose)
        self.acks: FirstAcks | None = None
        # The capacity the first seconds' ACKs gave, by address (runner/acks.py).
        self.measured: dict[str, MeasuredCapacity] = {}
        # What the follower takes a capacity from when path memory has none:
        # the scout's ACKs, else the first seconds' (cap/scoutacks.py).
        self.scout_acks = ScoutAcks(self.store, opts.netns, measured=self.measured) \
            if opts.learn else None
        self.follower = Follower(self.book, self.store, self.table, scout_acks=self.scout_acks)
        self.agg = Aggregator("cgroup", opts.settings)
        self.caps: list[Cap] = []
        self.moved: dict[str, Moved] = {}
        self.target_mbps = opts.rate_mbps or DEFAULT_RATE_MBPS
        self.start_from = "--rate" if opts.rate_mbps else "default rate, no path memory yet"
        self.start_mbps = self.target_mbps
        self.path: PathKey | None = None  # the path the cap follows
        self._cap: Cap | None = None  # the cap of its address family
        self._host = ""
        self.groups: list[Group] = []
        self.notes: list[str] = []
        self.started_wall = time.time()
        self._followed_at = 0.0
        self._acks_why: str | None = None  # why the first seconds' ACKs gave no capacity
        self._broken: str | None = None

    def run(self) -> tuple[int, Summary]:
        """CMD's exit status (as a shell gives it) and the summary."""
        with signals_held():
            status, seconds = self._run_and_tidy()
        return status, self._summary(seconds, status)

    def _run_and_tidy(self) -> tuple[int, float]:
        """CMD's exit status and how long it ran."""
        self.table.list()  # sweeps what killed runs left (kernel/run_cgroups.py)
        cg = run_cgroups.create()
        try:
            self.caps = self.table.commit(
                [Add(cg.rel, parse_dest(w), PACE_NO_LIMIT, pace_bytes_per_s(self.target_mbps))
                 for w in WIDE])
            with FlowReader(cgroup=cg.path, netns=[self.opts.netns] if self.opts.netns else (),
                            verbose=self.opts.verbose, command="run") as reader:
                t0 = time.monotonic()
                if self.opts.learn:
                    self._open_acks(cg.path, t0)
                terminal = foreground_terminal()
                child = start(self.opts.argv, cg.path, self.opts.netns, terminal)
                job = Job(child, terminal)
                try:
                    status = self._wait(job, reader)
                finally:
                    job.take_terminal()
                    if child.poll() is None:  # we failed, not CMD: it is stopped
                        _stop(child)
                seconds = time.monotonic() - t0
                self._safely(lambda: self._step(reader))  # what the last reading missed
        finally:
            if self.acks is not None:
                self.acks.close()
            if self.scout_acks is not None:
                self.scout_acks.close()  # a window CMD's end cut short
            self._tidy(cg)
        return status, seconds

    def _wait(self, job: Job, reader: FlowReader) -> int:
        next_step = time.monotonic() + STEP_S
        while True:
            timeout = max(0.0, next_step - time.monotonic())
            info = signal.sigtimedwait(WAITED, timeout)
            if info is not None:
                job.on_signal(info)
            if job.child.poll() is not None:
                return shell_status(job.child.returncode)
            if time.monotonic() >= next_step:
                next_step += STEP_S
                if self._broken is None:
                    self._safely(lambda: self._step(reader))

    def _safely(self, work: Callable[[], None]) -> None:
        """A reading, following or learning that fails stops them, not CMD."""
        try:
            work()
        except (TamebpfError, OSError, sqlite3.Error, ModelInputError) as err:
            self._broken = str(err)
            log.warning("run: no more pacing changes or learning: %s", err)
            self.notes.append(f"stopped following and learning: {err}")

    def _step(self, reader: FlowReader) -> None:
        flows = reader.snapshot()
        self._count(flows)
        limits = [lim for c in self.caps
                  if (lim := limit_of(c, self._follow_target(c), self._follows(c))) is not None]
        refresh = self.agg.refresh_snapshot(flows, time.monotonic_ns(), limits)
        self.groups = refresh.groups
        if self.path is None:
            self._choose_path(refresh.groups)
        else:
            self._start_following()
        if self.acks is not None and self.acks.due(time.monotonic(), self.path is not None):
            self._read_acks(flows)
        if self.learner is not None:
            self.learner.observe(refresh.groups, time.time(), self.measured)
        now = time.monotonic()
        if self.book.specs() and now - self._followed_at >= SAMPLE_EVERY_S * 0.99:
            self._followed_at = now
            self.follower.step([f for f in flows if not f.closed], self.caps)
            spec = self.book.specs()[0]
            if spec.target_mbps is not None:
                self.target_mbps = spec.target_mbps
            self._follow_or_hold(spec, now)

    def _follow_or_hold(self, spec: FollowSpec, now: float) -> None:
        """Back to holding every stream at the target when the scout's ACKs
        gave no capacity, nor the first seconds' (read by now): without one,
        an unpaced scout reads nothing the target can use. A capacity the
        first seconds gave the follower stores (cap/scoutacks.py)."""
        sa = self.scout_acks
        if sa is None or not sa.spent(spec.path, now) or sa.measured_for(spec) is not None \
                or (self.acks is not None and self.acks.pending) or \
                self.store.newest(spec.path, with_capacity=True) is not None:
            return
        self.follower.close()
        self.follower.scout_acks = None  # and no following starts again
        self.book.remove(spec.cgroup, spec.dest)
        self.notes.append(f"held at the target: the scout's ACKs gave {spec.path.dest} no "
                          "capacity to follow from, nor did the first seconds'")

    def _open_acks(self, cgroup: str, now: float) -> None:
        try:
            self.acks = FirstAcks(cgroup, now)
        except TamebpfError as err:
            self.notes.append(f"no capacity from the ACKs: {err}")

    def _read_acks(self, flows: Sequence[Flow]) -> None:
        """The capacity from the first seconds' ACKs to the followed
        destination: trusted only if the pace cap did not hold those
        streams (their ACKs would be spaced at our own rate)."""
        assert self.acks is not None
        if self.path is None:
            self.acks.close()
            return
        addr = self._host or self.path.dest.split("/")[0]
        mine = [f for f in flows if f.remote_addr == addr]
        seconds = max(time.monotonic() - self.acks.opened, 1e-3)
        goodput = mbps_over(sum(self.moved[addr].sent.values()) if addr in self.moved else 0,
                            seconds)
        e = self.acks.read([f.cookie for f in mine], goodput,
                           max((f.mss for f in mine), default=0))
        why = e.reason
        held = goodput >= UNBOUND_SHARE * self.target_mbps
        if held:
            why = "the pace cap held the streams, so their ACKs are spaced at our own rate"
        got = measured(e) if why is None else None
        if got is not None:
            self.measured[addr] = got
            log.info("run: capacity %.1f Mbit/s from the ACKs to %s", got.mbps, addr)
        else:
            self._acks_why = why
            log.debug("run: no capacity from the first seconds' ACKs to %s: %s", addr, why,
                      extra={"event": "run_acks_no_capacity", "held": held})

    def _follows(self, cap: Cap) -> bool:
        return any(s.dest == cap.dest for s in self.book.specs())

    def _follow_target(self, cap: Cap) -> float | None:
        return self.target_mbps if cap.mode == "pace" else None

    def _count(self, flows: Sequence[Flow]) -> None:
        """Bytes per address, and how many connections moved data at once."""
        step: dict[str, list[int]] = {}
        for f in flows:
            m = self.moved.setdefault(f.remote_addr, Moved())
            before = m.sent.get(f.cookie, 0) + m.received.get(f.cookie, 0)
            m.sent[f.cookie] = max(m.sent.get(f.cookie, 0), f.bytes_acked)
            m.received[f.cookie] = max(m.received.get(f.cookie, 0), f.bytes_received)
            moved = m.sent[f.cookie] + m.received[f.cookie] - before
            if moved > 0:
                step.setdefault(f.remote_addr, []).append(moved)
            if f.congestion_control and f.bytes_acked > 0:
                m.congestion = f.congestion_control
        for addr, m in self.moved.items():
            m.read(step.get(addr, []))

    def _choose_path(self, groups: Sequence[Group]) -> None:
        """The first destination CMD sends to: its path sets the target and
        is the one the cap follows."""
        sending = [g for g in groups if g.streams > 0 and g.goodput_bps]
        if not sending:
            return
        g = max(sending, key=lambda g: g.goodput_bps or 0.0)
        key = group_key(g, self.netns)
        if key is None:
            return
        self.path = key
        cap = next((c for c in self.caps if parse_dest(c.dest).network.version
                    == parse_dest(key.dest).network.version), None)
        if cap is None:
            return
        if self.opts.rate_mbps is None:
            advised = self._remembered(key)
            if advised is not None:
                self.target_mbps = self.start_mbps = advised
                self.start_from = f"path memory's advice for {g.remote_addr}"
                self.table.set_follow(cap.id, 0, pace_bytes_per_s(advised))
        if key.congestion not in LOSS_BASED:
            # The scout is one unpaced stream: one BBR stream takes most of
            # a shared link (cap/plan.follow_path refuses the same).
            self.notes.append(f"held at the target: {key.congestion} is not loss-based, so "
                              "the cap does not follow the path")
            return
        self._cap = cap
        self._host = g.remote_addr
        self._start_following()

    def _start_following(self) -> None:
        """Follow once path memory holds the path's capacity, or at once when
        learning: the scout's ACKs then measure it (cap/scoutacks.py).
        Without either, a scout would read nothing the target can use."""
        if self.book.specs() or self.path is None or self._cap is None:
            return
        if self.follower.scout_acks is None and \
                self.store.newest(self.path, with_capacity=True) is None:
            return
        cap = self._cap
        self.book.put(FollowSpec(cap.cgroup, cap.dest, self.path, self.opts.settings.max_impact,
                                 self._host, time.time(), target_mbps=self.target_mbps))
        log.info("run: following %s (%s) from %.1f Mbit/s", self._host, self.path.congestion,
                 self.target_mbps, extra={"event": "run_follow", "dest": self._host})

    def _remembered(self, key: PathKey) -> float | None:
        """Path memory's throughput at --max-impact for this path, if fresh."""
        entry = self.store.newest(key)
        if entry is None or usable(entry, time.time(), MEMORY_MAX_AGE_S, True, None):
            return None
        try:
            return recall_curve(entry, self.opts.settings)[1].max_nondisruptive_thru
        except (ModelInputError, ValueError):
            return None

    def _tidy(self, cg: run_cgroups.RunCgroup) -> None:
        """What CMD left in the cgroup is killed first, while the caps still
        pace it (no leftover sends unpaced); then the caps go, then the
        cgroup."""
        try:
            try:
                run_cgroups.kill_all(cg.path)
            finally:
                self._remove_caps()
        finally:
            run_cgroups.release(cg)

    def _remove_caps(self) -> None:
        if not self.caps:
            return
        try:
            self.table.commit(self.caps)
        except TamebpfError as err:  # removed meanwhile (cap rm): nothing to do
            log.debug("run: removing the caps: %s", err)

    def _summary(self, seconds: float, status: int) -> Summary:
        dests = []
        for addr, m in sorted(self.moved.items(), key=lambda kv: -sum(kv[1].sent.values())
                              - sum(kv[1].received.values())):
            sent, received = sum(m.sent.values()), sum(m.received.values())
            if not sent and not received:
                continue
            impact = advised = None
            entry = self._entry_for(addr, m.congestion)
            if entry is not None and m.counted > 0:
                try:
                    curve, advice = recall_curve(entry, self.opts.settings)
                    impact = curve[min(m.counted, len(curve)) - 1].impact
                    advised = advice.num_flows
                except (ModelInputError, ValueError, IndexError):
                    pass
            dests.append(Destination(addr, sent, received, m.counted, impact, advised))
        learned = []
        for addr, m in self.moved.items():
            entry = self._entry_for(addr, m.congestion)
            if entry is not None and entry.source == "passive" and not entry.changed and \
                    entry.when >= self.started_wall and self.opts.learn:
                learned.append(Learned(addr, entry.key.congestion, entry.advised_streams,
                                       entry.advised_mbps, entry.capacity_mbps,
                                       entry.capacity_method))
        return Summary(
            command=os.path.basename(self.opts.argv[0]), exit_status=status, seconds=seconds,
            destinations=tuple(dests), cap_start_mbps=self.start_mbps,
            cap_start_from=self.start_from, cap_end_mbps=self.target_mbps,
            learning=self.opts.learn, learned=tuple(learned),
            not_learned=None if learned else self._why_not_learned(),
            notes=tuple(self.notes) + tuple(n for n in [self._capacity_note()] if n))

    def _capacity_note(self) -> str | None:
        """Why the run's ACKs gave no capacity, when path memory has none."""
        if self.path is None or self._acks_why is None or \
                self.store.newest(self.path, with_capacity=True) is not None:
            return None
        sa = self.scout_acks
        scout = "" if sa is None else f"; nor its scout's ({sa.windows} ACK windows)" \
            if sa.windows else "; no scout was sampled (one stream, or CMD ended first)"
        return f"no capacity from the ACKs to {self._host or self.path.dest}: " \
            f"{self._acks_why}{scout}"

    def _entry_for(self, addr: str, congestion: str | None) -> PathEntry | None:
        if congestion is None:
            return None
        try:
            key = PathKey(str(parse_dest(addr).network), self.netns, congestion)
            return self.store.newest(key)
        except (TamebpfError, sqlite3.Error, OSError, ValueError):
            return None

    def _why_not_learned(self) -> str:
        if self.path is None:
            return "CMD sent no steady TCP data"
        if self.path.congestion not in LOSS_BASED:
            return f"{self.path.congestion} is not loss-based: the model does not describe it"
        why = None if self.learner is None else \
            next(iter(self.learner.why_changed.values()), None)
        if why is not None:
            return (f"its readings marked the path changed ({why}); "
                    "path memory's entry no longer answers")
        obs = [g for g in self.groups if g.observed]
        if not obs:
            return "no stream count held for 3 readings"
        if any(held_by_its_cap(g, self._entry_for(g.remote_addr, self.path.congestion),
                               self.measured.get(g.remote_addr)) for g in obs):
            if not self.book.specs():
                why = (f"neither path memory nor the run's ACKs gave {self.path.dest} a "
                       "capacity") if self.opts.learn else \
                    f"path memory has no capacity for {self.path.dest}"
                return f"the pace cap held the transfer at its target, and {why} to follow from"
            return ("the pace cap held the transfer at its target; following reads the path "
                    f"after {SETTLE_S + WINDOW_S:g} s of a scout stream")
        return (f"one stream count, and path memory has no capacity for {self.path.dest} "
                "('tamebpf advise' to it once stores one)")


def _stop(child: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        child.terminate()
    try:
        child.wait(timeout=TERM_WAIT_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


__all__ = ["RunOptions", "Session"]

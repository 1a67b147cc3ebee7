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
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tamebpf.cap.book import FollowSpec
from tamebpf.cap.follow import SAMPLE_EVERY_S, Follower
from tamebpf.cap.scoutacks import ScoutAcks
from tamebpf.cap.spec import parse_dest
from tamebpf.cap.table import PACE_NO_LIMIT, Add, CapTable
from tamebpf.cap.view import limit_of
from tamebpf.common.errors import TamebpfError
from tamebpf.common.logs import log
from tamebpf.common.records import Cap, Flow
from tamebpf.common.units import mbps_over, pace_bytes_per_s
from tamebpf.groups.aggregate import Aggregator
from tamebpf.groups.group import Group
from tamebpf.kernel import run_cgroups
from tamebpf.kernel.flows import FlowReader
from tamebpf.model import ModelInputError, Settings
from tamebpf.paths.passive import UNBOUND_SHARE, MeasuredCapacity, PathLearner
from tamebpf.paths.store import PathStore, state_dir
from tamebpf.paths.where import netns_id
from tamebpf.runner import bytecount, report
from tamebpf.runner.acks import FirstAcks, measured
from tamebpf.runner.bytecount import Moved
from tamebpf.runner.child import shell_status, start
from tamebpf.runner.pathchoice import PathChoice
from tamebpf.runner.signals import WAITED, Job, foreground_terminal, signals_held
from tamebpf.runner.stores import MemoryBook, ReadOnlyStore
from tamebpf.runner.summary import Summary
from tamebpf.site.follow import SiteFollow

WIDE = ("0.0.0.0/0", "::/0")
STEP_S = 1.0  # flows read; the learner's refresh (its stream count must hold 3 of them)
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
    site: str | None = None  # --site: the site's Prometheus (runner/site.py)
    node: str = ""  # --node: this node's name in the site's series


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
        self.measured: dict[tuple[str, str], MeasuredCapacity] = {}
        # What the follower takes a capacity from when path memory has none:
        # the scout's ACKs, else the first seconds' (cap/scoutacks.py).
        self.scout_acks = ScoutAcks(self.store, opts.netns, measured=self.measured) \
            if opts.learn else None
        self.follower = Follower(self.book, self.store, self.table, scout_acks=self.scout_acks)
        self.agg = Aggregator("cgroup", opts.settings)
        self.caps: list[Cap] = []
        self.moved: dict[str, Moved] = {}
        self.groups: list[Group] = []
        self.notes: list[str] = []
        self.choice = PathChoice(opts.rate_mbps, opts.settings, self.netns, self.store,
                                 self.table, self.book, self.follower, self.notes,
                                 follow=opts.site is None)
        self.site = SiteFollow(opts.site, opts.node, opts.settings, self.store) \
            if opts.site else None
        self.started_wall = time.time()
        self._followed_at = 0.0
        self.acks_why: str | None = None  # why the first seconds' ACKs gave no capacity
        self._broken: str | None = None

    def run(self) -> tuple[int, Summary]:
        """CMD's exit status (as a shell gives it) and the summary."""
        with signals_held():
            status, seconds = self._run_and_tidy()
        return status, report.summary(self, seconds, status)

    def _run_and_tidy(self) -> tuple[int, float]:
        """CMD's exit status and how long it ran."""
        self.table.list()  # sweeps what killed runs left (kernel/run_cgroups.py)
        cg = run_cgroups.create()
        try:
            self.caps = self.table.commit(
                [Add(cg.rel, parse_dest(w), PACE_NO_LIMIT,
                     pace_bytes_per_s(self.choice.target_mbps))
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
        bytecount.count(self.moved, flows)
        limits = [lim for c in self.caps
                  if (lim := limit_of(c, self._follow_target(c), self._follows(c))) is not None]
        refresh = self.agg.refresh_snapshot(flows, time.monotonic_ns(), limits)
        self.groups = refresh.groups
        if self.choice.path is None:
            self.choice.choose(refresh.groups, self.caps)
        else:
            self.choice.start_following()
        if self.acks is not None and self.acks.due(time.monotonic(),
                                                   self.choice.path is not None):
            self._read_acks(flows)
        if self.learner is not None:
            self.learner.observe(refresh.groups, time.time(), self.measured)
        if self.site is not None:
            self._site_step()
        now = time.monotonic()
        if self.book.specs() and now - self._followed_at >= SAMPLE_EVERY_S * 0.99:
            self._followed_at = now
            self.follower.step([f for f in flows if not f.closed], self.caps)
            spec = self.book.specs()[0]
            if spec.target_mbps is not None:
                self.choice.target_mbps = spec.target_mbps
            self._follow_or_hold(spec, now)

    def _site_step(self) -> None:
        """--site: the caps' target is this node's share of the site's."""
        assert self.site is not None
        choice = self.choice
        if choice.path is None:
            return
        if self.site.share is None:
            self.site.start(choice.path, choice.host)
        local = None if choice.from_default else choice.start_mbps
        before = self.site.last
        d = self.site.step(time.time(), local)
        if d is None or (before is not None and d.target_mbps == before.target_mbps):
            return
        for cap in self.caps:
            self.table.set_follow(cap.id, 0, pace_bytes_per_s(d.target_mbps))
        choice.target_mbps = d.target_mbps
        log.info("run: %s", d.why, extra={"event": "site_target", "target_mbps": d.target_mbps,
                                           "nodes": list(d.nodes)})

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
        path = self.choice.path
        if path is None:
            self.acks.close()
            return
        addr = self.choice.host or path.dest.split("/")[0]
        mine = [f for f in flows if f.remote_addr == addr and f.direction == path.direction]
        seconds = max(time.monotonic() - self.acks.opened, 1e-3)
        moved = self.moved.get(addr)
        carried = 0 if moved is None else sum(
            (moved.received if path.direction == "receive" else moved.sent).values())
        goodput = mbps_over(carried, seconds)
        e = self.acks.read([f.cookie for f in mine], goodput,
                           max((f.mss for f in mine), default=0), path.direction)
        why = e.reason
        held = goodput >= UNBOUND_SHARE * self.choice.target_mbps
        if held:
            why = "the pace cap held the streams, so their ACKs are spaced at our own rate"
        got = measured(e, path.direction) if why is None else None
        if got is not None:
            self.measured[(addr, path.direction)] = got
            log.info("run: capacity %.1f Mbit/s from the ACKs to %s", got.mbps, addr)
        else:
            self.acks_why = why
            log.debug("run: no capacity from the first seconds' ACKs to %s: %s", addr, why,
                      extra={"event": "run_acks_no_capacity", "held": held})

    def _follows(self, cap: Cap) -> bool:
        return any(s.dest == cap.dest for s in self.book.specs())

    def _follow_target(self, cap: Cap) -> float | None:
        return self.choice.target_mbps if cap.mode == "pace" else None

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

def _stop(child: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        child.terminate()
    try:
        child.wait(timeout=TERM_WAIT_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


__all__ = ["RunOptions", "Session"]

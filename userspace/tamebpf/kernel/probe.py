"""A probe's cgroup and the forked child that sends its traffic.

The advisor's probes (advise/probes.py) send from a forked child that runs
in a cgroup of its own, so the flow telemetry attributes exactly the probe's
flows (`FlowReader(cgroup=...)` filters in the kernel). This module is that
plumbing and nothing more: the cgroup, made and emptied and removed on every
way out (Ctrl-C and SIGTERM included: common/lifecycle.py makes SIGTERM unwind),
and the child, which joins the cgroup (and a network namespace), runs the
work it is given and talks to the parent in JSON lines one way and stop
requests the other.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tamebpf.common.errors import TamebpfError
from tamebpf.kernel import orphans
from tamebpf.kernel.cgroups import empty_and_remove, require_cgroup2
from tamebpf.kernel.netns import enter_netns

# What the child runs: given a way to send the parent a JSON line and a way
# to ask whether the parent has asked stage k to stop, it returns its last
# line (a report, or {"error": ...}).
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
Say = Callable[[dict[str, Any]], None]
Work = Callable[[Say, Callable[[int], bool]], dict[str, Any]]


_swept = False  # this process has swept the orphans (kernel/orphans.py)


@contextlib.contextmanager
def probe_cgroup(streams: int) -> Iterator[str]:
    """A fresh cgroup for one probe run, tamebpf-probe-PID-STREAMS (a name
    paths/passive.py knows, so that its flows teach path memory nothing),
    flocked while it lives, so that a later command can tell it was left by
    a kill -9; the first one a process makes sweeps those left before."""
    global _swept
    root = require_cgroup2()
    if not _swept:
        _swept = True
        orphans.sweep(root)
    path, lock = _make_locked(root, streams)
    try:
        yield path
    finally:
        try:
            empty_and_remove(path, "probe cgroup")
        finally:
            os.close(lock)


def _make_locked(root: str, streams: int) -> tuple[str, int]:
    """mkdir and flock the cgroup; a suffix when a cgroup of the name is
    still there (a dead command with our PID whose child lives on)."""
    for attempt in range(5):
        path = os.path.join(root, orphans.probe_name(os.getpid(), streams, attempt))
        try:
            os.mkdir(path)
        except FileExistsError:
            continue
        lock = orphans.held_lock(path)
        if lock is not None:
            return path, lock
        empty_and_remove(path, "probe cgroup")  # a sweep took it between mkdir and lock
    name = orphans.probe_name(os.getpid(), streams)
    raise TamebpfError(f"cannot make a probe cgroup {root}/{name}",
                       "remove the tamebpf-probe-* cgroups that are left (rmdir), then try again")


class _StopRequests:
    """The child's side of the parent's "stage k has measured enough": one
    byte per request on a pipe, so a request for a stage that has already
    ended can never cut the next one short."""

    def __init__(self, fd: int) -> None:
        self.fd, self.asked = fd, set[int]()
        os.set_blocking(fd, False)

    def __call__(self, stage: int) -> bool:
        with contextlib.suppress(BlockingIOError):
            self.asked.update(os.read(self.fd, 64))
        return stage in self.asked


def _die_with(parent: int) -> None:
    """The kernel kills us when the parent dies, kill -9 included: no
    traffic outlives its command, and its cgroup empties so a later sweep
    can remove it. If the parent died before this call, we go now."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


def _child(work: Work, cgroup: str, netns: str | None, out_fd: int, stop_fd: int,
           parent: int) -> None:
    """In the forked child: join the probe's cgroup (sockets belong to the
    cgroup of the task that creates them) and, when asked, the network
    namespace; run `work`, write its last line, and exit without running
    any of the parent's clean-up."""
    code = 1

    def say(msg: dict[str, Any]) -> None:
        os.write(out_fd, json.dumps(msg).encode() + b"\n")

    try:
        _die_with(parent)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
        if netns:
            enter_netns(netns)
        msg = work(say, _StopRequests(stop_fd))
        code = 1 if "error" in msg else 0
    except BaseException as err:  # noqa: BLE001 - whatever it is, the parent reports it
        msg = {"error": f"{type(err).__name__}: {err}"}
    try:
        say(msg)
    finally:
        os._exit(code)


@dataclass
class Child:
    """The parent's side of the traffic child."""

    pid: int
    report_fd: int  # its JSON lines
    stop_fd: int  # our stop requests
    pending: bytes = b""

    def lines(self) -> list[dict[str, Any]]:
        """The complete lines written so far (never blocks; [] at end of file)."""
        while select.select([self.report_fd], [], [], 0)[0]:
            chunk = os.read(self.report_fd, 65536)
            if not chunk:
                break
            self.pending += chunk
        *done, self.pending = self.pending.split(b"\n")
        out = []
        for line in done:
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                obj = {"error": f"unreadable probe report {line[:80]!r}"}
            out.append(obj if isinstance(obj, dict) else {})
        return out

    def wait_for_line(self, timeout_s: float) -> None:
        """Sleep until the child writes, at most `timeout_s`."""
        select.select([self.report_fd], [], [], timeout_s)

    def ask_stop(self, stage: int) -> None:
        """Ask the child to end `stage` as if its time were up."""
        os.write(self.stop_fd, bytes([stage]))

    def reap(self) -> None:
        """Wait for the child that has written its last line."""
        os.waitpid(self.pid, 0)

    def close(self, kill: bool) -> None:
        """The pipes closed; `kill`: the child too (interrupted or timed out),
        at once."""
        try:
            if kill:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
        finally:
            os.close(self.report_fd)
            os.close(self.stop_fd)


def spawn(work: Work, cgroup: str, netns: str | None) -> Child:
    """Fork the traffic child, with a pipe each way."""
    r, w = os.pipe()
    stop_r, stop_w = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.close(stop_w)
        _child(work, cgroup, netns, w, stop_r, parent)
    os.close(w)
    os.close(stop_r)
    return Child(pid, r, stop_w)

"""A probe's cgroup and the forked child that sends its traffic.

The advisor's probes (advise/probes.py) send from a forked child that runs
in a cgroup of its own, so the flow telemetry attributes exactly the probe's
flows (`FlowReader(cgroup=...)` filters in the kernel). This module is that
plumbing and nothing more: the cgroup, made and emptied and removed on every
way out (Ctrl-C and SIGTERM included: lifecycle.py makes SIGTERM unwind),
and the child, which joins the cgroup (and a network namespace), runs the
work it is given and talks to the parent in JSON lines one way and stop
requests the other.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tamebpf.kernel.cgroups import empty_and_remove, require_cgroup2
from tamebpf.kernel.netns import enter_netns

# What the child runs: given a way to send the parent a JSON line and a way
# to ask whether the parent has asked stage k to stop, it returns its last
# line (a report, or {"error": ...}).
Say = Callable[[dict[str, Any]], None]
Work = Callable[[Say, Callable[[int], bool]], dict[str, Any]]


@contextlib.contextmanager
def probe_cgroup(streams: int) -> Iterator[str]:
    """A fresh cgroup for one probe run, tamebpf-probe-PID-STREAMS (a name
    paths/passive.py knows, so that its flows teach path memory nothing)."""
    root = require_cgroup2()
    path = os.path.join(root, f"tamebpf-probe-{os.getpid()}-{streams}")
    os.mkdir(path)
    try:
        yield path
    finally:
        empty_and_remove(path, "probe cgroup")


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


def _child(work: Work, cgroup: str, netns: str | None, out_fd: int, stop_fd: int) -> None:
    """In the forked child: join the probe's cgroup (sockets belong to the
    cgroup of the task that creates them) and, when asked, the network
    namespace; run `work`, write its last line, and exit without running
    any of the parent's clean-up."""
    code = 1

    def say(msg: dict[str, Any]) -> None:
        os.write(out_fd, json.dumps(msg).encode() + b"\n")

    try:
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
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.close(stop_w)
        _child(work, cgroup, netns, w, stop_r)
    os.close(w)
    os.close(stop_r)
    return Child(pid, r, stop_w)

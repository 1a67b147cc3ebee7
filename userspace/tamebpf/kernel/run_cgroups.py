"""The cgroups of `tamebpf run` (docs/run.md): one per run, named
tamebpf-run-PID below the cgroup v2 root, held with an flock on its
directory for as long as the run lives.

The lock is how a later command tells a dead run's cgroup from a live
one: the kernel drops it when the run exits, kill -9 included. Every reader
of the cap table (kernel/cap.CapTable.list) sweeps the cgroups whose lock
is free and that hold no process, and their caps (`dead_runs`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass

from tamebpf.common.errors import TamebpfError
from tamebpf.kernel.cgroups import empty_and_remove, require_cgroup2

PREFIX = "tamebpf-run-"
# Exactly the names new_run_cgroup makes: a sweep never takes a cgroup of
# someone else that merely starts with the prefix.
RUN_NAME = re.compile(r"tamebpf-run-[0-9]+(-[0-9]+)?")
KILL_WAIT_S = 2.0  # as long as cgroups.empty_and_remove waits for killed processes


@dataclass(frozen=True)
class RunCgroup:
    path: str  # absolute path of the directory
    rel: str  # below the cgroup v2 root, as `cap list` shows it
    lock_fd: int  # the open directory, flocked


def _held(path: str) -> int | None:
    """An fd of the directory at path, flocked exclusively (None: another
    process holds the lock, or the directory is gone)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _same_dir(fd: int, path: str) -> bool:
    """The locked fd is still the directory named path (not one a sweep
    removed between our mkdir and our lock)."""
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def create() -> RunCgroup:
    """A new run cgroup, locked: tamebpf-run-PID, or with a suffix when a
    cgroup of that name is still there (a dead run with our PID whose
    processes live on)."""
    root = require_cgroup2()
    for attempt in range(5):
        name = f"{PREFIX}{os.getpid()}" + (f"-{attempt}" if attempt else "")
        path = os.path.join(root, name)
        try:
            os.mkdir(path)
        except FileExistsError:
            continue
        fd = _held(path)
        if fd is not None and _same_dir(fd, path):
            return RunCgroup(path, "/" + name, fd)
        if fd is not None:  # a sweep took it between mkdir and lock
            os.close(fd)
    raise TamebpfError(f"cannot make and lock a cgroup {root}/{PREFIX}{os.getpid()}",
                       "remove the cgroups of that name that are left (rmdir), then run again")


def kill_all(path: str) -> None:
    """Every process in the cgroup at path, and below it, killed and gone
    (populated 0: their sockets are closed too); the cgroup is kept, and
    one already gone is no error."""
    deadline = time.monotonic() + KILL_WAIT_S
    while populated(path):
        if time.monotonic() > deadline:
            raise TamebpfError(f"the processes in {path} do not end", "kill them, then rmdir it")
        for pid in _procs(path):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)


def _procs(path: str) -> list[int]:
    pids = []
    for where, _dirs, _files in os.walk(path):
        with contextlib.suppress(FileNotFoundError), \
                open(os.path.join(where, "cgroup.procs"), encoding="ascii") as f:
            pids += [int(p) for p in f.read().split()]
    return pids


def release(cg: RunCgroup) -> None:
    """The run ends: the cgroup emptied and removed, then the lock let go."""
    try:
        empty_and_remove(cg.path, "the run's cgroup")
    finally:
        os.close(cg.lock_fd)


def populated(path: str) -> bool:
    """Whether a process is in the cgroup or below it (cgroup.events)."""
    try:
        with open(os.path.join(path, "cgroup.events"), encoding="ascii") as f:
            return any(line.split() == ["populated", "1"] for line in f)
    except FileNotFoundError:
        return False


@contextlib.contextmanager
def dead_runs() -> Iterator[list[str]]:
    """The run cgroups whose run is gone (lock free) and that hold no
    process, as paths below the cgroup v2 root, locked while the caller
    removes their caps; on the way out they are removed. A run cgroup that
    still holds processes (CMD outlived a kill -9 of its run) is kept: its
    cap still paces them."""
    root = require_cgroup2()
    held: list[tuple[str, int]] = []
    try:
        names = [n for n in os.listdir(root) if RUN_NAME.fullmatch(n)]
    except OSError:
        names = []
    try:
        for name in names:
            path = os.path.join(root, name)
            fd = _held(path)
            if fd is None:
                continue
            if populated(path):
                os.close(fd)
                continue
            held.append((path, fd))
        yield ["/" + os.path.basename(p) for p, _ in held]
    finally:
        for path, fd in held:
            try:
                with contextlib.suppress(OSError):
                    os.rmdir(path)
            finally:
                os.close(fd)

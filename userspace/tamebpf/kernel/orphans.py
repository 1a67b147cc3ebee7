"""Probe cgroups their command left behind, and their removal.

A probe's cgroup (kernel/probe.py, tamebpf-probe-PID-N) is removed on every
way out a process can see, but kill -9 gives it none. So each probe cgroup
is held with an flock on its directory while its command lives (the kernel
drops the lock when the process dies, however it dies), its traffic child
dies with its parent (PR_SET_PDEATHSIG), and every command that makes probe
cgroups first sweeps the ones that are orphaned: lock free, the PID in the
name gone, and no process inside. One line is said per cgroup removed.
"""

from __future__ import annotations

import contextlib
import os
import re

from tamebpf.common.logs import log
from tamebpf.kernel.run_cgroups import _held, populated

PREFIX = "tamebpf-probe-"
_NAME = re.compile(re.escape(PREFIX) + r"(\d+)-\d+(-\d+)?")


# The run cgroups' lock (an flock of the directory, taken without waiting):
# probe cgroups are held the same way.
held_lock = _held


def probe_name(pid: int, streams: int, attempt: int = 0) -> str:
    return f"{PREFIX}{pid}-{streams}" + (f"-{attempt}" if attempt else "")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep(root: str) -> list[str]:
    """Remove the orphaned probe cgroups directly below `root` (the cgroup
    v2 root); returns their names. A cgroup whose lock is held, whose PID
    lives (an older tamebpf held no lock: its PID is the only sign), or that
    still holds a process is left alone."""
    removed = []
    try:
        names = sorted(n for n in os.listdir(root) if _NAME.fullmatch(n))
    except OSError:
        return []
    for name in names:
        m = _NAME.fullmatch(name)
        assert m is not None
        pid = int(m.group(1))
        if pid == os.getpid() or _pid_alive(pid):
            continue
        path = os.path.join(root, name)
        fd = held_lock(path)
        if fd is None:
            continue  # its command lives (or another sweep has it)
        try:
            if populated(path):
                continue
            with contextlib.suppress(FileNotFoundError):
                os.rmdir(path)
            removed.append(name)
            log.warning("removed probe cgroup %s, left by process %d, which is gone",
                        path, pid)
        except OSError as err:
            log.debug("probe cgroup %s left as it is: %s", path, err)
        finally:
            os.close(fd)
    return removed

"""cgroup v2: where it is mounted, mapping paths to ids and back, and
emptying and removing a cgroup.

A cgroup's id is the inode number of its directory in cgroupfs, the same
number the kernel reports as the cgroup id of a socket.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass

from tamebpf.common.errors import TamebpfError, UsageError

MOUNTS = "/proc/self/mounts"


def mounts(mounts_path: str = MOUNTS) -> list[tuple[str, str, str]]:
    """(mount point, fs type, options) per line of a mounts table."""
    out = []
    with open(mounts_path) as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 4:
                # Mount points escape spaces as \040.
                out.append((fields[1].replace("\\040", " "), fields[2], fields[3]))
    return out


def cgroup2_mount(mounts_path: str = MOUNTS) -> str | None:
    for point, fstype, _ in mounts(mounts_path):
        if fstype == "cgroup2":
            return point
    return None


def require_cgroup2(mounts_path: str = MOUNTS) -> str:
    root = cgroup2_mount(mounts_path)
    if root is None:
        raise TamebpfError(
            "cgroup v2 is not mounted",
            "mount it with 'mount -t cgroup2 none /sys/fs/cgroup' (or your unified path)",
        )
    return root


@dataclass(frozen=True)
class Cgroup:
    path: str  # absolute path of the directory
    rel: str  # path below the cgroup2 root, "/" for the root itself
    id: int
    level: int  # 0 for the root


def resolve(path: str, mounts_path: str = MOUNTS) -> Cgroup:
    """Accept an absolute cgroupfs path or one relative to the cgroup2 root."""
    root = require_cgroup2(mounts_path)
    absolute = path if os.path.isabs(path) else os.path.join(root, path)
    absolute = os.path.realpath(absolute)
    rel = os.path.relpath(absolute, root)
    if rel == ".." or rel.startswith("../"):
        for point, fstype, opts in mounts(mounts_path):
            if fstype == "cgroup" and (absolute + "/").startswith(point.rstrip("/") + "/"):
                raise UsageError(
                    f"--cgroup {path}: that is a cgroup v1 hierarchy ({opts.split(',')[-1]})",
                    f"give a cgroup v2 path under {root}",
                )
        raise UsageError(f"--cgroup {path}: not under the cgroup v2 root {root}")
    if not os.path.isdir(absolute):
        raise UsageError(f"--cgroup {path}: no such cgroup", f"cgroup v2 is mounted at {root}")
    rel = "/" if rel == "." else "/" + rel
    level = 0 if rel == "/" else rel.count("/")
    return Cgroup(path=absolute, rel=rel, id=os.stat(absolute).st_ino, level=level)


class CgroupNames:
    """Map cgroup ids to paths relative to the cgroup2 root, walking cgroupfs
    again only when an id is not known yet (cgroups come and go)."""

    def __init__(self, root: str) -> None:
        self.root = root
        self._names: dict[int, str] = {}

    def _walk(self) -> None:
        names = {}
        for dirpath, _dirs, _files in os.walk(self.root):
            try:
                ino = os.stat(dirpath).st_ino
            except OSError:
                continue  # removed while we walked
            rel = os.path.relpath(dirpath, self.root)
            names[ino] = "/" if rel == "." else "/" + rel
        self._names = names

    def name(self, cgid: int) -> str | None:
        if cgid == 0:
            return None
        if cgid not in self._names:
            self._walk()
        return self._names.get(cgid)


def empty_and_remove(path: str, what: str = "cgroup", attempts: int = 100,
                     pause_s: float = 0.02) -> None:
    """Kill every process in the cgroup at `path` and in the cgroups below
    it, and remove them all; a cgroup already gone is no error. Raises
    TamebpfError (naming it `what`) when processes are still exiting after
    `attempts` tries."""
    for _ in range(attempts):
        try:
            with open(os.path.join(path, "cgroup.procs")) as f:
                pids = [int(p) for p in f.read().split()]
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            for child in sorted(os.listdir(path)):
                if os.path.isdir(os.path.join(path, child)):
                    empty_and_remove(os.path.join(path, child), what, attempts, pause_s)
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(pause_s)  # processes still exiting
    raise TamebpfError(f"could not remove {what} {path}", "remove it with rmdir")

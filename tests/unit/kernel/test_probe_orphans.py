"""Which probe cgroups a sweep removes (kernel/orphans.py), on plain
directories standing in for the cgroup v2 root: only those whose PID is
gone, whose lock is free and that hold nothing; one line each. The real
thing (kill -9 mid-probe) is tests/integration/test_probe_signals.py."""

from __future__ import annotations

import fcntl
import os
import subprocess
from pathlib import Path

import pytest

from tamebpf.kernel import orphans


def gone_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def test_only_orphans_are_swept(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    dead, dead_locked = gone_pid(), gone_pid()
    names = {
        orphans.probe_name(dead, 10): False,  # removed
        orphans.probe_name(dead, 1, 2): False,  # removed (a suffixed name)
        orphans.probe_name(os.getpid(), 10): True,  # ours: alive
        orphans.probe_name(1, 10): True,  # its PID lives (an older tamebpf held no lock)
        orphans.probe_name(dead_locked, 10): True,  # locked by a live command
        f"tamebpf-run-{dead}": True,  # not a probe cgroup
        f"tamebpf-probe-{dead}": True,  # not the name probe cgroups have
    }
    for name in names:
        (tmp_path / name).mkdir()
    lock = os.open(tmp_path / orphans.probe_name(dead_locked, 10), os.O_RDONLY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        removed = orphans.sweep(str(tmp_path))
    finally:
        os.close(lock)
    assert sorted(removed) == sorted(n for n, kept in names.items() if not kept)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(n for n, k in names.items() if k)
    lines = [r.getMessage() for r in caplog.records if "removed probe cgroup" in r.getMessage()]
    assert len(lines) == 2 and all(str(dead) in line for line in lines), lines

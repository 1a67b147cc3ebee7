"""`cap set/rm/apply` after the kernel took the caps: a state directory
another process, or another thread of this one, holds locked gives one
warning saying the caps are in force and what to do, never a traceback
(cap/plan.py sync_follows)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tamebpf.cap import plan
from tamebpf.cap.book import FollowBook, FollowSpec
from tamebpf.cap.spec import CapSpec, parse_dest
from tamebpf.cap.table import PACE_NO_LIMIT
from tamebpf.common.records import Cap
from tamebpf.paths import statedir
from tamebpf.paths.entry import PathKey
from tamebpf.paths.store import DB_NAME

KEY = PathKey("198.18.3.2/32", "tb-snd", "cubic")
HOLD = ("import fcntl, os, sys, time\n"
        "fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "print('held', flush=True)\n"
        "time.sleep(60)\n")


def test_a_held_state_dir_is_one_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    book = FollowBook(str(tmp_path))
    book.put(FollowSpec("/dtn", "198.18.3.2/32", KEY, 0.3, "198.18.3.2", 1000.0))
    monkeypatch.setattr(statedir, "LOCK_WAIT_S", 0.3)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        cap = Cap(7, "/dtn", 42, True, "198.18.3.2/32", "ipv4", None, 4, 0, 0, 0, 0, 0)
        started = time.monotonic()
        warnings = plan.sync_follows([], [cap], book=book)
        assert time.monotonic() - started < 5.0
    finally:
        holder.kill()
        holder.wait()
    assert len(warnings) == 1, warnings
    assert "caps are in force" in warnings[0] and f"PID {holder.pid}" in warnings[0] \
        and "again" in warnings[0]
    # nothing was changed: the spec is still there, and goes once the lock is free
    assert [s.cgroup for s in book.specs()] == ["/dtn"]
    assert plan.sync_follows([], [cap], book=book) == [] and book.specs() == []


def test_a_holder_in_this_process_is_waited_for_too(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """export's threads (the follower's book writes, the learner's first
    write of path memory) take the same lock in one process: it holds off a
    writer of the holder's own process too, and the warning names it."""
    book = FollowBook(str(tmp_path))
    book.put(FollowSpec("/dtn", "198.18.3.2/32", KEY, 0.3, "198.18.3.2", 1000.0))
    monkeypatch.setattr(statedir, "LOCK_WAIT_S", 0.3)
    cap = Cap(7, "/dtn", 42, True, "198.18.3.2/32", "ipv4", None, 4, 0, 0, 0, 0, 0)
    with statedir.StateDir(str(tmp_path)) as sd, sd.locked():
        warnings = plan.sync_follows([], [cap], book=book)
    assert len(warnings) == 1 and f"PID {os.getpid()}" in warnings[0], warnings
    assert [s.cgroup for s in book.specs()] == ["/dtn"], "the book changed under the lock"


def test_a_refused_path_memory_leaves_the_book_as_it_was(tmp_path: Path) -> None:
    """A following cap's spec goes into the book only after path memory was
    read: a memory that refuses (here a symlink planted at paths.db) leaves
    the book as it was, which is what the warning says."""
    book = FollowBook(str(tmp_path))
    os.symlink(tmp_path / "elsewhere.db", tmp_path / DB_NAME)
    spec = CapSpec("/dtn", parse_dest("198.18.3.2/32"), auto="198.18.3.2", max_impact="5%",
                   mode="pace", follow=True)
    cap = Cap(7, "/dtn", 42, True, "198.18.3.2/32", "ipv4", None, PACE_NO_LIMIT, 1, 0, 0, 0, 0)
    warnings = plan.sync_follows([(spec, cap, KEY)], [], book=book)
    assert len(warnings) == 1 and "not updated" in warnings[0], warnings
    assert book.specs() == [], "the book took a spec its command was told was not stored"

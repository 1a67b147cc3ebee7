"""The two races of a state directory another user owns, for real (issue
48's review): a file planted after the checks, when SQLite opens a journal
by name (paths/fsuid.py: SQLite's I/O as the owner), and a process stuck
holding the directory's lock (paths/statedir.py: a bounded wait)."""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tamebpf.cli import main
from tamebpf.commands.export import learning
from tamebpf.paths.fsuid import CAP_DAC_READ_SEARCH, as_owner
from tamebpf.paths.statedir import LOCK_WAIT_S, StateDir, StateDirBusy
from tamebpf.paths.store import DB_NAME, PathStore
from tests.integration.kernel_fixtures import iperf3_available, read_line
from tests.integration.test_state_files import OWNER, advise_quick, tamebpf
from tests.unit.paths.test_paths_store import an_entry

pytestmark = [pytest.mark.root]
CAP_DAC_OVERRIDE = 1
ROOTS_DATA = b"root's own file, not a journal\n" * 64
LATE = 5.0  # how far past LOCK_WAIT_S a busy lock may be said, on a loaded machine


@pytest.fixture
def owned_state(tmp_path: Path) -> Path:
    """A state directory of nobody's, holding a database its exporter wrote."""
    d = tmp_path / "state"
    d.mkdir(mode=0o750)
    os.chown(d, OWNER, OWNER)
    PathStore(str(d)).put(an_entry())
    return d


def thread_ids() -> tuple[int, int]:
    """This thread's filesystem uid and its effective capabilities."""
    status = Path("/proc/thread-self/status").read_text().splitlines()
    fields = dict(line.split(":", 1) for line in status)
    return int(fields["Uid"].split()[3]), int(fields["CapEff"], 16)


def test_the_owners_ids_are_the_threads_own_and_given_back() -> None:
    """Another thread (the exporter's scrape, say) keeps root's file
    access while one works as the owner."""
    inside, release, seen = threading.Event(), threading.Event(), {}

    def work() -> None:
        with as_owner(OWNER, OWNER):
            seen["in"] = thread_ids()
            inside.set()
            release.wait(10)
        seen["after"] = thread_ids()

    before = thread_ids()
    worker = threading.Thread(target=work)
    worker.start()
    try:
        assert inside.wait(10), "the worker never got the owner's ids"
        assert thread_ids() == before, f"the main thread's ids changed to {thread_ids()}"
    finally:
        release.set()
        worker.join(10)
    fsuid, caps = seen["in"]
    assert fsuid == OWNER, f"fsuid {fsuid} inside, expected {OWNER}"
    assert not caps & (1 << CAP_DAC_OVERRIDE), "CAP_DAC_OVERRIDE kept as the owner"
    assert caps & (1 << CAP_DAC_READ_SEARCH), "CAP_DAC_READ_SEARCH not given back"
    assert seen["after"] == before, f"ids after {seen['after']}, before {before}"


def plant_hard_link(d: Path, name: str, root_only: Path) -> Path:
    """A hard link at `name` to a file of root's that the owner may not
    write (planted by root here: the kernel lets the owner do it only where
    fs.protected_hardlinks is 0)."""
    target = root_only / "roots-file"
    target.write_bytes(ROOTS_DATA)
    target.chmod(0o600)
    os.link(target, d / name)
    return target


def plant_symlink(d: Path, name: str, root_only: Path) -> Path:
    target = root_only / "made-by-root"
    (d / name).symlink_to(target)
    return target


@pytest.mark.parametrize("plant", [plant_hard_link, plant_symlink])
def test_a_journal_planted_after_the_checks_is_touched_only_as_its_owner_could(
        owned_state: Path, tmp_path: Path, plant: Any, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """With the checks before opening turned off by hand (as if the plant
    came just after them), only the owner's ids stand between SQLite and
    root's file: `paths forget --all` (a write, in WAL mode) refuses in one
    line and root's file is as it was, or not made.

    How it was checked: with tamebpf.paths.store.as_owner made a no-op
    (monkeypatched to lambda *a: contextlib.nullcontext()), the hard-link
    case fails: `paths forget` exits 0, SQLite (root) having written its
    WAL over root's file. The
    symbolic link case passes either way: SQLite's unix VFS opens its
    journals O_NOFOLLOW (SQLite 3.40 here); it is kept for an older one."""
    root_only = tmp_path / "root-only"
    root_only.mkdir(mode=0o700)
    target = plant(owned_state, DB_NAME + "-wal", root_only)
    monkeypatch.setattr(StateDir, "_check", lambda *_: None)
    capsys.readouterr()
    code = main(["paths", "forget", "--all", "--state-dir", str(owned_state)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and str(owned_state) in err[0], \
        f"expected exit 2 and one line naming {owned_state}, got {code}: {err}"
    if plant is plant_hard_link:
        assert target.read_bytes() == ROOTS_DATA, "root's file was written through the link"
    else:
        assert not target.exists(), f"{target} was created through the link"


HOLD = ("import fcntl, os, sys, time\n"
        "fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "print('held', flush=True)\n"
        "time.sleep(300)\n")


@contextlib.contextmanager
def lock_held(d: Path) -> Iterator[int]:
    """Another process holding the state directory's lock, as a stuck
    tamebpf would; yields its PID, and kills it on the way out."""
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(d)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert read_line(holder, 10, "the lock holder") == "held"
        yield holder.pid
    finally:
        holder.kill()
        holder.wait(timeout=10)


def test_a_stuck_lock_holder_is_named_after_the_bounded_wait(tmp_path: Path) -> None:
    d = tmp_path / "state"
    d.mkdir(mode=0o750)
    os.chown(d, OWNER, OWNER)
    with lock_held(d) as pid:
        began = time.monotonic()
        with pytest.raises(StateDirBusy) as err:
            PathStore(str(d)).put(an_entry())  # the first write takes the lock
        waited = time.monotonic() - began
    assert LOCK_WAIT_S <= waited < LOCK_WAIT_S + LATE, \
        f"waited {waited:.1f} s for the lock, expected {LOCK_WAIT_S}..{LOCK_WAIT_S + LATE}"
    said = str(err.value)
    assert str(d) in said and f"PID {pid}" in said and "\n" not in said, said
    assert list(d.iterdir()) == [], "a write that never got the lock left a file"
    PathStore(str(d)).put(an_entry())  # the holder gone, the lock is free
    assert PathStore(str(d)).count() == 1


def test_paths_says_one_line_and_exits_2_when_the_lock_is_stuck(tmp_path: Path) -> None:
    """`paths` takes the lock to move a bad file aside."""
    d = tmp_path / "state"
    d.mkdir(mode=0o750)
    (d / DB_NAME).write_bytes(b"not a database, " * 512)
    os.chown(d, OWNER, OWNER)
    os.chown(d / DB_NAME, OWNER, OWNER)
    with lock_held(d) as pid:
        res = tamebpf("paths", "--state-dir", str(d))
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, f"exit {res.returncode}: {res.stderr}"
    assert "path memory is off" in lines[0] and f"PID {pid}" in lines[0], lines[0]


@pytest.mark.skipif(not iperf3_available(), reason="iperf3 not installed")
def test_advise_advises_without_memory_when_the_lock_is_stuck(tmp_path: Path) -> None:
    d = tmp_path / "state"
    d.mkdir(mode=0o750)
    os.chown(d, OWNER, OWNER)
    with lock_held(d) as pid:
        res = advise_quick(d)  # its advice is remembered: the first write takes the lock
    assert res.returncode == 0 and '"num_flows"' in res.stdout, \
        f"expected advice despite the lock, exit {res.returncode}: {res.stderr}"
    off = [line for line in res.stderr.splitlines() if "path memory is off" in line]
    assert len(off) == 1 and f"PID {pid}" in off[0], f"expected one line: {res.stderr}"
    assert "Traceback" not in res.stderr


def test_exports_learning_logs_one_line_and_goes_on_when_the_lock_is_stuck(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """export's learning hook with a learner that stores what it sees: the
    failed write is one log line, and the hook (the exporter) goes on."""
    d = tmp_path / "state"
    d.mkdir(mode=0o750)
    store = PathStore(str(d))
    reading = SimpleNamespace(groups=[], time_s=time.time())
    collector = SimpleNamespace(read=lambda max_age_s: reading)
    learner = SimpleNamespace(store=store, newest=lambda _groups: {},
                              observe=lambda *_: store.put(an_entry()))
    caplog.set_level(logging.WARNING)
    with lock_held(d) as pid, learning(collector, learner, 0.2):  # type: ignore[arg-type]
        deadline = time.monotonic() + LOCK_WAIT_S + LATE
        while time.monotonic() < deadline and not caplog.records:
            time.sleep(0.1)
    said = [r for r in caplog.records if getattr(r, "event", None) == "paths_error"]
    assert said and f"PID {pid}" in said[0].getMessage(), \
        f"expected a paths_error line naming PID {pid}: {[r.getMessage() for r in caplog.records]}"

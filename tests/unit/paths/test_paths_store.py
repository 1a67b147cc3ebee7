"""Path memory's SQLite file: round trip, bounded size, permissions, and
robustness with real processes (kill -9 mid-write, two writers at once, a
corrupt or foreign file)."""

from __future__ import annotations

import os
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tamebpf.model import Settings
from tamebpf.paths.entry import REMOTE_CC, PathEntry, PathKey, Window
from tamebpf.paths.recall import entry_from_advice
from tamebpf.paths.store import APPLICATION_ID, DB_NAME, SCHEMA_VERSION, PathStore
from tests.unit.paths.test_paths_recall import results

KEY = PathKey("198.18.3.2/32", "tb-snd", "cubic")
ROOT = Path(__file__).resolve().parents[3]


def an_entry(when: float | None = None, **kw: object) -> PathEntry:
    e = entry_from_advice(results(Settings())["capacity"], KEY,
                          time.time() if when is None else when, "settled")
    assert e is not None
    return replace(e, **kw)  # type: ignore[arg-type]


def test_round_trip_newest_and_latest(tmp_path: Path) -> None:
    store = PathStore(str(tmp_path / "state"))
    assert store.newest(KEY) is None and store.latest() == []
    assert not (tmp_path / "state").exists(), "reading must not create the state directory"
    old = an_entry(time.time() - 100)
    new = an_entry(advised_streams=7)
    other = an_entry(key=PathKey("2001:db8::1/128", "host", "bbr"))
    for e in (old, new, other):
        e_id = store.put(e)
        assert e_id > 0
    got = store.newest(KEY)
    assert got == replace(new, id=got.id if got else None)
    assert [e.key for e in store.latest()] == [other.key, KEY]
    assert store.count() == 3
    assert store.mark_changed(KEY) == 2
    got = store.newest(KEY)
    assert got is not None and got.changed
    assert store.forget(["198.18.3.2/32"]) == 2
    assert [e.key for e in store.latest()] == [other.key]
    assert store.forget(None) == 1 and store.count() == 0


def test_the_state_directory_is_made_private_on_first_write(tmp_path: Path) -> None:
    d = tmp_path / "a" / "state"
    old = os.umask(0)
    try:
        PathStore(str(d)).put(an_entry())
    finally:
        os.umask(old)
    assert stat.S_IMODE(d.stat().st_mode) == 0o750
    assert stat.S_IMODE((d / DB_NAME).stat().st_mode) == 0o640
    db = sqlite3.connect(d / DB_NAME)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give files away")
def test_a_database_root_creates_belongs_to_the_directorys_owner(tmp_path: Path) -> None:
    """The exporter runs as a service user; root's advise may write first."""
    d = tmp_path / "state"
    d.mkdir(mode=0o750)
    os.chown(d, 65534, 65534)
    PathStore(str(d)).put(an_entry())
    st = (d / DB_NAME).stat()
    assert (st.st_uid, st.st_gid) == (65534, 65534)
    for suffix in ("-wal", "-shm"):
        if (d / (DB_NAME + suffix)).exists():
            assert (d / (DB_NAME + suffix)).stat().st_uid == 65534, suffix


def test_old_entries_and_rows_beyond_the_cap_expire_on_write(tmp_path: Path) -> None:
    store = PathStore(str(tmp_path), retention_s=3600, max_rows=5)
    now = time.time()
    store.put(an_entry(now - 7200))  # older than the retention
    for i in range(8):
        store.put(an_entry(now - 100 + i, advised_streams=i + 1))
    assert store.count() == 5
    kept = sorted(e.advised_streams for e in store.latest())
    assert kept == [8], kept
    size = (tmp_path / DB_NAME).stat().st_size
    for i in range(200):
        store.put(an_entry(now + i))
    assert store.count() == 5
    assert (tmp_path / DB_NAME).stat().st_size < size + 64 * 1024


def run_cli(state: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, TAMEBPF_STATE_DIR=str(state), PYTHONPATH=str(ROOT / "userspace"))
    return subprocess.run([sys.executable, "-m", "tamebpf", "paths", *argv], env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("kind", ["garbage", "foreign", "empty-header"])
def test_a_bad_file_gets_one_line_and_a_fresh_database(tmp_path: Path, kind: str) -> None:
    db = tmp_path / DB_NAME
    if kind == "garbage":
        db.write_bytes(b"this is not a database\n" * 500)
    elif kind == "foreign":
        other = sqlite3.connect(db)
        other.execute("CREATE TABLE songs (title TEXT)")
        other.commit()
        other.close()
    else:
        db.write_bytes(b"SQLite format 3\0" + b"\xff" * 4080)
    before = db.read_bytes()
    res = run_cli(tmp_path)
    assert res.returncode == 0, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert str(db) in lines[0] and "moved it to" in lines[0], lines
    aside = [p for p in tmp_path.iterdir() if p.name.startswith(DB_NAME + ".bad-")
             and not p.name.endswith(("-wal", "-shm"))]
    assert len(aside) == 1 and aside[0].name in lines[0]
    assert aside[0].read_bytes() == before, "the bad file is kept as it was"
    assert "no paths remembered" in res.stdout
    # The fresh database works, and the next run says nothing.
    PathStore(str(tmp_path)).put(an_entry())
    res = run_cli(tmp_path, "--json")
    assert res.returncode == 0 and res.stderr == "", res.stderr
    assert '"198.18.3.2/32"' in res.stdout


WRITER = """
import sys, time
sys.path[:0] = [{root!r}, {user!r}]
from tests.unit.paths.test_paths_store import an_entry
from tamebpf.paths.store import PathStore
store = PathStore({dir!r})
for i in range({n}):
    store.put(an_entry(advised_streams=i % 32 + 1))
    print(i, flush=True)
"""


def writer(state: Path, n: int) -> subprocess.Popen[str]:
    code = WRITER.format(root=str(ROOT), user=str(ROOT / "userspace"), dir=str(state), n=n)
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_two_writers_at_once_lose_nothing(tmp_path: Path) -> None:
    procs = [writer(tmp_path, 150) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0 and not err, err
    assert PathStore(str(tmp_path)).count() == 300


def test_a_writer_killed_mid_write_leaves_a_sound_database(tmp_path: Path) -> None:
    committed = 0
    for delay in (0.3, 0.45, 0.6, 0.75, 0.9):
        p = writer(tmp_path, 100_000)
        assert p.stdout is not None
        # Wait until it writes, then kill it at some point in its loop.
        assert p.stdout.readline(), "the writer never wrote"
        time.sleep(delay)
        os.kill(p.pid, signal.SIGKILL)
        out, _ = p.communicate(timeout=30)
        done = 1 + len(out.splitlines())  # rows it saw committed
        count = PathStore(str(tmp_path)).count()
        # Every committed row is there; at most the one in flight besides.
        assert committed + done <= count <= committed + done + 1, (committed, done, count)
        committed = count
    db = sqlite3.connect(tmp_path / DB_NAME)
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    db.close()
    store = PathStore(str(tmp_path))
    store.put(an_entry())
    assert store.count() == committed + 1


def test_forget_by_prefix_and_all_from_the_command_line(tmp_path: Path) -> None:
    store = PathStore(str(tmp_path / "s"))
    for dest in ("198.18.3.2/32", "198.18.4.9/32", "2001:db8::1/128"):
        store.put(an_entry(key=PathKey(dest, "host", "cubic")))
    # --state-dir before the verb holds for it (env points elsewhere).
    res = run_cli(tmp_path / "elsewhere", "--state-dir", str(tmp_path / "s"), "forget",
                  "--dest", "198.18.0.0/16")
    assert res.returncode == 0 and "forgot 2 entries" in res.stdout, res
    assert [e.key.dest for e in store.latest()] == ["2001:db8::1/128"]
    res = run_cli(tmp_path / "s", "forget", "--dest", "not-an-address")
    assert res.returncode == 2 and "not-an-address" in res.stderr, res
    res = run_cli(tmp_path / "s", "forget")
    assert res.returncode == 2 and "--all" in res.stderr
    res = run_cli(tmp_path / "s", "forget", "--all")
    assert res.returncode == 0 and "forgot 1 entry" in res.stdout and store.count() == 0


def test_passive_times_are_those_since_the_last_probed_entry(tmp_path: Path) -> None:
    store = PathStore(str(tmp_path))
    now = time.time()  # rows older than the retention are expired on write
    e = an_entry(now - 300)
    store.put(replace(e, when=now - 400, source="passive", probe_kind="none"))
    store.put(e)  # probed: the transfers before it no longer count
    for t in (now - 200, now - 170):
        store.put(replace(e, when=t, source="passive", probe_kind="none"))
    assert store.passive_times(e.key) == [now - 200, now - 170]
    assert PathStore(str(tmp_path / "none")).passive_times(e.key) == []


@pytest.mark.parametrize("version, dropped", [
    (1, ("streams_low", "streams_high", "spread", "windows", "direction")),  # no count range
    (2, ("windows", "direction")),  # before pools
    (3, ("direction",)),  # before downloads
])
def test_an_older_file_reads_and_gets_the_new_columns_at_its_first_write(
        tmp_path: Path, version: int, dropped: tuple[str, ...]) -> None:
    store = PathStore(str(tmp_path))
    store.put(an_entry())
    # Make it a file as an older tamebpf left it.
    db = sqlite3.connect(tmp_path / DB_NAME)
    for column in dropped:
        db.execute(f"ALTER TABLE paths DROP COLUMN {column}")
    db.execute(f"PRAGMA user_version = {version}")
    db.commit()
    db.close()
    old = store.newest(KEY)
    assert old is not None and old.advised_streams == an_entry().advised_streams
    assert old.windows == ()
    if version == 1:
        assert (old.streams_low, old.streams_high, old.spread) == (None, None, None)
    new = replace(an_entry(advised_streams=7), source="passive", probe_kind="none",
                  windows=(Window(4, 30.5, 20.0), Window(4, 28.25, 60.0)))
    assert new.streams_low is not None and new.spread is not None
    store.put(new)
    got = store.newest(KEY)
    assert got == replace(new, id=got.id if got else None)
    db = sqlite3.connect(tmp_path / DB_NAME)
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    db.close()


def test_downloads_and_uploads_of_a_path_are_kept_apart(tmp_path: Path) -> None:
    store = PathStore(str(tmp_path))
    down = replace(KEY, congestion=REMOTE_CC, direction="receive")
    up_entry, down_entry = an_entry(), an_entry(key=down, advised_streams=9)
    store.put(up_entry)
    assert store.newest(down) is None, "an upload's entry answered for the download"
    store.put(down_entry)
    got_up, got_down = store.newest(KEY), store.newest(down)
    assert got_up is not None and got_up.key.direction == "send"
    assert got_down is not None and got_down.key == down and got_down.advised_streams == 9
    assert sorted(e.key.direction for e in store.latest()) == ["receive", "send"]
    assert store.mark_changed(down) == 1
    got_up = store.newest(KEY)
    assert got_up is not None and not got_up.changed, "the upload was marked with it"

"""State files root opens in a directory another user owns
(paths/statedir.py): each of paths.db, -wal, -shm and -journal planted as a
symbolic link, a hard link and another user's file is refused in one line,
nothing is created at a link's target, root's and the owner's files are
used, and a read creates nothing. Also the follow book and --state-dir's
values (tests/integration/test_state_files.py: full and read-only disks,
the commands)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tamebpf.cap.book import FOLLOWS_NAME, FollowBook
from tamebpf.common.errors import UsageError
from tamebpf.paths.statedir import STATE_DIR_ENV, StateFileRefused, state_dir
from tamebpf.paths.store import DB_NAME, PathStore
from tests.unit.paths.test_paths_store import KEY, an_entry

NAMES = [DB_NAME, DB_NAME + "-wal", DB_NAME + "-shm", DB_NAME + "-journal"]
OWNER = 65534  # nobody: the state directory's owner, as the exporter's user is
STRANGER = 4242  # neither the owner nor root
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="only root can give files away")


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """A state directory owned by another user (root runs the test), beside
    a directory where planted links point."""
    d = tmp_path / "state"
    d.mkdir(mode=0o750)
    if os.geteuid() == 0:
        os.chown(d, OWNER, OWNER)
    (tmp_path / "elsewhere").mkdir()
    return d


def plant_link(d: Path, name: str) -> Path:
    target = d.parent / "elsewhere" / f"created-by-root-{name}"
    (d / name).symlink_to(target)
    return target


def plant_hard_link(d: Path, name: str) -> Path:
    other = d.parent / "elsewhere" / f"root-file-{name}"
    other.write_bytes(b"")
    os.link(other, d / name)
    return other


def plant_owned_by(uid: int) -> Callable[[Path, str], Path]:
    def plant(d: Path, name: str) -> Path:
        (d / name).write_bytes(b"")
        os.chown(d / name, uid, uid)
        return d / name
    return plant


def a_real_database(d: Path) -> None:
    """A database the owner's exporter wrote, so that the planted journal
    names are what SQLite would open next."""
    PathStore(str(d)).put(an_entry())


@pytest.mark.parametrize("name", NAMES)
def test_a_link_at_a_state_name_is_refused_and_its_target_never_made(
        state: Path, name: str) -> None:
    if name != DB_NAME:
        a_real_database(state)
    target = plant_link(state, name)
    store = PathStore(str(state))
    for use in (lambda: store.newest(KEY), lambda: store.put(an_entry()), store.check):
        with pytest.raises(StateFileRefused, match="symbolic link") as err:
            use()
        assert "\n" not in str(err.value) and str(state / name) in str(err.value)
    assert not target.exists(), f"{target} was created through the link at {name}"
    assert (state / name).is_symlink(), "the planted link must be left for its owner to see"


@needs_root
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(("plant", "says"), [
    (plant_hard_link, "hard links"),
    (plant_owned_by(STRANGER), f"belongs to uid {STRANGER}"),
])
def test_a_hard_link_or_a_strangers_file_is_refused(
        state: Path, name: str, plant: Callable[[Path, str], Path], says: str) -> None:
    if name != DB_NAME:
        a_real_database(state)
    planted = plant(state, name)
    before = planted.stat()
    store = PathStore(str(state))
    for use in (lambda: store.newest(KEY), lambda: store.put(an_entry())):
        with pytest.raises(StateFileRefused, match=says):
            use()
    after = planted.stat()
    assert (after.st_uid, after.st_size, after.st_mtime_ns) == \
        (before.st_uid, before.st_size, before.st_mtime_ns), "the planted file was changed"


@needs_root
@pytest.mark.parametrize("name", NAMES)
def test_root_and_the_owners_files_are_used(state: Path, name: str) -> None:
    """Root's own files and the owner's are the legitimate ones: an empty
    journal of either is SQLite's business, not a refusal."""
    a_real_database(state)
    if name != DB_NAME:
        for uid in (0, OWNER):
            with contextlib.suppress(FileNotFoundError):
                (state / name).unlink()
            plant_owned_by(uid)(state, name)
            assert PathStore(str(state)).newest(KEY) is not None
    os.chown(state / DB_NAME, 0, 0)
    assert PathStore(str(state)).newest(KEY) is not None


@needs_root
def test_roots_first_write_belongs_to_the_owner_and_leaves_no_lock_file(state: Path) -> None:
    PathStore(str(state)).put(an_entry())
    names = sorted(p.name for p in state.iterdir())
    assert names == [DB_NAME], f"expected only {DB_NAME}, got {names}"
    st = (state / DB_NAME).stat()
    assert (st.st_uid, st.st_gid, st.st_nlink) == (OWNER, OWNER, 1)


def test_a_read_creates_nothing_even_when_it_moves_a_bad_file_aside(state: Path) -> None:
    store = PathStore(str(state))
    assert store.latest() == [] and store.newest(KEY) is None and store.count() == 0
    assert list(state.iterdir()) == []
    (state / DB_NAME).write_bytes(b"not a database, " * 512)
    assert store.latest() == []
    names = [p.name for p in state.iterdir()]
    assert len(names) == 1 and names[0].startswith(DB_NAME + ".bad-"), names


def test_a_directory_at_the_database_name_is_one_line(state: Path) -> None:
    (state / DB_NAME).mkdir()
    with pytest.raises(StateFileRefused, match="not a regular file"):
        PathStore(str(state)).latest()


@pytest.mark.parametrize("plant", [plant_link, plant_hard_link])
def test_the_follow_book_reads_no_planted_file_and_writes_by_rename(
        state: Path, plant: Callable[[Path, str], Path], caplog: pytest.LogCaptureFixture
        ) -> None:
    planted = plant(state, FOLLOWS_NAME)
    before = planted.read_bytes() if planted.exists() else None
    book = FollowBook(str(state))
    assert book.specs() == []
    assert any("cannot be read" in r.getMessage() for r in caplog.records)
    assert book.remove("/a", "192.0.2.0/24") is False
    book.update(("/a", "192.0.2.0/24"), lambda s: s)  # a write: a new file renamed in
    assert not (state / FOLLOWS_NAME).is_symlink()
    assert (state / FOLLOWS_NAME).stat().st_nlink == 1
    assert (planted.read_bytes() if planted.exists() else None) == before
    assert sorted(p.name for p in state.iterdir()) == [FOLLOWS_NAME], "no lock file, no temp"


def test_state_dir_refuses_empty_and_non_directories(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for bad, says in (("", "empty"), ("  ", "empty"), ("/etc/passwd", "not a directory")):
        with pytest.raises(UsageError, match=says) as err:
            state_dir(bad)
        assert "--state-dir" in str(err.value)
    monkeypatch.setenv(STATE_DIR_ENV, "")
    with pytest.raises(UsageError, match=f"{STATE_DIR_ENV}='': empty"):
        state_dir(None)
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path))
    assert state_dir(None) == str(tmp_path)
    assert state_dir(str(tmp_path / "later")) == str(tmp_path / "later")  # made on write
    monkeypatch.delenv(STATE_DIR_ENV)
    assert state_dir(None) == "/var/lib/tamebpf"

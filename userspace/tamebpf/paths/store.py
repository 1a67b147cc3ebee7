"""Path memory on disk: one SQLite file in the state directory.

WAL mode, so `advise` reads while the agent writes, and a writer killed
mid-write leaves the last committed state (SQLite's journal, not ours).
Every write runs in one IMMEDIATE transaction that also expires old rows:
the file stays bounded without a cleaner. A file that is not ours (another
program's database, or corrupt) is moved aside under a name that says so,
with one line on stderr, and a fresh database takes its place: memory is a
cache of measurements, losing it costs a probe, never a failure. The file
and its journals are opened without following links and only if they are
the state directory owner's (paths/statedir.py), and SQLite's own opens of
them are made with the owner's file access (paths/fsuid.py); the first
write builds the database under a temporary name and renames it in.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
import urllib.parse
from collections.abc import Iterable, Iterator

from tamebpf.common.logs import log
from tamebpf.common.words import printable
from tamebpf.paths.entry import PathEntry, PathKey, windows_json
from tamebpf.paths.fsuid import as_owner
from tamebpf.paths.statedir import DEFAULT_STATE_DIR as DEFAULT_STATE_DIR
from tamebpf.paths.statedir import DIR_MODE as DIR_MODE
from tamebpf.paths.statedir import FILE_MODE as FILE_MODE
from tamebpf.paths.statedir import STATE_DIR_ENV as STATE_DIR_ENV
from tamebpf.paths.statedir import (
    StateDir,
    StateFileRefused,
    held_by_this_process,
    make_directory,
    open_descriptors,
)
from tamebpf.paths.statedir import state_dir as state_dir
from tamebpf.paths.valid import checked_entry, show

DB_NAME = "paths.db"
# 'tame' in the SQLite header's application_id field: tells our file from
# any other SQLite database placed at the same name.
APPLICATION_ID = 0x74616D65
# 2: streams_low, streams_high, spread (the advised count's range); 3:
# windows (a passive entry's pool of settled windows, JSON); 4: direction
# ("send" or "receive", NULL: "send"). An older file is read as it is (the
# missing columns read as NULL) and gets the columns at its first write.
SCHEMA_VERSION = 4
_ADDED = (("streams_low", "INTEGER"), ("streams_high", "INTEGER"), ("spread", "REAL"),
          ("windows", "TEXT"), ("direction", "TEXT"))
DEFAULT_RETENTION_S = 7 * 24 * 3600.0
DEFAULT_MAX_ROWS = 10_000
BUSY_TIMEOUT_S = 10.0  # another writer holds the lock: wait this long
_Opened = tuple[sqlite3.Connection, int]
JOURNALS = ("-wal", "-shm", "-journal")  # the files SQLite keeps beside the database
SQLITE_CORRUPT, SQLITE_NOTADB = 11, 26  # primary result codes of a damaged file

# Columns after id, in PathEntry's field order; key and fit are spread out.
_COLUMNS = ("dest", "netns", "congestion", "host", "created", "source", "probe_kind",
            "changed", "estimator", "fit", "advised_streams", "advised_mbps",
            "advised_impact", "max_impact", "impact_low", "impact_high", "capacity_mbps",
            "capacity_low_mbps", "capacity_high_mbps", "capacity_method", "link_mbps",
            "competing_flows", "rtt_ms", "streams_low", "streams_high", "spread", "windows",
            "direction")
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS paths (
    id INTEGER PRIMARY KEY,
    dest TEXT NOT NULL, netns TEXT NOT NULL, congestion TEXT NOT NULL, host TEXT NOT NULL,
    created REAL NOT NULL, source TEXT NOT NULL, probe_kind TEXT NOT NULL,
    changed INTEGER NOT NULL DEFAULT 0, estimator TEXT NOT NULL, fit TEXT NOT NULL,
    advised_streams INTEGER NOT NULL, advised_mbps REAL NOT NULL,
    advised_impact REAL NOT NULL, max_impact REAL NOT NULL,
    impact_low REAL, impact_high REAL, capacity_mbps REAL, capacity_low_mbps REAL,
    capacity_high_mbps REAL, capacity_method TEXT, link_mbps REAL,
    competing_flows REAL, rtt_ms REAL, streams_low INTEGER, streams_high INTEGER, spread REAL,
    windows TEXT, direction TEXT);
CREATE INDEX IF NOT EXISTS paths_by_key ON paths (dest, netns, congestion, created);
CREATE INDEX IF NOT EXISTS paths_by_age ON paths (created);
PRAGMA application_id = {APPLICATION_ID};
PRAGMA user_version = {SCHEMA_VERSION};
"""


class NotOurs(Exception):
    """The file at the database's name is not a tamebpf path database."""


class PathStore:
    """The database in `directory`. Nothing is created until the first
    write: reading a store that does not exist finds nothing."""

    def __init__(self, directory: str, retention_s: float = DEFAULT_RETENTION_S,
                 max_rows: int = DEFAULT_MAX_ROWS) -> None:
        self.directory = directory
        self.path = os.path.join(directory, DB_NAME)
        self.retention_s = retention_s
        self.max_rows = max_rows
        self._skipped: set[object] = set()  # ids of rows said to be no entry

    # -- reading ---------------------------------------------------------
    def newest(self, key: PathKey, with_capacity: bool = False) -> PathEntry | None:
        """The most recent entry for this path (with_capacity: the most
        recent that knows the path's capacity), or None. A row that is no
        entry (paths/valid.py) is skipped with one line, as if it were not
        there."""
        with self._connection(create=False) as db:
            if db is None:
                return None
            rows = db.execute(
                f"SELECT id, {_selected(db)} FROM paths WHERE {_key_where(db)} "
                + ("AND capacity_mbps IS NOT NULL " if with_capacity else "")
                + "ORDER BY created DESC, id DESC",
                _key_args(key))
            return next(self._entries(rows), None)

    def passive_times(self, key: PathKey) -> list[float]:
        """When the path's passive entries since its last probed one were
        stored (not those marked changed), oldest first: what transfers
        taught it (paths/passive.transfers counts them)."""
        with self._connection(create=False) as db:
            if db is None:
                return []
            where = _key_where(db)
            rows = db.execute(
                f"SELECT created FROM paths WHERE {where} "
                "AND source = 'passive' AND changed = 0 AND created > COALESCE((SELECT "
                f"max(created) FROM paths WHERE {where} "
                "AND source != 'passive'), 0) ORDER BY created",
                _key_args(key) * 2).fetchall()
        return [float(r[0]) for r in rows]

    def probed(self, key: PathKey) -> bool:
        """Whether a probe (a server there) ever made one of the path's
        entries still kept: a path marked changed then waits for the next
        probe; one only transfers taught is learned anew (paths/passive.py)."""
        with self._connection(create=False) as db:
            if db is None:
                return False
            return db.execute(
                f"SELECT 1 FROM paths WHERE {_key_where(db)} "
                "AND source != 'passive' LIMIT 1",
                _key_args(key)).fetchone() is not None

    def latest(self) -> list[PathEntry]:
        """The most recent entry of every path, newest first (rows that are
        no entry skipped, as by newest)."""
        with self._connection(create=False) as db:
            if db is None:
                return []
            rows = db.execute(f"SELECT id, {_selected(db)} FROM paths "
                              "ORDER BY created DESC, id DESC")
            seen: set[tuple[object, ...]] = set()
            found = []
            last = 1 + _COLUMNS.index("direction")
            for row in rows:
                # dest, netns, congestion and direction as stored
                path = (*row[1:4], row[last] or "send")
                if path in seen:
                    continue  # an older row of a path already found
                for entry in self._entries([row]):
                    seen.add(path)
                    found.append(entry)
            return found

    def _entries(self, rows: Iterable[tuple[object, ...]]) -> Iterator[PathEntry]:
        """The rows that are entries; each other one said once per store
        (export's learner reads the same rows every reading)."""
        now = time.time()
        for row in rows:
            got = checked_entry(_raw(row), now)
            if isinstance(got, PathEntry):
                yield got
            elif row[0] not in self._skipped:
                self._skipped.add(row[0])
                log.warning("%s: row %s skipped, it is no path entry: %s",
                            printable(self.path), show(row[0]), got)

    def count(self) -> int:
        with self._connection(create=False) as db:
            return 0 if db is None else int(db.execute("SELECT count(*) FROM paths")
                                             .fetchone()[0])

    # -- writing ---------------------------------------------------------
    def put(self, entry: PathEntry) -> int:
        """Store an entry (a new row: the history stays until it expires);
        returns its id."""
        values = _row(entry)
        with self._connection(create=True) as db:
            assert db is not None
            with _immediate(db):
                cur = db.execute(f"INSERT INTO paths ({', '.join(_COLUMNS)}) VALUES "
                                 f"({', '.join('?' * len(_COLUMNS))})", values)
                self._expire(db)
            return int(cur.lastrowid or 0)

    def mark_changed(self, key: PathKey) -> int:
        """Mark the path's entries changed: the next advise probes again."""
        with self._connection(create=False) as db:
            if db is None:
                return 0
            with _immediate(db):
                return db.execute(f"UPDATE paths SET changed = 1 WHERE {_key_where(db)} "
                                  "AND changed = 0", _key_args(key)).rowcount

    def forget(self, dests: list[str] | None) -> int:
        """Remove the entries whose destination is one of `dests` (None:
        all); returns how many rows went."""
        with self._connection(create=False) as db:
            if db is None:
                return 0
            with _immediate(db):
                if dests is None:
                    return db.execute("DELETE FROM paths").rowcount
                marks = ", ".join("?" * len(dests))
                return db.execute(f"DELETE FROM paths WHERE dest IN ({marks})",
                                  dests).rowcount if dests else 0

    def destinations(self) -> list[str]:
        with self._connection(create=False) as db:
            return [] if db is None else [r[0] for r in db.execute(
                "SELECT DISTINCT dest FROM paths")]

    def _expire(self, db: sqlite3.Connection) -> None:
        db.execute("DELETE FROM paths WHERE created < ?", (time.time() - self.retention_s,))
        db.execute("DELETE FROM paths WHERE id NOT IN (SELECT id FROM paths ORDER BY "
                   "created DESC, id DESC LIMIT ?)", (self.max_rows,))

    # -- the file ----------------------------------------------------------
    def check(self) -> None:
        """Raise StateFileRefused if a file at the database's names may not
        be opened (paths/statedir.py); opens and creates nothing."""
        if os.path.isdir(self.directory):
            with StateDir(self.directory) as sd:
                for suffix in ("", *JOURNALS):
                    sd.look(DB_NAME + suffix)

    @contextlib.contextmanager
    def _connection(self, create: bool) -> Iterator[sqlite3.Connection | None]:
        """The database, checked (paths/statedir.py); None when there is
        none and `create` is not asked (a read creates nothing)."""
        if create:
            make_directory(self.directory)
        elif not os.path.isdir(self.directory):
            yield None
            return
        # All of SQLite's I/O as the directory's owner (paths/fsuid.py): it
        # opens the journals by name, after they were checked.
        with StateDir(self.directory) as sd, as_owner(*sd.owner):
            opened = self._open_checked(sd, create)
            if opened is None:
                yield None
                return
            db, fd = opened
            try:
                yield db
            finally:
                db.close()
                # Only now: closing any descriptor of the file drops every
                # POSIX lock this process holds on it, SQLite's included.
                os.close(fd)

    def _open_checked(self, sd: StateDir, create: bool) -> _Opened | None:
        for suffix in JOURNALS:
            sd.look(DB_NAME + suffix)  # SQLite opens these by name: refuse a planted one
        try:
            return self._open(sd, create)
        except (NotOurs, sqlite3.DatabaseError) as err:
            if not _not_ours(err):
                raise  # locked past the time-out, no permission: not the file's fault
            # One process moves the bad file aside; the others, waiting on
            # the lock, then find the fresh database and use it.
            with sd.locked():
                try:
                    return self._open(sd, create)
                except (NotOurs, sqlite3.DatabaseError) as again:
                    if not _not_ours(again):
                        raise
                    aside = self._move_aside(sd)
                    log.warning("%s is not a tamebpf path database (%s): moved it to %s "
                                "(path memory starts empty)", self.path, err, aside)
                    return self._open(sd, create)

    def _open(self, sd: StateDir, create: bool) -> _Opened | None:
        """The connection and the descriptor it was checked against (to be
        closed after the connection)."""
        fd = sd.open(DB_NAME)
        if fd is None:
            if not create:
                return None
            self._create(sd)
            fd = sd.open(DB_NAME)
            if fd is None:
                raise FileNotFoundError(f"{self.path} vanished as it was made")
        try:
            db = self._connect_checked(fd, create)
        except BaseException:
            os.close(fd)
            raise
        if db is None:
            os.close(fd)
            return None
        return db, fd

    def _connect_checked(self, fd: int, create: bool) -> sqlite3.Connection | None:
        """SQLite's connection to the file `fd` holds (checked): SQLite opens
        by name, so it must be seen to hold that very file before a write."""
        before = open_descriptors()
        db = _connect(self.path)
        try:
            # Before the first statement: SQLite opens the file at connect
            # but reads it (and rolls a hot journal back into it) only at
            # the first statement, which must not reach a swapped-in link.
            if not held_by_this_process(fd, before):
                raise StateFileRefused(f"{self.path} was replaced while it was opened: "
                                       "path memory not used this time")
            app = db.execute("PRAGMA application_id").fetchone()[0]
            fresh = os.fstat(fd).st_size == 0
            if app != APPLICATION_ID:
                tables = db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
                if tables:
                    raise NotOurs(f"a SQLite database of another program, application id "
                                  f"{app:#x}")
                fresh = True
            if fresh and not create:
                db.close()
                return None  # an empty file holds nothing to read
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if not fresh and not 1 <= version <= SCHEMA_VERSION:
                raise NotOurs(f"schema version {version}, this tamebpf reads "
                              f"{SCHEMA_VERSION}")
            if not fresh and db.execute("PRAGMA quick_check(1)").fetchone()[0] != "ok":
                raise NotOurs("it fails SQLite's integrity check")
            if db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = NORMAL")
            if fresh:
                db.executescript(_SCHEMA)
            elif version < SCHEMA_VERSION and create:
                _upgrade(db)
        except BaseException:
            db.close()
            raise
        return db

    def _create(self, sd: StateDir) -> None:
        """The first write: the database is built under a temporary name
        and renamed in whole, so a full or read-only disk leaves no empty
        paths.db behind, and the name is never followed."""
        with sd.locked():
            if sd.look(DB_NAME) is not None:
                return  # another writer made it while we waited
            name, fd = sd.create(DB_NAME)
            try:
                before = open_descriptors()
                db = _connect(sd.path(name))
                try:
                    # An empty file is opened at the first statement, not at
                    # connect; this one holds no journal of its own yet.
                    db.execute("PRAGMA application_id").fetchone()
                    if not held_by_this_process(fd, before):
                        raise StateFileRefused(f"{sd.path(name)} was replaced as it was "
                                               "made: path memory not written")
                    db.executescript(_SCHEMA)
                    # Last, so a failure before leaves no WAL to lose.
                    db.execute("PRAGMA journal_mode = WAL")
                finally:
                    db.close()
                os.fsync(fd)
                sd.rename(name, DB_NAME)
                sd.sync()
            except BaseException:
                sd.remove(name, *(name + suffix for suffix in JOURNALS))
                raise
            finally:
                os.close(fd)

    def _move_aside(self, sd: StateDir) -> str:
        aside = f"{DB_NAME}.bad-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
        sd.rename(DB_NAME, aside)
        for suffix in ("-wal", "-shm"):
            # The journal of the bad file belongs with it, not with the new one.
            with contextlib.suppress(FileNotFoundError):
                sd.rename(DB_NAME + suffix, aside + suffix)
        return sd.path(aside)


def _connect(path: str) -> sqlite3.Connection:
    """An existing database file (mode=rw: SQLite never creates it)."""
    uri = f"file:{urllib.parse.quote(path)}?mode=rw"
    return sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)


def _not_ours(err: BaseException) -> bool:
    """A foreign or damaged file, as opposed to a busy or unreadable one."""
    code = getattr(err, "sqlite_errorcode", None)
    return isinstance(err, NotOurs) or (code is not None and code & 0xFF in (
        SQLITE_CORRUPT, SQLITE_NOTADB))


@contextlib.contextmanager
def _immediate(db: sqlite3.Connection) -> Iterator[None]:
    """One write transaction, taken at its start (waits for other writers)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _selected(db: sqlite3.Connection) -> str:
    """_COLUMNS as a SELECT list; a column an older file lacks reads NULL."""
    have = {r[1] for r in db.execute("PRAGMA table_info(paths)")}
    return ", ".join(c if c in have else f"NULL AS {c}" for c in _COLUMNS)


def _key_where(db: sqlite3.Connection) -> str:
    """The rows of one path (its _key_args fill the ?s). A file from
    before directions holds uploads only: a download's key matches none."""
    have = {r[1] for r in db.execute("PRAGMA table_info(paths)")}
    direction = "COALESCE(direction, 'send')" if "direction" in have else "'send'"
    return f"dest = ? AND netns = ? AND congestion = ? AND {direction} = ?"


def _key_args(key: PathKey) -> tuple[str, str, str, str]:
    return (key.dest, key.netns, key.congestion, key.direction)


def _upgrade(db: sqlite3.Connection) -> None:
    """An older file gets the columns added since, once (another writer may
    have done it while this one waited for the lock)."""
    with _immediate(db):
        if db.execute("PRAGMA user_version").fetchone()[0] >= SCHEMA_VERSION:
            return
        have = {r[1] for r in db.execute("PRAGMA table_info(paths)")}
        for name, kind in _ADDED:
            if name not in have:
                db.execute(f"ALTER TABLE paths ADD COLUMN {name} {kind}")
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def _row(e: PathEntry) -> tuple[object, ...]:
    return (e.key.dest, e.key.netns, e.key.congestion, e.host, e.when, e.source, e.probe_kind,
            int(e.changed), e.fit.estimator, e.fit.to_json(), e.advised_streams,
            e.advised_mbps, e.advised_impact, e.max_impact, e.impact_low, e.impact_high,
            e.capacity_mbps, e.capacity_low_mbps, e.capacity_high_mbps, e.capacity_method,
            e.link_mbps, e.competing_flows, e.rtt_ms, e.streams_low, e.streams_high, e.spread,
            windows_json(e.windows) if e.windows else None, e.key.direction)


def _raw(row: tuple[object, ...]) -> dict[str, object]:
    """A row as paths/valid.checked_entry reads it: the values unchecked."""
    raw = dict(zip(("id", *_COLUMNS), row, strict=True))
    raw["when"] = raw.pop("created")
    return raw

"""Path memory on disk: one SQLite file in the state directory.

WAL mode, so `advise` reads while the agent writes, and a writer killed
mid-write leaves the last committed state (SQLite's journal, not ours).
Every write runs in one IMMEDIATE transaction that also expires old rows:
the file stays bounded without a cleaner. A file that is not ours (another
program's database, or corrupt) is moved aside under a name that says so,
with one line on stderr, and a fresh database takes its place: memory is a
cache of measurements, losing it costs a probe, never a failure.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import fields

from tamebpf.logs import log
from tamebpf.paths.entry import FitData, PathEntry, PathKey

DEFAULT_STATE_DIR = "/var/lib/tamebpf"
STATE_DIR_ENV = "TAMEBPF_STATE_DIR"
DB_NAME = "paths.db"
# 'tame' in the SQLite header's application_id field: tells our file from
# any other SQLite database placed at the same name.
APPLICATION_ID = 0x74616D65
SCHEMA_VERSION = 1
DEFAULT_RETENTION_S = 7 * 24 * 3600.0
DEFAULT_MAX_ROWS = 10_000
BUSY_TIMEOUT_S = 10.0  # another writer holds the lock: wait this long
DIR_MODE, FILE_MODE = 0o750, 0o640
SQLITE_CORRUPT, SQLITE_NOTADB = 11, 26  # primary result codes of a damaged file

# Columns after id, in PathEntry's field order; key and fit are spread out.
_COLUMNS = ("dest", "netns", "congestion", "host", "created", "source", "probe_kind",
            "changed", "estimator", "fit", "advised_streams", "advised_mbps",
            "advised_impact", "max_impact", "impact_low", "impact_high", "capacity_mbps",
            "capacity_low_mbps", "capacity_high_mbps", "capacity_method", "link_mbps",
            "competing_flows", "rtt_ms")
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
    competing_flows REAL, rtt_ms REAL);
CREATE INDEX IF NOT EXISTS paths_by_key ON paths (dest, netns, congestion, created);
CREATE INDEX IF NOT EXISTS paths_by_age ON paths (created);
PRAGMA application_id = {APPLICATION_ID};
PRAGMA user_version = {SCHEMA_VERSION};
"""


def state_dir(given: str | None = None) -> str:
    """--state-dir, else $TAMEBPF_STATE_DIR, else /var/lib/tamebpf."""
    return given or os.environ.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR


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

    # -- reading ---------------------------------------------------------
    def newest(self, key: PathKey, with_capacity: bool = False) -> PathEntry | None:
        """The most recent entry for this path (with_capacity: the most
        recent that knows the path's capacity), or None."""
        with self._connection(create=False) as db:
            if db is None:
                return None
            row = db.execute(
                f"SELECT id, {', '.join(_COLUMNS)} FROM paths WHERE dest = ? AND netns = ? "
                "AND congestion = ? "
                + ("AND capacity_mbps IS NOT NULL " if with_capacity else "")
                + "ORDER BY created DESC, id DESC LIMIT 1",
                (key.dest, key.netns, key.congestion)).fetchone()
        return None if row is None else _entry(row)

    def latest(self) -> list[PathEntry]:
        """The most recent entry of every path, newest first."""
        with self._connection(create=False) as db:
            if db is None:
                return []
            rows = db.execute(
                f"SELECT id, {', '.join(_COLUMNS)} FROM (SELECT *, row_number() OVER ("
                "PARTITION BY dest, netns, congestion ORDER BY created DESC, id DESC) AS nth "
                "FROM paths) WHERE nth = 1 ORDER BY created DESC, id DESC").fetchall()
        return [_entry(r) for r in rows]

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
                return db.execute("UPDATE paths SET changed = 1 WHERE dest = ? AND netns = ? "
                                  "AND congestion = ? AND changed = 0",
                                  (key.dest, key.netns, key.congestion)).rowcount

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
    @contextlib.contextmanager
    def _connection(self, create: bool) -> Iterator[sqlite3.Connection | None]:
        if not create and not os.path.exists(self.path):
            yield None
            return
        if create:
            self._make_directory()
        db = self._open_checked()
        try:
            yield db
        finally:
            db.close()

    def _make_directory(self) -> None:
        if not os.path.isdir(self.directory):
            os.makedirs(self.directory, mode=DIR_MODE, exist_ok=True)
            os.chmod(self.directory, DIR_MODE)  # the umask may have taken bits away

    def _open_checked(self) -> sqlite3.Connection:
        try:
            return self._open()
        except (NotOurs, sqlite3.DatabaseError) as err:
            if not _not_ours(err):
                raise  # locked past the time-out, no permission: not the file's fault
            # One process moves the bad file aside; the others, waiting on
            # the lock, then find the fresh database and use it.
            with _locked(self.path + ".lock"):
                try:
                    return self._open()
                except (NotOurs, sqlite3.DatabaseError) as again:
                    if not _not_ours(again):
                        raise
                    aside = self._move_aside()
                    log.warning("%s is not a tamebpf path database (%s): moved it to %s "
                                "and started a fresh one (path memory starts empty)",
                                self.path, err, aside)
                    return self._open()

    def _open(self) -> sqlite3.Connection:
        fresh = not os.path.exists(self.path) or os.path.getsize(self.path) == 0
        db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        try:
            app = db.execute("PRAGMA application_id").fetchone()[0]
            if app != APPLICATION_ID:
                tables = db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
                if tables:
                    raise NotOurs(f"a SQLite database of another program, application id "
                                  f"{app:#x}")
                fresh = True
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if not fresh and version != SCHEMA_VERSION:
                raise NotOurs(f"schema version {version}, this tamebpf reads "
                              f"{SCHEMA_VERSION}")
            if not fresh and db.execute("PRAGMA quick_check(1)").fetchone()[0] != "ok":
                raise NotOurs("it fails SQLite's integrity check")
            if db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = NORMAL")
            if fresh:
                db.executescript(_SCHEMA)
                self._own_file()
        except BaseException:
            db.close()
            raise
        return db

    def _own_file(self) -> None:
        """0640, and owned by the directory's owner: a root `advise` that
        writes first must not lock out the exporter's service user (SQLite
        gives the -wal and -shm files the database file's owner)."""
        with contextlib.suppress(OSError):
            os.chmod(self.path, FILE_MODE)
            if os.geteuid() == 0:
                d = os.stat(self.directory)
                os.chown(self.path, d.st_uid, d.st_gid)

    def _move_aside(self) -> str:
        aside = f"{self.path}.bad-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
        os.replace(self.path, aside)
        for suffix in ("-wal", "-shm"):
            # The journal of the bad file belongs with it, not with the new one.
            with contextlib.suppress(FileNotFoundError):
                os.replace(self.path + suffix, aside + suffix)
        return aside


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


@contextlib.contextmanager
def _locked(path: str) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _row(e: PathEntry) -> tuple[object, ...]:
    return (e.key.dest, e.key.netns, e.key.congestion, e.host, e.when, e.source, e.probe_kind,
            int(e.changed), e.fit.estimator, e.fit.to_json(), e.advised_streams,
            e.advised_mbps, e.advised_impact, e.max_impact, e.impact_low, e.impact_high,
            e.capacity_mbps, e.capacity_low_mbps, e.capacity_high_mbps, e.capacity_method,
            e.link_mbps, e.competing_flows, e.rtt_ms)


def _entry(row: tuple[object, ...]) -> PathEntry:
    rid, *values = row
    v = dict(zip(_COLUMNS, values, strict=True))
    key = PathKey(str(v.pop("dest")), str(v.pop("netns")), str(v.pop("congestion")))
    fit = FitData.from_json(str(v.pop("fit")))
    v.pop("estimator")
    v["when"] = v.pop("created")
    v["changed"] = bool(v["changed"])
    names = {f.name for f in fields(PathEntry)}
    assert set(v) <= names, set(v) - names
    return PathEntry(key=key, fit=fit, id=int(str(rid)), **v)  # type: ignore[arg-type]

"""A caps file read whole, once, and only if it held still while read.

`systemctl reload tamebpf-caps` runs `cap apply --prune` on the caps file;
an editor or a script that rewrites the file in place (`cat new > caps.toml`)
truncates it first, and a read at that moment sees an empty or half file:
with --prune, an empty file removes every cap. So the file is read in one
go under a read lease (fcntl F_SETLEASE: the kernel grants it only while no
process has the file open for writing, so a refusal means a writer is at
work and we try again; and it holds back any writer's open until we let
go), then its inode, size, mtime and ctime are compared with what they
were before the read and with what the name points to now. If
anything changed, it is read again, for up to READ_WITHIN_S, then refused.
Without a lease (another user's file, a writer holding it open), a file
changed less than SETTLE_S ago must first hold still for SETTLE_S.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal
import stat
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from tamebpf.common.errors import UsageError

SETTLE_S = 1.0  # without a lease: how long a just-changed file must hold still
READ_WITHIN_S = 2.0  # how long a changing file is read again before it is refused
RETRY_PAUSE_S = 0.02
F_SETLEASE, F_GETLEASE = 1024, 1025  # <linux/fcntl.h>; Python's fcntl has them from 3.12
EDIT_HINT = ("write the new file beside it and rename it over the old one "
             "(docs/cap.md), then apply again")


@dataclass(frozen=True)
class WholeFile:
    text: str
    attempts: int  # reads: more than 1 when the file changed under one
    met_writer: bool  # a writer had it open, or changed it, during a read


@dataclass(frozen=True)
class _Read:
    data: bytes | None  # None: it changed while read
    met_writer: bool


def read_whole(path: str, settle_s: float = SETTLE_S,
               within_s: float = READ_WITHIN_S) -> WholeFile:
    """The text of the file at `path`, read when it held still; UsageError
    (exit 2) if it cannot be read, is not UTF-8, or kept changing."""
    deadline = time.monotonic() + within_s
    attempts, met = 0, False
    while True:
        attempts += 1
        got = _read_once(path, settle_s, deadline)
        met = met or got.met_writer
        if got.data is not None:
            return WholeFile(_decode(path, got.data), attempts, met)
        if time.monotonic() >= deadline:
            raise UsageError(f"{path} kept changing while it was read ({attempts} reads in "
                             f"{within_s:g} s): nothing changed", EDIT_HINT)
        time.sleep(RETRY_PAUSE_S)


def _read_once(path: str, settle_s: float, deadline: float) -> _Read:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:  # e.g. a NUL in the path
        raise UsageError(f"cannot read {path!r}: {exc}") from None
    try:
        os.set_blocking(fd, True)
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode):
            return _Read(_read_all(fd, path), False)  # /dev/null, a pipe: nothing to re-check
        with _read_lease(fd) as lease:
            if lease == "writer":
                return _Read(None, True)  # one has it open now: try again in a moment
            leased = lease == "held"
            if not leased and not _held_still(path, before, settle_s, deadline):
                return _Read(None, True)
            data = _read_all(fd, path)
            broken = leased and fcntl.fcntl(fd, F_GETLEASE) != fcntl.F_RDLCK
        after = os.fstat(fd)
        try:
            now = os.stat(path)
        except OSError:
            return _Read(None, True)  # renamed away or removed meanwhile
        same = _stamp(before) == _stamp(after) == _stamp(now) and len(data) == after.st_size
        if not same:
            return _Read(None, True)
        # A broken lease held the writer back until now: what we read is
        # the whole file as it was, but a new one is coming; read that.
        return _Read(None if broken else data, broken or not leased)
    finally:
        os.close(fd)


def _stamp(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _held_still(path: str, before: os.stat_result, settle_s: float, deadline: float) -> bool:
    """Without a lease: wait until the file is settle_s old (unchanged
    meanwhile); False if it changes or the deadline comes first."""
    while True:
        age = time.time() - max(before.st_mtime_ns, before.st_ctime_ns) / 1e9
        if age >= settle_s:
            return True
        if time.monotonic() + (settle_s - age) > deadline:
            return False
        time.sleep(min(settle_s - age, 0.1) + 0.001)
        try:
            if _stamp(os.stat(path)) != _stamp(before):
                return False
        except OSError:
            return False


@contextlib.contextmanager
def _read_lease(fd: int) -> Iterator[str]:
    """A read lease on `fd` while the block runs: "held"; "writer" when a
    process has the file open for writing (EAGAIN); "none" when no lease
    can be had (not our file, not the main thread). A writer's open waits
    until we release the lease; the signal that would tell us (SIGIO, fatal
    by default) is ignored meanwhile: we hold the lease for one read only."""
    if threading.current_thread() is not threading.main_thread():
        yield "none"  # signal handlers are the main thread's
        return
    old = signal.signal(signal.SIGIO, signal.SIG_IGN)
    try:
        try:
            fcntl.fcntl(fd, F_SETLEASE, fcntl.F_RDLCK)
        except OSError as err:
            yield "writer" if err.errno == errno.EAGAIN else "none"
            return
        try:
            yield "held"
        finally:
            with contextlib.suppress(OSError):
                fcntl.fcntl(fd, F_SETLEASE, fcntl.F_UNLCK)
    finally:
        signal.signal(signal.SIGIO, old)


def _read_all(fd: int, path: str) -> bytes:
    chunks = []
    try:
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    return b"".join(chunks)


def _decode(path: str, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not UTF-8 text (byte {exc.start}: "
                         f"{exc.object[exc.start:exc.start + 1]!r})",
                         "TOML files are UTF-8; save it as UTF-8") from None

"""The state directory's files, opened as a daemon opens files it shares
with a less trusted user.

The exporter's service user owns /var/lib/tamebpf and root's `advise` and
`cap` write there too (docs/paths.md). So every file root opens there could
have been planted by that user: a symbolic link to /etc/shadow, a hard link
to a root file, a file of a third user. Each state file is therefore looked
at without following links (lstat, O_NOFOLLOW, then fstat of what was
opened) and refused unless it is a plain regular file with one link, owned
by the directory's owner or by root. A refusal is a StateFileRefused: one
line, and the caller goes on without that state (memory is a cache).

Nothing here follows a name to create a file: a new file is made with
O_CREAT|O_EXCL|O_NOFOLLOW under a temporary name, given to the directory's
owner through its descriptor (fchown), and renamed into place. Writers
serialise on an flock of the directory itself, so no lock file exists and
a read creates nothing. A holder keeps that lock for milliseconds; one that
keeps it past LOCK_WAIT_S is taken to be stuck, and the waiter goes on
without the state (StateDirBusy) rather than wait forever.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import stat
import time
from collections.abc import Iterator

from tamebpf.common.errors import UsageError

DEFAULT_STATE_DIR = "/var/lib/tamebpf"
STATE_DIR_ENV = "TAMEBPF_STATE_DIR"
DIR_MODE, FILE_MODE = 0o750, 0o640
# The writers' lock is held to build a new database, move a bad one aside
# or rewrite follows.json: milliseconds, a second or two with an fsync on a
# loaded disk. Five seconds is well past that, so a holder still there is
# stuck (stopped, hung on a dead disk), yet short enough that `advise`
# answers without memory rather than seem to hang.
LOCK_WAIT_S = 5.0
LOCK_POLL_S = 0.05  # flock has no time-out: ask again this often


class StateFileRefused(OSError):
    """A state file that is not safe to open (a link, a hard link, another
    user's file, not a regular file). Its text is the one line to say."""


class StateDirBusy(StateFileRefused):
    """The state directory's lock held by another process past LOCK_WAIT_S."""


def state_dir(given: str | None = None) -> str:
    """--state-dir, else $TAMEBPF_STATE_DIR, else /var/lib/tamebpf. An
    empty value or one that names something other than a directory is
    refused (exit 2), rather than silently reading the default."""
    if given is not None:
        where, hint = f"--state-dir {given!r}", "give a directory, or leave --state-dir out"
        chosen = given
    elif STATE_DIR_ENV in os.environ:
        chosen = os.environ[STATE_DIR_ENV]
        where = f"{STATE_DIR_ENV}={chosen!r}"
        hint = f"set {STATE_DIR_ENV} to a directory, or unset it"
    else:
        return DEFAULT_STATE_DIR
    if not chosen.strip():
        raise UsageError(f"{where}: empty", hint)
    if "\0" in chosen:
        raise UsageError(f"{where}: holds a NUL byte", hint)
    try:
        st = os.stat(chosen)
    except FileNotFoundError:
        return chosen  # made on the first write
    except PermissionError:
        # Not ours to look into (an unprivileged run, a root-only directory):
        # not bad input. Its use says "path memory is off", after the root
        # check, so a command that needs root says that first.
        return chosen
    except OSError as err:
        raise UsageError(f"{where}: {err.strerror}", hint) from None
    if not stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{where}: not a directory", hint)
    return chosen


def make_directory(directory: str) -> None:
    """The state directory, private (0750), if it is not there yet."""
    if not os.path.isdir(directory):
        os.makedirs(directory, mode=DIR_MODE, exist_ok=True)
        os.chmod(directory, DIR_MODE)  # the umask may have taken bits away


class StateDir:
    """An open state directory: its owner, and checked access to the files
    in it by name (no name here holds a '/')."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        st = os.fstat(self.fd)
        self.owner = (st.st_uid, st.st_gid)

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> StateDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    def look(self, name: str) -> os.stat_result | None:
        """The file at `name`, checked without following it; None if there
        is none. Raises StateFileRefused for anything but a plain file."""
        try:
            st = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if st.st_nlink == 0 and stat.S_ISREG(st.st_mode):
            # Unlinked as we looked (another writer's SQLite removing its
            # -shm on close): not there, and no planted file either.
            return None
        self._check(name, st)
        return st

    def _check(self, name: str, st: os.stat_result) -> None:
        where = self.path(name)
        if stat.S_ISLNK(st.st_mode):
            raise StateFileRefused(f"{where} is a symbolic link; tamebpf follows no link in "
                                   f"its state directory: remove it")
        if not stat.S_ISREG(st.st_mode):
            raise StateFileRefused(f"{where} is not a regular file: remove it")
        if st.st_nlink != 1:
            raise StateFileRefused(f"{where} has {st.st_nlink} hard links (a state file has "
                                   f"one): remove it")
        if st.st_uid not in (self.owner[0], 0):
            raise StateFileRefused(f"{where} belongs to uid {st.st_uid}, not to the state "
                                   f"directory's owner (uid {self.owner[0]}) or root: "
                                   f"remove it")

    def open(self, name: str, flags: int = os.O_RDONLY) -> int | None:
        """A descriptor of the checked file at `name` (never created, never
        followed), or None if there is none."""
        if self.look(name) is None:
            return None
        try:
            fd = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                         dir_fd=self.fd)
        except FileNotFoundError:
            return None
        except OSError as err:
            if err.errno == 40:  # ELOOP: made a link after our look
                raise StateFileRefused(f"{self.path(name)} is a symbolic link: "
                                       f"remove it") from None
            raise
        try:
            st = os.fstat(fd)
            self._check(name, st)  # what was opened, not what was looked at
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def create(self, prefix: str) -> tuple[str, int]:
        """A new empty file under a fresh temporary name, made without
        following anything, 0640 and owned by the directory's owner (so
        that root's first write does not lock the service user out).
        Returns its name and a descriptor."""
        name = f".{prefix}.new-{os.getpid()}-{secrets.token_hex(4)}"
        fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     FILE_MODE, dir_fd=self.fd)
        try:
            os.fchmod(fd, FILE_MODE)
            if os.geteuid() == 0:
                os.fchown(fd, *self.owner)
        except BaseException:
            os.close(fd)
            self.remove(name)
            raise
        return name, fd

    def rename(self, src: str, dst: str) -> None:
        """`src` becomes `dst` in one step (a link at `dst` is replaced, never
        followed)."""
        os.rename(src, dst, src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def remove(self, *names: str) -> None:
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=self.fd)

    def sync(self) -> None:
        with contextlib.suppress(OSError):
            os.fsync(self.fd)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """The writers' lock: an flock of the directory itself (no lock
        file). One per process at a time: flock locks of two descriptors of
        one directory exclude each other even in one process."""
        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=self.fd)
        try:
            deadline = time.monotonic() + LOCK_WAIT_S
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise self._busy(fd) from None
                    time.sleep(LOCK_POLL_S)
            yield
        finally:
            os.close(fd)

    def _busy(self, fd: int) -> StateDirBusy:
        pid = flock_holder(fd)
        who = "another tamebpf process" + ("" if pid is None else f" (PID {pid})")
        return StateDirBusy(f"{self.directory} stayed locked by {who} for "
                            f"{LOCK_WAIT_S:g} s: not used this time")


def flock_holder(fd: int) -> int | None:
    """The PID that holds an flock of the file of `fd`, from /proc/locks
    (which names the file by device, major:minor in hex, and inode); None
    if it is not found there."""
    st = os.fstat(fd)
    file = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    with contextlib.suppress(OSError, ValueError), open("/proc/locks", encoding="ascii") as f:
        for line in f:
            fields = line.split()  # "1: FLOCK ADVISORY WRITE PID DEV:INODE 0 EOF"
            if fields[1:2] == ["FLOCK"] and fields[5:6] == [file] and int(fields[4]) > 0:
                return int(fields[4])
    return None


def open_descriptors() -> dict[str, tuple[int, int]]:
    """This process's open descriptors and their files, to tell which one a
    call opened (listing them opens one more, gone by the time it is read)."""
    seen = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            st = os.fstat(int(name))
        except OSError:
            continue
        seen[name] = (st.st_dev, st.st_ino)
    return seen


def held_by_this_process(fd: int, since: dict[str, tuple[int, int]] | None = None) -> bool:
    """Whether another descriptor of this process has the file of `fd` open
    (SQLite's): the file it opened by name is the one we checked. With
    `since` (open_descriptors() before SQLite opened it), only descriptors
    opened after count, so an older connection to the right file cannot
    vouch for a new one that a swapped link sent elsewhere."""
    want = os.fstat(fd)
    file = (want.st_dev, want.st_ino)
    for name, other in open_descriptors().items():
        if int(name) == fd or (since is not None and since.get(name) == other):
            continue
        if other == file:
            return True
    return False

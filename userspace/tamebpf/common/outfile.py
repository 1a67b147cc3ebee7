"""Files a root command writes at a path the user named (`run --json=FILE`,
`advise --plot FILE`, `export --jsonl FILE`).

Root writes there on the user's word, but another user may own the
directory or share it (/tmp): a symbolic link planted at the name, before
the command or while it runs, would have root write wherever it points.
So the file is opened once, before the work starts, and never again by
name: O_NOFOLLOW refuses a link at the name; in a directory that others
can write, a file already there is used only if it is a plain file of
ours with one link (so not a hard link to another file), else it is
refused; and a link in the path's directories is followed only if root
or the caller made it. What is written later goes to the open descriptor,
whatever has happened to the name meanwhile.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat

from tamebpf.common.errors import UsageError

OPEN_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def others_can_write(st: os.stat_result) -> bool:
    """Whether a user other than this process's may add or replace names
    in the directory of `st`."""
    mode = st.st_mode
    return bool(st.st_uid not in (0, os.geteuid()) or mode & stat.S_IWOTH
                or (mode & stat.S_IWGRP and st.st_gid not in (0, os.getegid())))


def _check_directories(path: str, option: str) -> None:
    """Each directory on the way to `path` that is a symbolic link was made
    by root or by us (a link another user planted there is refused)."""
    parent = os.path.dirname(os.path.abspath(path))
    walked = "/"
    for part in [p for p in parent.split("/") if p]:
        walked = os.path.join(walked, part)
        try:
            st = os.lstat(walked)
        except OSError:
            return  # missing: the open below says so
        if stat.S_ISLNK(st.st_mode) and st.st_uid not in (0, os.geteuid()):
            raise UsageError(f"{option} {path}: {walked} is a symbolic link of uid "
                             f"{st.st_uid}; tamebpf writes through no link another user made",
                             "name a path without it")


class OutputFile:
    """One open output file; `write` appends, `replace` rewrites it whole."""

    def __init__(self, path: str, option: str, append: bool = False) -> None:
        self.path, self.option = path, option
        self._flags = OPEN_FLAGS | (os.O_APPEND if append else 0)
        _check_directories(path, option)
        head, name = os.path.split(path)
        if not name:
            raise UsageError(f"{option} {path}: names a directory, not a file")
        try:
            dir_fd = os.open(head or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as err:
            raise self._refused(f"cannot open its directory: {err.strerror}") from None
        try:
            self.fd, self.created = self._open(dir_fd, name)
            self._dir_fd = dir_fd
        except BaseException:
            os.close(dir_fd)
            raise
        self._name = name
        self.written = False

    def _open(self, dir_fd: int, name: str) -> tuple[int, bool]:
        shared = others_can_write(os.fstat(dir_fd))
        created = True
        try:
            fd = os.open(name, self._flags | os.O_EXCL, 0o644, dir_fd=dir_fd)
        except FileExistsError:
            created = False
            try:
                fd = os.open(name, self._flags & ~os.O_CREAT, dir_fd=dir_fd)
            except OSError as err:
                raise self._open_error(err) from None
        except OSError as err:
            raise self._open_error(err) from None
        try:
            self._check(os.fstat(fd), shared, created)
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return fd, created

    def _open_error(self, err: OSError) -> UsageError:
        if err.errno == errno.ELOOP:
            return self._refused("is a symbolic link; tamebpf writes through no link",
                                 "name the file itself")
        if err.errno == errno.ENXIO:
            return self._refused("a FIFO nobody reads")
        return self._refused(err.strerror or str(err))

    def _check(self, st: os.stat_result, shared: bool, created: bool) -> None:
        if not shared or created:
            return  # only we could have put it there
        if not stat.S_ISREG(st.st_mode):
            raise self._refused("is not a regular file, in a directory others can write",
                                "remove it or name another file")
        if st.st_uid != os.geteuid():
            raise self._refused(f"belongs to uid {st.st_uid}, in a directory others can write",
                                "remove it or name another file")
        if st.st_nlink != 1:
            raise self._refused(f"has {st.st_nlink} hard links, in a directory others can "
                                "write", "remove it or name another file")

    def _refused(self, why: str, hint: str | None = None) -> UsageError:
        return UsageError(f"{self.option} {self.path}: {why}", hint)

    def write(self, text: str | bytes) -> None:
        data = text.encode() if isinstance(text, str) else text
        self.written = True
        while data:
            data = data[os.write(self.fd, data):]

    def flush(self) -> None:
        pass  # every write goes straight to the file

    def replace(self, data: str | bytes) -> None:
        """The file's whole content becomes `data` (a FIFO or a device is
        just written to)."""
        if stat.S_ISREG(os.fstat(self.fd).st_mode):
            os.ftruncate(self.fd, 0)
            os.lseek(self.fd, 0, os.SEEK_SET)
        self.write(data)

    def discard(self) -> None:
        """Closes it, and removes it if this open made it, nothing was
        written to it and its name still names it: a command that failed
        leaves no empty file behind."""
        with contextlib.suppress(OSError):
            ours = os.fstat(self.fd)
            there = os.stat(self._name, dir_fd=self._dir_fd, follow_symlinks=False)
            if self.created and not self.written \
                    and (there.st_dev, there.st_ino) == (ours.st_dev, ours.st_ino):
                os.unlink(self._name, dir_fd=self._dir_fd)
        self.close()

    def close(self) -> None:
        for fd in (self.fd, self._dir_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fd = self._dir_fd = -1

    def __enter__(self) -> OutputFile:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        if kind is None:
            self.close()
        else:
            self.discard()

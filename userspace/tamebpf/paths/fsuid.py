"""SQLite's file I/O in the state directory, done as the directory's owner.

statedir.py checks paths.db-wal, -shm and -journal, but SQLite opens them
by name later, when it needs them. Its unix VFS opens them O_NOFOLLOW, so a
symbolic link planted in between is not followed; a hard link is (where
fs.protected_hardlinks is 0), and so is a link swapped in for the directory
itself by an owner who also owns its parent. Root would then write, or
create, a file where the owner could not. Under the owner's filesystem uid
and gid, no open SQLite makes can do more than the owner itself could.

setfsuid(2), setfsgid(2) and capset(2) act on the calling thread only
(glibc passes them straight to the kernel), so the exporter's other
threads, a scrape for instance, keep root's. A non-zero fsuid takes
CAP_DAC_OVERRIDE and the other file capabilities out of the thread's
effective set, which is the point; CAP_DAC_READ_SEARCH alone is put back,
so that root still reaches a directory the owner cannot walk to
(systemd's /var/lib/private, 0700, in front of a DynamicUser's), while
every write and every new file stays within the owner's rights.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator

CAP_DAC_READ_SEARCH = 2
_CAPABILITY_V3 = 0x20080522  # two 32-bit words per set
_QUERY = 0xFFFFFFFF  # (uid_t)-1, no id: set*fsid change nothing, return the current one


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Sets(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


_Capabilities = _Sets * 2
_libc = ctypes.CDLL(None, use_errno=True)
for _call in (_libc.setfsuid, _libc.setfsgid):
    _call.argtypes, _call.restype = [ctypes.c_uint32], ctypes.c_uint32


def _capabilities(new: ctypes.Array[_Sets] | None = None) -> ctypes.Array[_Sets]:
    """This thread's capabilities (capget), or `new` made them (capset)."""
    header = _Header(_CAPABILITY_V3, 0)
    sets = _Capabilities() if new is None else new
    if (_libc.capget if new is None else _libc.capset)(ctypes.byref(header), sets) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"cannot {'read' if new is None else 'set'} this thread's "
                      f"capabilities: {os.strerror(err)}")
    return sets


def _fs_ids() -> tuple[int, int]:
    return _libc.setfsuid(_QUERY), _libc.setfsgid(_QUERY)


@contextlib.contextmanager
def as_owner(uid: int, gid: int) -> Iterator[None]:
    """The block's file access (this thread's) as uid:gid when root runs
    it in a directory another user owns; otherwise unchanged."""
    if os.geteuid() != 0 or uid == 0:
        yield
        return
    saved, (old_uid, old_gid) = _capabilities(), _fs_ids()
    try:
        _libc.setfsgid(gid)
        _libc.setfsuid(uid)
        if _fs_ids() == (uid, gid):
            raised = _capabilities()
            if raised[0].permitted & (1 << CAP_DAC_READ_SEARCH):
                raised[0].effective |= 1 << CAP_DAC_READ_SEARCH
                _capabilities(raised)
        else:
            # No CAP_SETUID or CAP_SETGID: the caps unit, whose bounding set
            # holds neither, and whose sandbox (ProtectSystem=strict) is what
            # bounds a planted link there. It goes on with root's ids.
            _libc.setfsuid(old_uid)
            _libc.setfsgid(old_gid)
        yield
    finally:
        # fsuid first: back at 0 it returns the file capabilities by itself.
        _libc.setfsuid(old_uid)
        _libc.setfsgid(old_gid)
        _capabilities(saved)
        if _fs_ids() != (old_uid, old_gid):
            raise OSError(f"this thread's filesystem ids stayed {_fs_ids()}, not "
                          f"{(old_uid, old_gid)}")

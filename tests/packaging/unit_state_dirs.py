"""What systemd does with the units' state directories, reproduced without
systemd (PID 1 here is not systemd) in a temporary root, from the units'
own directives, so a test can run tamebpf's state code as each unit would.

On a unit's start (systemd's exec setup, as documented in
systemd.exec(5) and systemd's own tests):
- StateDirectory=NAME with DynamicUser=yes: the real directory is
  /var/lib/private/NAME (/var/lib/private 0700 root), a plain /var/lib/NAME
  left from a non-dynamic owner is moved there, /var/lib/NAME becomes a link
  to it, and the whole tree is handed to the unit's user (chown -R: a new
  dynamic uid each start, from 61184-65519) with StateDirectoryMode=.
- StateDirectory=NAME without DynamicUser: a /var/lib/NAME link into
  private/ is turned back into a plain directory, and the tree is handed to
  the unit's user (root here).
- The service runs in a mount namespace: with ProtectSystem=strict all is
  read-only but its state directory and ReadWritePaths= (links resolved,
  '-' for one that may be missing); a DynamicUser service sees its own
  directory through a private /var/lib/private it may traverse.
- Its capabilities: a DynamicUser service has none over files; root's are
  its CapabilityBoundingSet=.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
import traceback
from collections.abc import Callable
from pathlib import Path

CLONE_NEWNS = 0x20000
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 32, 4096, 16384, 1 << 18
DYNAMIC_UIDS = range(61184, 65520)
_libc = ctypes.CDLL(None, use_errno=True)


def directives(unit_text: str) -> dict[str, str]:
    """The unit's Key=value lines (a later one wins, as for these keys)."""
    return {m[1]: m[2].strip() for m in re.finditer(r"^(\w+)=(.*)$", unit_text, re.M)}


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else text.encode()


def _mount(source: str | None, target: str, fstype: str | None, flags: int,
           data: str | None = None) -> None:
    if _libc.mount(_bytes(source), _bytes(target), _bytes(fstype), flags, _bytes(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {target}: {os.strerror(err)}")


def _keep_only_capabilities(names: list[str]) -> None:
    """This (root) process's capabilities become `names`, as a bounding set
    makes them for root's service."""
    libcap = ctypes.CDLL(ctypes.util.find_library("cap"), use_errno=True)
    libcap.cap_from_text.restype = ctypes.c_void_p
    libcap.cap_set_proc.argtypes = [ctypes.c_void_p]
    text = (",".join(n.lower() for n in names) + "=ep") if names else "="
    caps = libcap.cap_from_text(text.encode())
    if not caps or libcap.cap_set_proc(caps) != 0:
        raise OSError(ctypes.get_errno(), f"cap_set_proc({text})")


class FakeSystemd:
    """Units started in the temporary root `root` (its var/lib)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.var_lib = root / "var" / "lib"
        self.var_lib.mkdir(parents=True, mode=0o755)
        self.uids: dict[str, int] = {}
        # A running DynamicUser unit's directory, as its mount namespace
        # holds it from its start (wherever another unit's start moves it).
        self.views: dict[str, int] = {}

    def close(self) -> None:
        for fd in self.views.values():
            os.close(fd)
        self.views.clear()

    def path(self, absolute: str) -> Path:
        return self.root / absolute.lstrip("/")

    def start(self, unit: dict[str, str], name: str, uid: int | None = None) -> None:
        """Start `name`: its state directory as systemd leaves it. A
        DynamicUser unit gets `uid` (a new one a start, like systemd's)."""
        dynamic = unit.get("DynamicUser") == "yes"
        self.uids[name] = (uid if uid is not None else DYNAMIC_UIDS[0]) if dynamic else 0
        state = unit.get("StateDirectory")
        if not state:
            return
        public, private = self.var_lib / state, self.var_lib / "private" / state
        if dynamic:
            private.parent.mkdir(mode=0o700, exist_ok=True)
            private.parent.chmod(0o700)
            if public.is_dir() and not public.is_symlink() and not private.exists():
                os.rename(public, private)
            private.mkdir(exist_ok=True)
            if not public.is_symlink():
                public.symlink_to(Path("private") / state)
            top = private
            if name in self.views:
                os.close(self.views.pop(name))
            self.views[name] = os.open(private, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        else:
            if public.is_symlink() and private.is_dir():
                public.unlink()
                os.rename(private, public)
            public.mkdir(exist_ok=True)
            top = public
        owner = self.uids[name]
        for where, dirs, files in os.walk(top):
            for entry in [where] + [os.path.join(where, n) for n in dirs + files]:
                os.chown(entry, owner, owner, follow_symlinks=False)
        top.chmod(int(unit.get("StateDirectoryMode", "0755"), 8))

    def run_as(self, unit: dict[str, str], name: str, job: Callable[[], None]) -> str | None:
        """Run `job` as the started unit `name` would (its user, its
        capabilities, its read-only file system); the failure's text, or
        None."""
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: becomes the service, runs the job, never returns
            os.close(read)
            status = 1
            try:
                self._enter(unit, name)
                job()
                status = 0
            except BaseException:
                os.write(write, traceback.format_exc().encode()[-3000:])
            finally:
                os._exit(status)
        os.close(write)
        with os.fdopen(read, "rb") as f:
            text = f.read().decode()
        _, status = os.waitpid(pid, 0)
        return None if os.waitstatus_to_exitcode(status) == 0 else text or "failed"

    def _enter(self, unit: dict[str, str], name: str) -> None:
        # Where the directory the unit started with is now (another unit's
        # start may have moved it).
        started_with = os.readlink(f"/proc/self/fd/{self.views[name]}") \
            if name in self.views else None
        if _libc.unshare(CLONE_NEWNS) != 0:
            raise OSError(ctypes.get_errno(), "unshare")
        _mount(None, "/", None, MS_REC | MS_PRIVATE)
        dynamic = unit.get("DynamicUser") == "yes"
        state = unit.get("StateDirectory")
        if dynamic and state and started_with:
            # The service's own view: a /var/lib/private it may enter, with
            # only its directory in it (the one it started with).
            private, aside = self.var_lib / "private", self.root / "aside"
            aside.mkdir(exist_ok=True)
            _mount(started_with, str(aside), None, MS_BIND)
            _mount("tmpfs", str(private), "tmpfs", 0, "mode=0755")
            (private / state).mkdir()
            _mount(str(aside), str(private / state), None, MS_BIND)
        writable = []
        if state:
            writable.append(self.path(f"/var/lib/{state}").resolve())
        for entry in unit.get("ReadWritePaths", "").split():
            where = self.path(entry.lstrip("-"))
            if where.exists():
                writable.append(where.resolve())
            elif not entry.startswith("-"):
                raise RuntimeError(f"ReadWritePaths={entry} does not exist: the unit fails")
        if unit.get("ProtectSystem") == "strict":
            root = str(self.root)
            _mount(root, root, None, MS_BIND | MS_REC)
            _mount(None, root, None, MS_BIND | MS_REMOUNT | MS_RDONLY)
            for where in writable:  # a bind copies the read-only flag: cleared after
                _mount(str(where), str(where), None, MS_BIND)
                _mount(None, str(where), None, MS_BIND | MS_REMOUNT)
        if dynamic:
            uid = self.uids[name]
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        else:
            _keep_only_capabilities(unit.get("CapabilityBoundingSet", "").split())

"""Stream caps in the kernel (bpf/cap.bpf.c via libtamebpf).

Caps are pinned in a bpffs directory (default /sys/fs/bpf/tamebpf/cap,
or $TAMEBPF_PIN_DIR), so they stay in force after this process exits and
any later process reads them back. No handle is kept open: every call
takes the directory's lock, does its work and lets go.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import ipaddress
import os
import socket
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from tamebpf.cap.spec import Dest, check_cgroup_text, parse_dest
from tamebpf.common.errors import TamebpfError, UsageError
from tamebpf.common.records import Cap
from tamebpf.kernel import native, preflight, run_cgroups
from tamebpf.kernel.abi import (
    TB_CAP_DIR_RECEIVE,
    TB_CAP_DIR_SEND,
    TB_CAP_MODE_PACE,
    TB_CAP_MODE_REFUSE,
    TB_CAP_OP_ADD,
    TB_CAP_OP_REMOVE,
    TbCapCgroup,
    TbCapChange,
    TbCapCount,
    TbCapFollow,
    TbCapRule,
    TbCapState,
)
from tamebpf.kernel.cgroups import Cgroup, CgroupNames, mounts, require_cgroup2, resolve

DEFAULT_PIN_DIR = "/sys/fs/bpf/tamebpf/cap"
BPFFS = "/sys/fs/bpf"
PIN_ENV = "TAMEBPF_PIN_DIR"
LIST_MAX = 4096  # capped cgroups read at once (the size of cap_rules)
PACE_NO_LIMIT = 2**32 - 1  # the max of a pace cap, which never refuses
# The errno a refused connect() fails with (see docs/cap.md).
REFUSED_ERRNO = errno.EPERM


@dataclass(frozen=True)
class Add:
    """A cap to set (CapTable.commit)."""

    cgroup: str
    dest: Dest
    max_streams: int
    pace_bytes_per_s: int | None = None  # None: refuse mode
    all_processes: bool = False  # the cgroup is the root, confirmed
    direction: str = "both"  # pace mode: what it paces (cap/spec.PACE_DIRECTIONS)


class CapChangeError(UsageError):
    """A change of a plan the kernel's caps refuse; `index` says which."""

    def __init__(self, index: int, message: str, hint: str | None = None) -> None:
        super().__init__(message, hint)
        self.index = index


# What a pace cap paces, as the kernel keeps it (tb_cap_count.dirs; 0, a
# cap set before directions, paces what is sent).
DIRS = {"send": TB_CAP_DIR_SEND, "receive": TB_CAP_DIR_RECEIVE,
        "both": TB_CAP_DIR_SEND | TB_CAP_DIR_RECEIVE}


def direction_of(dirs: int) -> str:
    return {TB_CAP_DIR_RECEIVE: "receive", DIRS["both"]: "both"}.get(dirs, "send")


def pin_dir() -> str:
    return os.environ.get(PIN_ENV) or DEFAULT_PIN_DIR


def rule_for(dest: Dest) -> TbCapRule:
    net = dest.network
    rule = TbCapRule()
    rule.family = socket.AF_INET if net.version == 4 else socket.AF_INET6
    first, last = dest.ports or (0, 0)
    rule.port, rule.port_end = first, last
    rule.prefix_len = net.prefixlen
    words = ((net.network_address.packed + bytes(16))[:16],
             (net.netmask.packed + bytes(16))[:16])
    for i in range(4):
        # Network byte order in memory, as the kernel compares them.
        rule.addr[i] = int.from_bytes(words[0][4 * i:4 * i + 4], "little")
        rule.mask[i] = int.from_bytes(words[1][4 * i:4 * i + 4], "little")
    return rule


def dest_of(rule: TbCapRule) -> Dest:
    raw = b"".join(int(w).to_bytes(4, "little") for w in rule.addr)
    addr: ipaddress.IPv4Address | ipaddress.IPv6Address
    if rule.family == socket.AF_INET:
        addr = ipaddress.IPv4Address(raw[:4])
        net: ipaddress.IPv4Network | ipaddress.IPv6Network = ipaddress.IPv4Network(
            (addr, rule.prefix_len))
    else:
        net = ipaddress.IPv6Network((ipaddress.IPv6Address(raw), rule.prefix_len))
    if not rule.port:
        return Dest(net)
    return Dest(net, rule.port, rule.port_end if rule.port_end != rule.port else None)


def resolve_cgroup(path: str, all_processes: bool = False, option: str = "--cgroup") -> Cgroup:
    """A cgroup v2 directory: an absolute path, or a path below the cgroup v2
    root written with or without a leading slash ("/transfer.slice", as
    `cap list` shows it). Never the root (every process on the host) unless
    written as '/' and confirmed with ALL_PROCESSES; never empty."""
    check_cgroup_text(path, option, all_processes)
    root = require_cgroup2()
    under_root = (path.rstrip("/") + "/").startswith(root.rstrip("/") + "/")
    if path.strip() == "/":
        cg = resolve(root)
    elif os.path.isabs(path) and not under_root and not os.path.exists(path):
        cg = resolve(os.path.join(root, path.lstrip("/")))
    else:
        cg = resolve(path)
    if cg.rel == "/" and not (all_processes and path.strip() == "/"):
        raise UsageError(f"{option} {path!r}: that is the cgroup v2 root (every process)",
                         "name the cgroup to cap; to cap every process write '/' and add "
                         "--all-processes (all_processes = true in a caps file)")
    return cg


def ensure_bpffs(path: str) -> None:
    """The pin directory must be on bpffs; /sys/fs/bpf is mounted if it is
    not (as bpftool does)."""
    best = ("", "")
    target = os.path.abspath(path)
    for point, fstype, _ in mounts():
        if (target + "/").startswith(point.rstrip("/") + "/") and len(point) >= len(best[0]):
            best = (point, fstype)
    if best[1] == "bpf":
        return
    if (target + "/").startswith(BPFFS + "/") and os.path.isdir(BPFFS):
        res = subprocess.run(["mount", "-t", "bpf", "bpf", BPFFS], capture_output=True,
                             text=True, timeout=10)
        if res.returncode == 0:
            return
        raise TamebpfError(f"cannot mount bpffs on {BPFFS}: {res.stderr.strip()}",
                           f"mount it yourself: mount -t bpf bpf {BPFFS}")
    raise TamebpfError(f"pin directory {path} is not on a BPF filesystem",
                       f"set {PIN_ENV} to a directory under a bpffs mount")


def netns_paths() -> list[str]:
    """One path per network namespace in use (processes' and `ip netns`'):
    a cap's streams may be in any of them."""
    seen: set[tuple[int, int]] = set()
    out: list[str] = []
    paths = [f"/proc/{p}/ns/net" for p in os.listdir("/proc") if p.isdigit()]
    with contextlib.suppress(FileNotFoundError):
        paths += [os.path.join("/run/netns", n) for n in os.listdir("/run/netns")]
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue  # gone meanwhile
        if (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            out.append(path)
    return out


def _netns_fds() -> list[int]:
    """An fd for each namespace of netns_paths(), for the TCP iterators that
    count a new cap's streams and unpace a removed one's."""
    fds: list[int] = []
    for path in netns_paths():
        try:
            fds.append(os.open(path, os.O_RDONLY | os.O_CLOEXEC))
        except OSError:
            continue  # gone meanwhile
    return fds


@contextlib.contextmanager
def _netns_open() -> Iterator[list[int]]:
    fds = _netns_fds()
    try:
        yield fds
    finally:
        for fd in fds:
            os.close(fd)


class CapTable:
    """Set, list and remove caps (root; the programs stay after we exit)."""

    def __init__(self, command: str = "cap", verbose: bool = False,
                 pin: str | None = None) -> None:
        # Setting a cap counts the cgroup's streams in every namespace.
        self.root = preflight.check(command, needs_netns=True)
        self.pin = pin or pin_dir()
        self._lib = native.load()
        self._lib.tb_set_verbose(1 if verbose else 0)
        self.names = CgroupNames(self.root)

    def _fail(self, rc: int) -> TamebpfError:
        return TamebpfError(native.last_error(self._lib), native.errno_hint(-rc))

    def add(self, cgroup: str, dest: Dest, max_streams: int,
            pace_bytes_per_s: int | None = None, all_processes: bool = False,
            direction: str = "both") -> Cap:
        """Cap CGROUP's streams to DEST: refuse over MAX_STREAMS, or, with
        PACE_BYTES_PER_S, pace them to share that rate, in `direction`
        (mode and target are in force from the first moment the cap is)."""
        change = Add(cgroup, dest, max_streams, pace_bytes_per_s, all_processes, direction)
        return self.commit([change])[0]

    def remove(self, cgroup: str, dest: Dest) -> Cap:
        cap = self.find(cgroup, dest)
        if cap is None:
            raise UsageError(f"no cap for {dest} on {cgroup}",
                             "'tamebpf cap list' shows the caps in force")
        self.commit([cap])
        return cap

    def commit(self, changes: Sequence[Add | Cap]) -> list[Cap]:
        """Remove the caps given as Cap and set those given as Add, all at
        once or none (tb_cap_commit): a bad change, a limit or a failure
        leaves the caps as they were. Returns the caps set, as now."""
        ensure_bpffs(self.pin)
        arr = (TbCapChange * max(1, len(changes)))()
        keep: list[bytes] = []  # the paths the C side reads, alive until it returns
        cgroups: list[Cgroup | None] = []
        for i, change in enumerate(changes):
            c = arr[i]
            if isinstance(change, Cap):
                c.op = TB_CAP_OP_REMOVE
                c.cgid = change.cgroup_id
                c.rule = rule_for(parse_dest(change.dest))
                cgroups.append(None)
                continue
            cg = resolve_cgroup(change.cgroup, change.all_processes)
            keep += [cg.path.encode(), cg.rel.encode()]
            c.op, c.rule, c.level = TB_CAP_OP_ADD, rule_for(change.dest), cg.level
            c.cg_path, c.rel_path = keep[-2], keep[-1]
            c.max = change.max_streams
            c.mode = TB_CAP_MODE_PACE if change.pace_bytes_per_s else TB_CAP_MODE_REFUSE
            c.rate = change.pace_bytes_per_s or 0
            c.dirs = DIRS[change.direction] if change.pace_bytes_per_s else 0
            cgroups.append(cg)
        failed = ctypes.c_size_t(len(changes))
        with _netns_open() as fds:
            fd_arr = (ctypes.c_int * max(1, len(fds)))(*fds)
            rc = self._lib.tb_cap_commit(self.pin.encode(), arr, len(changes),
                                         ctypes.byref(failed), fd_arr, len(fds))
        if rc:
            raise self._commit_error(rc, changes, cgroups, arr, failed.value)
        return [self._cap(arr[i].rule, arr[i].cgid, cg.rel)
                for i, cg in enumerate(cgroups) if cg is not None]

    def _commit_error(self, rc: int, changes: Sequence[Add | Cap],
                      cgroups: Sequence[Cgroup | None], arr: Any, i: int) -> TamebpfError:
        if i >= len(changes):
            return self._fail(rc)
        change, cg = changes[i], cgroups[i]
        if rc == -errno.EEXIST and cg is not None and isinstance(change, Add):
            have = self._count(arr[i].rule.id)
            what = f"max {have.max} streams" if have.mode == TB_CAP_MODE_REFUSE else "paced"
            return CapChangeError(
                i, f"{change.dest} is already capped on {cg.rel} ({what})",
                f"'tamebpf cap rm --cgroup {cg.rel} --dest {change.dest}' first")
        if rc == -errno.ENOENT and isinstance(change, Cap):
            return CapChangeError(i, f"no cap for {change.dest} on {change.cgroup}",
                                  "'tamebpf cap list' shows the caps in force")
        if rc == -errno.ENOSPC:
            return CapChangeError(i, native.last_error(self._lib),
                                  "remove caps first, or cap a parent cgroup")
        err = self._fail(rc)
        return err

    def find(self, cgroup: str, dest: Dest) -> Cap | None:
        """The cap on this cgroup (a path; one removed since can still be
        named by the path it had) for this destination."""
        root_named = cgroup.strip() == "/"  # removing a cap on the root needs no confirming
        check_cgroup_text(cgroup, "--cgroup", root_named)
        try:
            wanted: int | str = resolve_cgroup(cgroup, root_named).id
        except UsageError:
            root = self.root.rstrip("/")
            rel = cgroup[len(root):] if (cgroup + "/").startswith(root + "/") else cgroup
            wanted = "/" + rel.strip("/")
        for cap in self.list():
            if wanted in (cap.cgroup_id, cap.cgroup) and cap.dest == str(dest):
                return cap
        return None

    def _list(self) -> list[Cap]:
        with _netns_open() as fds:  # a half-removed pace cap's sockets, to unpace
            fd_arr = (ctypes.c_int * max(1, len(fds)))(*fds)
            rc = self._lib.tb_cap_tidy(self.pin.encode(), fd_arr, len(fds))
        if rc:
            raise self._fail(rc)
        n = ctypes.c_size_t()
        want = 16
        while True:  # room for as many capped cgroups as there are now
            ids = (ctypes.c_uint64 * want)()
            cgs = (TbCapCgroup * want)()
            rc = self._lib.tb_cap_list(self.pin.encode(), ids, cgs, want, ctypes.byref(n))
            if rc:
                raise self._fail(rc)
            if n.value <= want or want >= LIST_MAX:
                break
            want = min(LIST_MAX, n.value + 16)
        caps = []
        for i in range(min(n.value, want)):
            cg = cgs[i]
            path = cg.path.decode(errors="replace")
            for j in range(min(cg.n, len(cg.rules))):
                try:
                    caps.append(self._cap(cg.rules[j], ids[i], path))
                except TamebpfError:
                    continue  # removed while we read
        return sorted(caps, key=lambda c: (c.cgroup, c.family, c.dest))

    def list(self) -> list[Cap]:
        """The caps in force. What a command killed midway left is removed
        first, so the pins are exactly those of the caps listed; so are the
        cgroups and caps of `tamebpf run`s that were killed (kill -9) and
        left no process (kernel/run_cgroups.py)."""
        if not os.path.isdir(self.pin):
            with run_cgroups.dead_runs():
                return []  # no cap to remove; the dead runs' cgroups go
        caps = self._list()
        with run_cgroups.dead_runs() as dead:
            stale = [c for c in caps if c.cgroup in dead or (
                not c.cgroup_exists and run_cgroups.RUN_NAME.fullmatch(c.cgroup.lstrip("/")))]
            if stale:
                self.commit(stale)
        gone = {c.id for c in stale}
        return [c for c in caps if c.id not in gone]

    def _count(self, cap_id: int) -> TbCapCount:
        count = TbCapCount()
        rc = self._lib.tb_cap_read_count(self.pin.encode(), cap_id, ctypes.byref(count))
        if rc:
            raise self._fail(rc)
        return count

    def _cap(self, rule: TbCapRule, cgid: int, path: str) -> Cap:
        c = self._count(rule.id)
        dest = dest_of(rule)
        return Cap(
            id=rule.id, cgroup=path, cgroup_id=cgid,
            cgroup_exists=self.names.name(cgid) is not None, dest=str(dest),
            family=dest.family, port=dest.port, max_streams=c.max, streams=c.count,
            refused=c.refused, charged=c.charged, seeded=c.seeded, released=c.released,
            mode="pace" if c.mode == TB_CAP_MODE_PACE else "refuse",
            rate_bytes_per_s=c.rate_bytes_per_s, port_end=dest.port_end,
            direction=direction_of(c.dirs) if c.mode == TB_CAP_MODE_PACE else "send",
        )

    def set_follow(self, cap_id: int, scout_cookie: int, rate_bytes_per_s: int) -> None:
        """Make pace cap CAP_ID follow its path (docs/cap.md, "Scout and
        follow rate"): the socket with cookie SCOUT_COOKIE (0: none) sends
        unpaced and is not counted, the others share RATE_BYTES_PER_S (0:
        the cap's own rate), each from its next share recompute on. No
        commit: the caps themselves do not change."""
        for name, value in (("cap id", cap_id), ("scout cookie", scout_cookie),
                            ("rate", rate_bytes_per_s)):
            if not 0 <= value < 2**64:
                raise UsageError(f"{name} {value} is not a 64-bit unsigned value")
        f = TbCapFollow(scout_cookie=scout_cookie, rate_bytes_per_s=rate_bytes_per_s)
        rc = self._lib.tb_cap_follow_set(self.pin.encode(), cap_id, ctypes.byref(f))
        if rc in (-errno.ENOENT, -errno.EINVAL):  # no such cap, or not a pace cap
            raise TamebpfError(native.last_error(self._lib),
                               "'tamebpf cap list' shows the caps in force and their mode")
        if rc:
            raise self._fail(rc)

    def clear_follow(self, cap_id: int) -> None:
        """Pace cap CAP_ID paces all its streams at its own rate again (from
        each one's next recompute); nothing to clear is no error."""
        rc = self._lib.tb_cap_follow_clear(self.pin.encode(), cap_id)
        if rc:
            raise self._fail(rc)

    def follow(self, cap_id: int) -> tuple[int, int] | None:
        """(scout cookie, rate in bytes/s) of a pace cap that follows its
        path, as set_follow left it; None when it does not (or is gone)."""
        f = TbCapFollow()
        rc = self._lib.tb_cap_follow_read(self.pin.encode(), cap_id, ctypes.byref(f))
        if rc == -errno.ENOENT:
            return None
        if rc:
            raise self._fail(rc)
        return f.scout_cookie, f.rate_bytes_per_s

    def health(self) -> TbCapState:
        state = TbCapState()
        if os.path.isdir(self.pin):
            rc = self._lib.tb_cap_read_state(self.pin.encode(), ctypes.byref(state))
            if rc and rc != -errno.ENOENT:
                raise self._fail(rc)
        return state

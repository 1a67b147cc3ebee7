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
from collections.abc import Iterator

from tamebpf.capfile import Dest
from tamebpf.cgroups import Cgroup, CgroupNames, _mounts, require_cgroup2, resolve
from tamebpf.errors import TamebpfError, UsageError
from tamebpf.kernel import native, preflight
from tamebpf.kernel.abi import (
    TB_CAP_MODE_PACE,
    TB_CAP_MODE_REFUSE,
    TbCapCgroup,
    TbCapCount,
    TbCapRule,
    TbCapState,
)
from tamebpf.records import Cap

DEFAULT_PIN_DIR = "/sys/fs/bpf/tamebpf/cap"
BPFFS = "/sys/fs/bpf"
PIN_ENV = "TAMEBPF_PIN_DIR"
LIST_MAX = 4096  # capped cgroups read at once (the size of cap_rules)
PACE_NO_LIMIT = 2**32 - 1  # the max of a pace cap, which never refuses
# The errno a refused connect() fails with (see docs/cap.md).
REFUSED_ERRNO = errno.EPERM


def pin_dir() -> str:
    return os.environ.get(PIN_ENV) or DEFAULT_PIN_DIR


def rule_for(dest: Dest) -> TbCapRule:
    net = dest.network
    rule = TbCapRule()
    rule.family = socket.AF_INET if net.version == 4 else socket.AF_INET6
    rule.port = dest.port or 0
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
    return Dest(net, rule.port or None)


def resolve_cgroup(path: str) -> Cgroup:
    """A cgroup v2 directory: an absolute path, or a path below the cgroup v2
    root written with or without a leading slash ("/transfer.slice", as
    `cap list` shows it)."""
    root = require_cgroup2()
    under_root = (path.rstrip("/") + "/").startswith(root.rstrip("/") + "/")
    if os.path.isabs(path) and not under_root and not os.path.exists(path):
        return resolve(os.path.join(root, path.lstrip("/")))
    return resolve(path)


def ensure_bpffs(path: str) -> None:
    """The pin directory must be on bpffs; /sys/fs/bpf is mounted if it is
    not (as bpftool does)."""
    mounts = _mounts()
    best = ("", "")
    target = os.path.abspath(path)
    for point, fstype, _ in mounts:
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
            pace_bytes_per_s: int | None = None) -> Cap:
        """Cap CGROUP's streams to DEST: refuse over MAX_STREAMS, or, with
        PACE_BYTES_PER_S, pace them to share that rate (mode and target are
        in force from the first moment the cap is)."""
        cg = resolve_cgroup(cgroup)
        ensure_bpffs(self.pin)
        rule = rule_for(dest)
        mode = TB_CAP_MODE_PACE if pace_bytes_per_s else TB_CAP_MODE_REFUSE
        with _netns_open() as fds:
            arr = (ctypes.c_int * max(1, len(fds)))(*fds)
            rc = self._lib.tb_cap_add(self.pin.encode(), cg.path.encode(), cg.rel.encode(),
                                      cg.level, ctypes.byref(rule), max_streams, mode,
                                      pace_bytes_per_s or 0, arr, len(fds))
        if rc == -errno.EEXIST:
            have = self._count(rule.id)
            raise UsageError(
                f"{dest} is already capped on {cg.rel} (max {have.max} streams)",
                f"'tamebpf cap rm --cgroup {cg.rel} --dest {dest}' first")
        if rc:
            raise self._fail(rc)
        return self._cap(rule, cg.id, cg.rel)

    def remove(self, cgroup: str, dest: Dest) -> Cap:
        cap = self.find(cgroup, dest)
        if cap is None:
            raise UsageError(f"no cap for {dest} on {cgroup}",
                             "'tamebpf cap list' shows the caps in force")
        with _netns_open() as fds:  # a pace cap's open sockets, wherever they are
            arr = (ctypes.c_int * max(1, len(fds)))(*fds)
            rc = self._lib.tb_cap_remove(self.pin.encode(), cap.cgroup_id,
                                         ctypes.byref(rule_for(dest)), arr, len(fds))
        if rc == -errno.ENOENT:  # removed meanwhile by someone else
            raise UsageError(f"no cap for {dest} on {cgroup}")
        if rc:
            raise self._fail(rc)
        return cap

    def find(self, cgroup: str, dest: Dest) -> Cap | None:
        """The cap on this cgroup (a path; one removed since can still be
        named by the path it had) for this destination."""
        try:
            wanted: int | str = resolve_cgroup(cgroup).id
        except UsageError:
            root = self.root.rstrip("/")
            rel = cgroup[len(root):] if (cgroup + "/").startswith(root + "/") else cgroup
            wanted = "/" + rel.strip("/")
        for cap in self.list():
            if wanted in (cap.cgroup_id, cap.cgroup) and cap.dest == str(dest):
                return cap
        return None

    def list(self) -> list[Cap]:
        if not os.path.isdir(self.pin):
            return []
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
            rate_bytes_per_s=c.rate_bytes_per_s,
        )

    def health(self) -> TbCapState:
        state = TbCapState()
        if os.path.isdir(self.pin):
            rc = self._lib.tb_cap_read_state(self.pin.encode(), ctypes.byref(state))
            if rc and rc != -errno.ENOENT:
                raise self._fail(rc)
        return state

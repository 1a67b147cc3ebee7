"""Real kernel objects for tests: cgroups, network namespaces, processes,
`ss` readings. Every object is created under a unique name and removed by
that name, also when the test fails."""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from tamebpf.cgroups import cgroup2_mount
from tamebpf.testbed.iperf import wait_for as wait_for  # the tree's one polling helper


def unique(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(3)}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def cgroup(name: str | None = None) -> Iterator[str]:
    """A fresh cgroup v2 directory; its processes are killed on the way out."""
    root = cgroup2_mount()
    assert root, "cgroup v2 not mounted"
    path = os.path.join(root, name or unique("tamebpf-test-"))
    os.mkdir(path)
    try:
        yield path
    finally:
        kill_cgroup(path)


def kill_cgroup(path: str) -> None:
    for _ in range(50):
        try:
            with open(os.path.join(path, "cgroup.procs")) as f:
                pids = [int(p) for p in f.read().split()]
        except FileNotFoundError:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for child in sorted(os.listdir(path)):
            if os.path.isdir(os.path.join(path, child)):
                kill_cgroup(os.path.join(path, child))
        try:
            os.rmdir(path)
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"could not remove cgroup {path}")


def spawn(argv: Sequence[str], cgroup_path: str | None = None,
          netns: str | None = None, **kw: object) -> subprocess.Popen[bytes]:
    """Start argv, moved into a cgroup before exec when asked."""
    if netns:
        argv = ["ip", "netns", "exec", netns, *argv]

    def enter() -> None:
        if cgroup_path:
            with open(os.path.join(cgroup_path, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))

    return subprocess.Popen(argv, preexec_fn=enter, **kw)  # type: ignore[call-overload,no-any-return]


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


def sh(*argv: str, netns: str | None = None, check: bool = True) -> str:
    if netns:
        argv = ("ip", "netns", "exec", netns, *argv)
    res = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    if check and res.returncode:
        raise AssertionError(f"{' '.join(argv)} failed ({res.returncode}): {res.stderr.strip()}")
    return res.stdout


@dataclass
class NetnsPair:
    """Two namespaces joined by a veth: a sender (198.18.0.1) and a
    receiver (198.18.0.2); the sender's egress can be shaped."""

    sender: str
    receiver: str
    sender_addr: str = "198.18.0.1"
    receiver_addr: str = "198.18.0.2"


@contextlib.contextmanager
def netns_pair(prefix: str = "tbf") -> Iterator[NetnsPair]:
    pair = NetnsPair(unique(prefix + "s"), unique(prefix + "r"))
    try:
        for ns in (pair.sender, pair.receiver):
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "set", "lo", "up", netns=ns)
        sh("ip", "link", "add", "veth0", "netns", pair.sender, "type", "veth",
           "peer", "name", "veth0", "netns", pair.receiver)
        for ns, addr in ((pair.sender, pair.sender_addr), (pair.receiver, pair.receiver_addr)):
            sh("ip", "addr", "add", f"{addr}/30", "dev", "veth0", netns=ns)
            # Real segment sizes, so the queue counts real packets.
            sh("ethtool", "-K", "veth0", "tso", "off", "gso", "off", "gro", "off", netns=ns)
            sh("ip", "link", "set", "veth0", "up", netns=ns)
            sh("sysctl", "-q", "-w", "net.ipv4.tcp_no_metrics_save=1", netns=ns)
        yield pair
    finally:
        for ns in (pair.sender, pair.receiver):
            delete_netns(ns)


def delete_netns(ns: str) -> None:
    if not os.path.exists(f"/run/netns/{ns}"):
        return
    pids = sh("ip", "netns", "pids", ns, check=False).split()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)
    sh("ip", "netns", "del", ns, check=False)


@dataclass
class SsFlow:
    cookie: int
    local_port: int
    remote_port: int
    srtt_us: float
    segs_out: int
    data_segs_out: int
    total_retrans: int
    bytes_acked: int
    delivered: int


_NUM = r"(\d+(?:\.\d+)?)"


def ss_flows(port: int, netns: str | None = None) -> dict[int, SsFlow]:
    """`ss -tinHe` for connections to or from `port`, by socket cookie."""
    out = sh("ss", "-tinHe", "state", "established",
             f"( sport = :{port} or dport = :{port} )", netns=netns)
    flows = {}
    lines = out.splitlines()
    for head, detail in zip(lines[::2], lines[1::2], strict=False):
        fields = head.split()
        local, remote = fields[2], fields[3]
        cookie = re.search(r"\bsk:([0-9a-f]+)", head)
        assert cookie, f"no sk: cookie in ss line {head!r}"

        def num(key: str, text: str = detail) -> float:
            m = re.search(rf"\b{key}:{_NUM}", text)
            return float(m.group(1)) if m else 0.0

        retrans = re.search(r"\bretrans:\d+/(\d+)", detail)
        flows[int(cookie.group(1), 16)] = SsFlow(
            cookie=int(cookie.group(1), 16),
            local_port=int(local.rsplit(":", 1)[1]),
            remote_port=int(remote.rsplit(":", 1)[1]),
            srtt_us=num("rtt") * 1000,
            segs_out=int(num("segs_out")),
            data_segs_out=int(num("data_segs_out")),
            total_retrans=int(retrans.group(1)) if retrans else 0,
            bytes_acked=int(num("bytes_acked")),
            delivered=int(num("delivered")),
        )
    return flows


def iperf3_available() -> bool:
    return shutil.which("iperf3") is not None


@contextlib.contextmanager
def private_bpffs() -> Iterator[str]:
    """A bpffs instance of the test's own, open to every user (mode 1777),
    mounted on a fresh temporary directory: for commands run without root,
    whatever mode the host mounted /sys/fs/bpf with (Linux 6.18 mounts it
    0700, where a non-root user cannot reach a pin directory below it).
    Unpinned and unmounted on the way out."""
    mnt = tempfile.mkdtemp(prefix="tamebpf-bpffs-")
    try:
        sh("mount", "-t", "bpf", "-o", "mode=1777", "bpf", mnt)
        preloaded = set(os.listdir(mnt))  # the kernel's own (maps.debug, progs.debug)
        try:
            yield mnt
        finally:
            for top in set(os.listdir(mnt)) - preloaded:
                for root, dirs, files in os.walk(os.path.join(mnt, top), topdown=False):
                    for name in files:
                        os.unlink(os.path.join(root, name))
                    for name in dirs:
                        os.rmdir(os.path.join(root, name))
                path = os.path.join(mnt, top)
                if os.path.isdir(path):
                    os.rmdir(path)
                else:
                    os.unlink(path)
            sh("umount", mnt)
    finally:
        os.rmdir(mnt)


@contextlib.contextmanager
def bpf_pin_dir(prefix: str = "tamebpf-test-") -> Iterator[str]:
    """A fresh directory path on bpffs (mounted at /sys/fs/bpf if it is not)
    for a test's pins; whatever is pinned there is unpinned on the way out,
    which detaches pinned links."""
    if not os.path.ismount("/sys/fs/bpf"):
        sh("mount", "-t", "bpf", "bpf", "/sys/fs/bpf")
    path = os.path.join("/sys/fs/bpf", unique(prefix))
    try:
        yield path
    finally:
        if os.path.isdir(path):
            for name in os.listdir(path):
                os.unlink(os.path.join(path, name))
            os.rmdir(path)


@contextlib.contextmanager
def term_as_interrupt() -> Iterator[None]:
    """SIGTERM (a `timeout`, a CI job cancelled) raises KeyboardInterrupt
    while this lasts, so the test unwinds and every fixture's clean-up runs
    (detach, unpin, kill, rmdir) instead of the process dying on the spot."""
    def interrupt(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    old = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)

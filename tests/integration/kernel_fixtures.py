"""Real kernel objects for tests: cgroups, network namespaces, processes,
`ss` readings, the cap tests' network. Every object is created under a unique name and removed by
that name, also when the test fails."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from tamebpf.cap.spec import parse_dest
from tamebpf.cap.table import CapTable
from tamebpf.common.records import Cap
from tamebpf.kernel.cgroups import cgroup2_mount, empty_and_remove
from tamebpf_testbed.iperf import wait_for as wait_for  # the tree's one polling helper


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
        empty_and_remove(path)  # the product's own kill-and-remove


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


# The signals tests send as a user at a terminal would. A test runner
# started in the background (`cmd &` in a script, nohup) hands them down
# ignored, and an ignored signal never arrives: processes whose signal
# handling a test checks start with them at their defaults.
TERMINAL_SIGNALS = (signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)


def default_signals() -> None:
    """preexec_fn: TERMINAL_SIGNALS at their defaults in the child."""
    for sig in TERMINAL_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)


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


# The cap tests' network (test_cap*.py): addresses, ports, the server and
# client they run, and reading one cap back.

V6_SENDER, V6_RECEIVER = "fd00:7462::1", "fd00:7462::2"
PORT, OTHER_PORT, CLOSED_PORT = 5001, 5002, 5003
HOLE = "198.19.0.1"  # routed to the receiver, which does not forward: SYNs vanish
UNREACHABLE = "198.18.128.1"  # an 'unreachable' route: connect() fails before SYN_SENT

# Accepts on every port given (IPv4 and IPv6), holds connections, closes
# each when its peer does.
SERVER = r"""
import selectors, socket, sys
sel = selectors.DefaultSelector()
for port in map(int, sys.argv[1:]):
    lst = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    lst.bind(("::", port))
    lst.listen(4096)
    lst.setblocking(False)
    sel.register(lst, selectors.EVENT_READ, True)
print("ready", flush=True)
while True:
    for key, _ in sel.select():
        if key.data:
            try:
                conn, _ = key.fileobj.accept()
            except BlockingIOError:
                continue
            conn.setblocking(False)
            sel.register(conn, selectors.EVENT_READ, False)
            continue
        try:
            data = key.fileobj.recv(4096)
        except OSError:
            data = b""
        if not data:
            sel.unregister(key.fileobj)
            key.fileobj.close()
"""

# One command a line on stdin, one JSON answer a line on stdout:
#   open HOST PORT K [nb] [uto=MS]  -> [[index, "ok" | "EINPROGRESS" | errno name], ...]
#   retry INDEX HOST PORT           -> the same for connect() again on that socket
#   close all | I,J,...             -> "ok"
# Sockets are kept (also those whose connect failed) until closed.
CLIENT = r"""
import errno, json, socket, sys
socks, nxt = {}, 0
def attempt(s, host, port, nb):
    try:
        if nb:
            rc = s.connect_ex((host, port))
            return "ok" if rc == 0 else errno.errorcode.get(rc, str(rc))
        s.connect((host, port))
        return "ok"
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno)) if exc.errno else "timeout"
for line in sys.stdin:
    cmd, *args = line.split()
    if cmd == "open":
        host, port, k = args[0], int(args[1]), int(args[2])
        nb = "nb" in args[3:]
        out = []
        for _ in range(k):
            s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
            for opt in args[3:]:
                if opt.startswith("uto="):
                    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, int(opt[4:]))
            s.setblocking(not nb)
            if not nb:
                s.settimeout(10)
            socks[nxt] = s
            out.append([nxt, attempt(s, host, port, nb)])
            nxt += 1
        print(json.dumps(out), flush=True)
    elif cmd == "retry":
        s = socks[int(args[0])]
        print(json.dumps([[int(args[0]), attempt(s, args[1], int(args[2]), False)]]), flush=True)
    elif cmd == "close":
        which = list(socks) if args[0] == "all" else [int(i) for i in args[0].split(",")]
        for i in which:
            socks.pop(i).close()
        print(json.dumps("ok"), flush=True)
"""

def read_line(proc: subprocess.Popen[str], timeout: float, what: str) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, f"no answer from {what} within {timeout} s"
    line = proc.stdout.readline()
    assert line, f"{what} exited (code {proc.poll()})"
    return line.strip()


@dataclass
class Net:
    pair: NetnsPair
    server_v4: str
    server_v6: str


@contextlib.contextmanager
def cap_net() -> Iterator[Net]:
    """The cap tests' network: a netns pair with IPv6 too, a route into a hole
    and an unreachable one, and a server holding connections on PORT and
    OTHER_PORT (the `net` fixture of conftest.py)."""
    with netns_pair("tbcap") as pair:
        for ns, addr in ((pair.sender, V6_SENDER), (pair.receiver, V6_RECEIVER)):
            sh("ip", "-6", "addr", "add", f"{addr}/64", "dev", "veth0", "nodad", netns=ns)
        sh("ip", "route", "add", "198.19.0.0/16", "via", pair.receiver_addr, netns=pair.sender)
        sh("ip", "route", "add", "unreachable", "198.18.128.0/24", netns=pair.sender)
        server = spawn([sys.executable, "-c", SERVER, str(PORT), str(OTHER_PORT)],
                       netns=pair.receiver, stdout=subprocess.PIPE, text=True)
        try:
            assert read_line(server, 10, "server") == "ready"
            yield Net(pair, pair.receiver_addr, V6_RECEIVER)
        finally:
            stop(server)


class Client:
    """A process (in a cgroup, in the sender namespace) holding sockets."""

    def __init__(self, net: Net, cgroup_path: str | None) -> None:
        self.proc: subprocess.Popen[str] = spawn(
            [sys.executable, "-c", CLIENT], cgroup_path=cgroup_path, netns=net.pair.sender,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(self, line: str, timeout: float = 20) -> Any:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return json.loads(read_line(self.proc, timeout, f"client ({line})"))

    def open(self, host: str, port: int, k: int, *opts: str) -> list[str]:
        self.last = self.ask(f"open {host} {port} {k} {' '.join(opts)}")
        return [r for _, r in self.last]

    def opened(self) -> list[int]:
        """Indices of the last open's sockets that connected."""
        return [i for i, r in self.last if r in ("ok", "EINPROGRESS")]

    def close(self, which: list[int] | str = "all") -> None:
        arg = which if isinstance(which, str) else ",".join(map(str, which))
        assert self.ask(f"close {arg}") == "ok"


@contextlib.contextmanager
def client(net: Net, cgroup_path: str | None) -> Iterator[Client]:
    c = Client(net, cgroup_path)
    try:
        yield c
    finally:
        stop(c.proc)  # type: ignore[arg-type]


def the_cap(table: CapTable, cgroup_path: str, dest: str) -> Cap:
    cap = table.find(cgroup_path, parse_dest(dest))
    assert cap is not None, f"no cap for {dest} on {cgroup_path} in {table.list()}"
    assert cap.streams == cap.charged + cap.seeded - cap.released, (
        f"counters disagree: streams {cap.streams} != charged {cap.charged} + seeded "
        f"{cap.seeded} - released {cap.released}")
    return cap


def wait_value(get: Callable[[], int], expected: int, what: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    value = get()
    while value != expected and time.monotonic() < deadline:
        time.sleep(0.05)
        value = get()
    assert value == expected, f"{what}: expected {expected}, got {value} after {timeout} s"

"""What happens to open streams when a cap's mode changes (docs/cap.md,
"Open streams when a cap changes"), per-ACK work only for paced sockets,
and port ranges: real cgroups, sockets sending real data across a veth."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tamebpf.cap.spec import parse_dest
from tamebpf.cap.table import PACE_NO_LIMIT, CapTable
from tests.integration.kernel_fixtures import (
    CLOSED_PORT,
    OTHER_PORT,
    PORT,
    Net,
    client,
    read_line,
    spawn,
    stop,
)
from tests.integration.test_cap_cli import tamebpf

pytestmark = pytest.mark.root
UNLIMITED = 2**64 - 1

# One command a line: "open K" connects K more sockets; "send N" sends N
# bytes on every socket; "rates" answers with each socket's
# SO_MAX_PACING_RATE (8 bytes; unlimited is ~0UL).
SENDER = r"""
import json, socket, struct, sys
host, port = sys.argv[1], int(sys.argv[2])
socks = []
for line in sys.stdin:
    cmd, *arg = line.split()
    if cmd == "open":
        out = []
        for _ in range(int(arg[0])):
            s = socket.socket()
            s.settimeout(20)
            try:
                s.connect((host, port))
                socks.append(s)
                out.append("ok")
            except OSError as err:
                out.append(err.strerror)
        print(json.dumps(out), flush=True)
    elif cmd == "send":
        chunk = b"x" * 65536
        for s in socks:
            left = int(arg[0])
            while left > 0:
                left -= s.send(chunk[:left])
        print(json.dumps("sent"), flush=True)
    elif cmd == "rates":
        print(json.dumps([struct.unpack("Q", s.getsockopt(socket.SOL_SOCKET, 47, 8))[0]
                          for s in socks]), flush=True)
"""


class Sender:
    def __init__(self, net: Net, cg: str) -> None:
        self.proc = spawn([sys.executable, "-c", SENDER, net.server_v4, str(PORT)],
                          cgroup_path=cg, netns=net.pair.sender, stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True)

    def ask(self, line: str) -> object:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return json.loads(read_line(self.proc, 60, f"sender ({line})"))

    def rates(self) -> list[int]:
        self.ask("send 262144")  # ACKs with RTT samples: paced sockets recompute
        return self.ask("rates")  # type: ignore[return-value]


@contextlib.contextmanager
def sender(net: Net, cg: str) -> Iterator[Sender]:
    s = Sender(net, cg)
    try:
        yield s
    finally:
        stop(s.proc)  # type: ignore[arg-type]


def apply(tmp: str, cg: str, dest: str, line: str) -> None:
    path = os.path.join(tmp, "caps.toml")
    with open(path, "w") as f:
        f.write(f'[[cap]]\ncgroup = "{cg}"\ndest = "{dest}"\n{line}\n')
    res = tamebpf("cap", "apply", path)
    assert res.returncode == 0, res.stderr


def streams(cg: str, dest: str) -> int:
    cap = CapTable().find(cg, parse_dest(dest))
    assert cap is not None
    return cap.streams


def test_open_streams_on_every_mode_change(net: Net, pins: str, cg: str,
                                           tmp_path: object) -> None:
    """As docs/cap.md states: refuse -> pace: open streams counted, not
    paced, new ones paced; pace -> pace: paced streams follow the new
    target; pace -> refuse: paced streams unpaced, all counted, none closed
    (new connects refused while over N); removed: unpaced."""
    tmp, dest = str(tmp_path), f"{net.server_v4}/32:{PORT}"
    with sender(net, cg) as s:
        apply(tmp, cg, dest, "max_streams = 10")
        assert s.ask("open 3") == ["ok"] * 3
        assert s.rates() == [UNLIMITED] * 3, "refuse mode paces nothing"

        apply(tmp, cg, dest, 'mode = "pace"\nrate = "80M"')  # refuse -> pace
        assert streams(cg, dest) == 3, "the open streams are counted by the pace cap"
        assert s.rates() == [UNLIMITED] * 3, "streams open before a pace cap stay unpaced"
        assert s.ask("open 2") == ["ok"] * 2
        new = s.rates()[3:]
        assert all(r <= 10_000_000 for r in new), f"new streams paced (80M = 10 MB/s): {new}"

        apply(tmp, cg, dest, 'mode = "pace"\nrate = "40M"')  # pace -> pace
        after = s.rates()
        assert after[:3] == [UNLIMITED] * 3, after
        assert all(r <= 5_000_000 for r in after[3:]), f"paced streams follow 40M: {after}"

        apply(tmp, cg, dest, "max_streams = 2")  # pace -> refuse
        assert s.rates() == [UNLIMITED] * 5, "a refuse cap unpaces the paced streams"
        assert streams(cg, dest) == 5, "all 5 counted, over N, none closed"
        assert s.ask("open 1") == ["Operation not permitted"], "over N: refused"

        apply(tmp, cg, dest, 'mode = "pace"\nrate = "80M"')
        assert s.ask("open 1") == ["ok"]
        assert s.rates()[5] <= 10_000_000
        res = tamebpf("cap", "rm", "--cgroup", cg, "--dest", dest)  # pace -> no cap
        assert res.returncode == 0, res.stderr
        assert s.rates() == [UNLIMITED] * 6, "cap rm unpaces"


@contextlib.contextmanager
def bpf_stats() -> Iterator[None]:
    fd = ctypes.CDLL("libbpf.so.1", use_errno=True).bpf_enable_stats(0)  # BPF_STATS_RUN_TIME
    assert fd >= 0, f"cannot enable BPF run-time stats: {os.strerror(-fd)}"
    try:
        yield
    finally:
        os.close(fd)


def pace_runs(cg: str) -> int:
    """Runs of the tb_cap_pace attached to this cgroup so far."""
    out = subprocess.run(["bpftool", "-j", "cgroup", "show", cg], capture_output=True,
                         text=True, check=True, timeout=30).stdout
    ids = [p["id"] for p in json.loads(out) if p.get("name") == "tb_cap_pace"]
    assert len(ids) == 1, out
    prog = json.loads(subprocess.run(["bpftool", "-j", "prog", "show", "id", str(ids[0])],
                                     capture_output=True, text=True, check=True,
                                     timeout=30).stdout)
    return int(prog.get("run_cnt", 0))


@pytest.mark.parametrize(("mode", "per_ack"), [("refuse", False), ("pace", True)])
def test_per_ack_work_only_for_paced_sockets(net: Net, pins: str, cg: str, mode: str,
                                             per_ack: bool) -> None:
    """tb_cap_pace used to turn on the RTT callback (one run per ACK) for
    every socket of a capped cgroup, refuse caps included."""
    dest = f"{net.server_v4}/32:{PORT}"
    table = CapTable()
    if mode == "pace":
        table.add(cg, parse_dest(dest), PACE_NO_LIMIT, pace_bytes_per_s=10**10)
    else:
        table.add(cg, parse_dest(dest), 100)
    with bpf_stats(), sender(net, cg) as s:
        assert s.ask("open 4") == ["ok"] * 4
        before = pace_runs(cg)
        s.ask("send 4194304")  # 4 MiB on each: thousands of ACKs
        runs = pace_runs(cg) - before
    if per_ack:
        assert runs > 100, f"a paced socket gets its RTT callback: {runs} runs"
    else:
        assert runs < 8, f"refuse mode: {runs} runs of tb_cap_pace while sending 16 MiB"


def test_port_range(net: Net, pins: str, cg: str) -> None:
    """--dest CIDR:LOW-HIGH caps every port of the range, and no other."""
    dest = f"{net.server_v4}/32:{PORT}-{OTHER_PORT}"
    res = tamebpf("cap", "set", "--cgroup", cg, "--dest", dest, "--max-streams", "2",
                  "--json")
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert (got["dest"], got["port"], got["port_end"]) == (dest, PORT, OTHER_PORT), got
    with client(net, cg) as c:
        assert c.open(net.server_v4, PORT, 1) == ["ok"]
        assert c.open(net.server_v4, OTHER_PORT, 2) == ["ok", "EPERM"]
        assert c.open(net.server_v4, CLOSED_PORT, 1) == ["ECONNREFUSED"], "outside the range"
    res = tamebpf("cap", "list", "--json", "--window", "0")
    assert [c["dest"] for c in json.loads(res.stdout)] == [dest]

"""Stream caps against the real kernel: processes in test cgroups open TCP
connections across a veth pair to a server in a test namespace, and the
counts are read back from the pinned maps."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tamebpf.cap.spec import parse_dest
from tamebpf.cap.table import CapTable
from tests.integration.kernel_fixtures import (
    CLOSED_PORT,
    HOLE,
    OTHER_PORT,
    PORT,
    UNREACHABLE,
    Client,
    Net,
    client,
    read_line,
    sh,
    spawn,
    stop,
    the_cap,
    wait_value,
)

pytestmark = pytest.mark.root


# The burst: K non-blocking sockets made in advance, connect()ed back to
# back once "go" arrives on stdin.
BURST = r"""
import errno, socket, sys
host, port, k = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
socks = [socket.socket() for _ in range(k)]
for s in socks:
    s.setblocking(False)
print("ready", flush=True)
sys.stdin.readline()
counts = {"ok": 0, "EPERM": 0, "other": 0}
for s in socks:
    rc = s.connect_ex((host, port))
    key = "ok" if rc in (0, errno.EINPROGRESS) else "EPERM" if rc == errno.EPERM else "other"
    counts[key] += 1
print(" ".join(f"{k}={v}" for k, v in counts.items()), flush=True)
sys.stdin.readline()
"""


def test_cap_holds_cgroup_to_n_and_frees_on_close(net: Net, pins: str, cg: str) -> None:
    dest = f"{net.server_v4}/32:{PORT}"
    table = CapTable()
    table.add(cg, parse_dest(dest), 3)
    child = os.path.join(cg, "child")
    os.mkdir(child)
    with client(net, cg) as inside, client(net, None) as outside, client(net, child) as kid:
        got = inside.open(net.server_v4, PORT, 6)
        assert got == ["ok"] * 3 + ["EPERM"] * 3, f"expected 3 ok then 3 EPERM, got {got}"
        first = inside.opened()
        cap = the_cap(table, cg, dest)
        assert (cap.streams, cap.refused) == (3, 3), f"expected 3 streams, 3 refused, got {cap}"

        got = outside.open(net.server_v4, PORT, 6)
        assert got == ["ok"] * 6, f"a process outside the cgroup was limited: {got}"
        got = inside.open(net.server_v4, OTHER_PORT, 2)
        assert got == ["ok"] * 2, f"another port is not capped, got {got}"
        got = kid.open(net.server_v4, PORT, 1)
        assert got == ["EPERM"], f"child cgroup: expected EPERM under its parent's cap, got {got}"

        inside.close(first[:2])
        wait_value(lambda: the_cap(table, cg, dest).streams, 1, "streams after closing 2")
        got = inside.open(net.server_v4, PORT, 3)
        assert got == ["ok", "ok", "EPERM"], f"after closing 2: expected ok, ok, EPERM, got {got}"
        inside.close(inside.opened()[:1])
        wait_value(lambda: the_cap(table, cg, dest).streams, 2, "streams after closing 1")
        got = kid.open(net.server_v4, PORT, 2)
        assert got == ["ok", "EPERM"], f"child cgroup: expected ok, EPERM, got {got}"
        cap = the_cap(table, cg, dest)
        assert (cap.streams, cap.refused) == (3, 6), f"expected 3 streams, 6 refused, got {cap}"
    wait_value(lambda: the_cap(table, cg, dest).streams, 0, "streams after the processes exit")


def test_burst_of_1000_connects_lets_exactly_n_through(net: Net, pins: str, cg: str) -> None:
    n, procs, each = 25, 8, 125
    dest = f"{net.server_v4}/32"
    table = CapTable()
    table.add(cg, parse_dest(dest), n)
    bursts = [spawn([sys.executable, "-c", BURST, net.server_v4, str(PORT), str(each)],
                    cgroup_path=cg, netns=net.pair.sender, stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE, text=True) for _ in range(procs)]
    try:
        for b in bursts:
            assert read_line(b, 20, "burst client") == "ready"
        for b in bursts:  # as close together as we can: all wait on stdin
            assert b.stdin is not None
            b.stdin.write("go\n")
            b.stdin.flush()
        totals = {"ok": 0, "EPERM": 0, "other": 0}
        for b in bursts:
            for kv in read_line(b, 30, "burst client").split():
                key, value = kv.split("=")
                totals[key] += int(value)
        assert totals == {"ok": n, "EPERM": procs * each - n, "other": 0}, (
            f"expected {n} through and {procs * each - n} refused, got {totals}")
        cap = the_cap(table, cg, dest)
        assert (cap.streams, cap.refused) == (n, procs * each - n), (
            f"expected {n} streams and {procs * each - n} refused, got {cap}")
    finally:
        for b in bursts:
            stop(b)  # type: ignore[arg-type]
    wait_value(lambda: the_cap(table, cg, dest).streams, 0, "streams after the burst exits")


def test_kill_9_returns_counts_to_zero(net: Net, pins: str, cg: str) -> None:
    dest = "198.18.0.0/15"
    table = CapTable()
    table.add(cg, parse_dest(dest), 20)
    c = Client(net, cg)
    try:
        assert c.open(net.server_v4, PORT, 5) == ["ok"] * 5
        assert c.open(HOLE, PORT, 3, "nb") == ["EINPROGRESS"] * 3  # stuck in SYN_SENT
        assert c.open(UNREACHABLE, PORT, 2) == ["EHOSTUNREACH"] * 2  # never left CLOSE
        cap = the_cap(table, cg, dest)
        assert cap.streams == 10, f"expected 10 streams (5 + 3 + 2), got {cap}"
        c.proc.kill()
        c.proc.wait(timeout=10)
        wait_value(lambda: the_cap(table, cg, dest).streams, 0, "streams after kill -9")
        cap = the_cap(table, cg, dest)
        assert cap.released == cap.charged == 10, f"expected 10 charged and released, got {cap}"
    finally:
        stop(c.proc)  # type: ignore[arg-type]


def test_every_way_a_stream_ends_counts_down_once(net: Net, pins: str, cg: str) -> None:
    dest = "198.18.0.0/15"
    table = CapTable()
    table.add(cg, parse_dest(dest), 20)

    def streams() -> int:
        return the_cap(table, cg, dest).streams

    with client(net, cg) as c:
        # Reset by the peer (nothing listens): counted down, socket still open.
        assert c.open(net.server_v4, CLOSED_PORT, 2) == ["ECONNREFUSED"] * 2
        wait_value(streams, 0, "streams after RST")
        # Handshake timed out: counted down, socket still open.
        assert c.open(HOLE, PORT, 1, "uto=300") == ["ETIMEDOUT"]
        wait_value(streams, 0, "streams after a handshake timeout")
        # Failed before SYN_SENT: stays counted until closed; trying again on
        # the same socket does not count it twice.
        assert c.open(UNREACHABLE, PORT, 1) == ["EHOSTUNREACH"]
        failed = c.last[0][0]
        assert streams() == 1, f"expected the failed socket counted once, got {streams()}"
        assert c.ask(f"retry {failed} {UNREACHABLE} {PORT}")[0][1] == "EHOSTUNREACH"
        assert streams() == 1, f"connect() again on one socket: expected 1, got {streams()}"
        c.close([failed])
        wait_value(streams, 0, "streams after closing the failed socket")
        # Normal close after data-less life, both sides.
        assert c.open(net.server_v4, PORT, 4) == ["ok"] * 4
        assert streams() == 4
        c.close("all")
        wait_value(streams, 0, "streams after close")
    cap = the_cap(table, cg, dest)
    assert cap.charged == cap.released == 9, f"expected 9 charged, 9 released, got {cap}"


def test_existing_streams_are_counted_when_the_cap_is_set(net: Net, pins: str, cg: str) -> None:
    dest = f"{net.server_v4}/32:{PORT}"
    table = CapTable()
    with client(net, cg) as c:
        assert c.open(net.server_v4, PORT, 5) == ["ok"] * 5
        early = c.opened()
        cap = table.add(cg, parse_dest(dest), 3)
        assert (cap.streams, cap.seeded) == (5, 5), f"expected 5 seeded streams, got {cap}"
        assert c.open(net.server_v4, PORT, 1) == ["EPERM"], "over the cap already"
        c.close(early[:3])
        wait_value(lambda: the_cap(table, cg, dest).streams, 2, "streams after closing 3")
        assert c.open(net.server_v4, PORT, 2) == ["ok", "EPERM"]


def test_nested_caps_refuse_without_leaking_charges(net: Net, pins: str, cg: str) -> None:
    dest = f"{net.server_v4}/32"
    child = os.path.join(cg, "child")
    os.mkdir(child)
    table = CapTable()
    table.add(cg, parse_dest(dest), 2)
    table.add(child, parse_dest(dest), 3)
    with client(net, child) as kid:
        got = kid.open(net.server_v4, PORT, 4)
        assert got == ["ok", "ok", "EPERM", "EPERM"], f"parent cap of 2 must bind: {got}"
        parent, inner = the_cap(table, cg, dest), the_cap(table, child, dest)
        assert (parent.streams, parent.refused) == (2, 2), f"parent: {parent}"
        assert (inner.streams, inner.refused) == (2, 0), (
            f"child: expected 2 streams (refused connects rolled back), got {inner}")
    table.remove(child, parse_dest(dest))
    table.remove(cg, parse_dest(dest))
    assert not os.path.exists(pins), f"pins left after the last rm: {os.listdir(pins)}"


def test_ipv6_and_mapped_ipv4(net: Net, pins: str, cg: str) -> None:
    table = CapTable()
    table.add(cg, parse_dest(f"[fd00:7462::/64]:{PORT}"), 2)
    table.add(cg, parse_dest(f"{net.server_v4}/32"), 1)
    with client(net, cg) as c:
        got = c.open(net.server_v6, PORT, 4)
        assert got == ["ok", "ok", "EPERM", "EPERM"], f"IPv6 cap of 2: {got}"
        assert c.open(net.server_v6, OTHER_PORT, 2) == ["ok"] * 2, "other port not capped"
        got = c.open(f"::ffff:{net.server_v4}", PORT, 2)
        assert got == ["ok", "EPERM"], f"IPv4-mapped on an IPv6 socket: IPv4 cap of 1, got {got}"
        assert c.open(net.server_v4, OTHER_PORT, 1) == ["EPERM"]
        v6 = the_cap(table, cg, f"[fd00:7462::/64]:{PORT}")
        assert (v6.streams, v6.refused) == (2, 2), f"IPv6 cap counters: {v6}"


def tamebpf(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tamebpf", *argv], capture_output=True,
                          text=True, timeout=60, env=env)


def test_caps_outlive_the_process_and_rm_removes_everything(
        net: Net, pins: str, cg: str) -> None:
    dest = f"{net.server_v4}/32:{PORT}"
    res = tamebpf("cap", "set", "--cgroup", cg, "--dest", dest, "--max-streams", "2")
    assert res.returncode == 0, f"cap set failed: {res.stderr}"
    with client(net, cg) as c:
        assert c.open(net.server_v4, PORT, 3) == ["ok", "ok", "EPERM"], "enforced after exit"
        res = tamebpf("cap", "list", "--json")
        assert res.returncode == 0, res.stderr
        caps = json.loads(res.stdout)
        assert [(x["dest"], x["max_streams"], x["streams"], x["refused"]) for x in caps] == [
            (dest, 2, 2, 1)], f"cap list from a new process: {caps}"
        res = tamebpf("cap", "list")
        assert res.returncode == 0 and dest in res.stdout, res.stdout
        res = tamebpf("cap", "rm", "--cgroup", cg, "--dest", dest)
        assert res.returncode == 0, f"cap rm failed: {res.stderr}"
        assert not os.path.exists(pins), f"pins left after the last rm: {os.listdir(pins)}"
        tree = sh("bpftool", "cgroup", "tree", cg)
        assert "tb_cap" not in tree, f"programs still attached after rm:\n{tree}"
        assert c.open(net.server_v4, PORT, 3) == ["ok"] * 3, "no cap after rm"

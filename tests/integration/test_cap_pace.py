"""Pace mode of caps (issue 16): real cgroups, real loopback-free veth sockets.

Only idle sockets here (no bulk data): the rate a stream gets when it opens.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tamebpf.cap.spec import parse_dest
from tamebpf.cap.table import PACE_NO_LIMIT, CapTable
from tests.integration.kernel_fixtures import PORT, Net, free_port, read_line, spawn, stop, the_cap

pytestmark = pytest.mark.root

SO_MAX_PACING_RATE = 47  # asm-generic/socket.h; Python's socket module lacks it

PACED = r"""
import json, socket, struct, sys
host, port, k = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
socks, out = [], []
for _ in range(k):
    s = socket.socket()
    s.settimeout(10)
    try:
        s.connect((host, port))
        out.append(s.getsockopt(socket.SOL_SOCKET, 47))  # SO_MAX_PACING_RATE
    except OSError as err:
        out.append(err.strerror)
    socks.append(s)
print(json.dumps(out), flush=True)
# Each line on stdin: the rates again, in full (8 bytes: unlimited is ~0UL).
while sys.stdin.readline().strip():
    print(json.dumps([struct.unpack("Q", s.getsockopt(socket.SOL_SOCKET, 47, 8))[0]
                      for s in socks]), flush=True)
"""
UNLIMITED = 2**64 - 1  # sk_max_pacing_rate when nothing limits it


def open_paced(pair: Net, cg_path: str, k: int) -> tuple[subprocess.Popen[str], list[object]]:
    proc = spawn([sys.executable, "-c", PACED, pair.server_v4, str(PORT), str(k)],
                 cgroup_path=cg_path, netns=pair.pair.sender,
                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    return proc, json.loads(read_line(proc, 20, "paced client"))


def test_pace_never_refuses_and_sets_the_opening_share(net: Net, pins: str, cg: str) -> None:
    dest = f"{net.server_v4}/32:{PORT}"
    rate = 12_500_000  # 100 Mbit/s in bytes/s
    table = CapTable()
    table.add(cg, parse_dest(dest), PACE_NO_LIMIT, pace_bytes_per_s=rate)
    proc, got = open_paced(net, cg, 4)
    try:
        # idle sockets never check in: each opens at the share of the
        # streams open by then, itself included
        want = [rate // k for k in range(1, 5)]
        assert got == want, f"expected 4 connects paced at {want} B/s, got {got}"
        c = the_cap(table, cg, dest)
        assert (c.streams, c.refused) == (4, 0), f"expected 4 streams, none refused: {c}"
    finally:
        stop(proc)  # type: ignore[arg-type]


def test_cli_cap_set_mode_pace(net: Net, pins: str, cg: str,
                               capsys: pytest.CaptureFixture[str]) -> None:
    from tamebpf.cli import main
    dest = f"{net.server_v4}/32:{PORT}"
    code = main(["cap", "set", "--cgroup", cg, "--dest", dest, "--mode", "pace",
                 "--rate", "80M"])
    out = capsys.readouterr()
    assert code == 0, f"cap set --mode pace: exit {code}: {out.err}"
    proc, got = open_paced(net, cg, 3)
    try:
        want = [10_000_000 // k for k in range(1, 4)]  # 80 Mbit/s among those open
        assert got == want, f"expected 3 connects paced at {want} B/s, got {got}"
    finally:
        stop(proc)  # type: ignore[arg-type]


def test_list_shows_mode_and_target(net: Net, pins: str, cg: str) -> None:
    dest = f"{net.server_v4}/32:{PORT}"
    table = CapTable()
    cap = table.add(cg, parse_dest(dest), 5)
    assert (cap.mode, cap.rate_bytes_per_s) == ("refuse", 0), f"new cap: {cap}"
    other = f"{net.server_v4}/32:{PORT + 1}"
    paced = table.add(cg, parse_dest(other), PACE_NO_LIMIT, pace_bytes_per_s=1_000_000)
    assert (paced.mode, paced.rate_bytes_per_s) == ("pace", 1_000_000), f"pace cap: {paced}"
    c = the_cap(table, cg, other)
    assert (c.mode, c.rate_bytes_per_s) == ("pace", 1_000_000), f"as listed: {c}"


def ask(proc: subprocess.Popen[str], what: str) -> list[int]:
    assert proc.stdin is not None
    proc.stdin.write("again\n")
    proc.stdin.flush()
    return json.loads(read_line(proc, 10, what))  # type: ignore[no-any-return]


def test_rm_unpaces_the_streams_still_open(net: Net, pins: str, cg: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """cap rm of a pace cap: its open sockets send unpaced again, in the
    namespace they live in (not ours), and only the capped cgroup's."""
    from tamebpf.cli import main
    dest = f"{net.server_v4}/32:{PORT}"
    table = CapTable()
    table.add(cg, parse_dest(dest), PACE_NO_LIMIT, pace_bytes_per_s=5_000_000)
    proc, got = open_paced(net, cg, 2)
    bystander, _ = open_paced(net, "", 1)  # not in the cgroup: never paced
    try:
        want = [5_000_000, 2_500_000]  # the second opened beside the first
        assert got == want, f"expected 2 streams paced at {want} B/s, got {got}"
        assert ask(proc, "paced client") == want
        assert ask(bystander, "bystander") == [UNLIMITED]
        code = main(["cap", "rm", "--cgroup", cg, "--dest", dest])
        out = capsys.readouterr()
        assert code == 0, f"cap rm: exit {code}: {out.err}"
        assert "unpaced" in out.out, out.out
        after = ask(proc, "paced client")
        assert after == [UNLIMITED] * 2, f"expected unlimited pacing after cap rm, got {after}"
    finally:
        stop(proc)  # type: ignore[arg-type]
        stop(bystander)  # type: ignore[arg-type]


def test_paced_iperf3_gets_the_target_and_list_shows_it(
        net: Net, pins: str, cg: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Bulk data: iperf3 -P 4 in a cgroup paced at 40 Mbit/s over a veth that
    carries Gbit/s. It exits 0 (nothing refused), gets the target together,
    and `cap list` sees the cap's streams send at about that rate. The cap is
    set by a tamebpf process that is killed (-9) once it has said so: the
    pacing is pinned in the kernel, no process of ours holds it."""
    from tamebpf.cli import main
    port = free_port()
    target_mbit = 40.0
    server = spawn(["iperf3", "-s", "-1", "-p", str(port)], netns=net.pair.receiver,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = None
    try:
        time.sleep(0.5)
        setter = subprocess.Popen(
            [sys.executable, "-m", "tamebpf", "cap", "set", "--cgroup", cg, "--dest",
             f"{net.server_v4}/32", "--mode", "pace", "--rate", f"{target_mbit:g}M"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert setter.stdout is not None
        said = setter.stdout.readline()
        setter.kill()
        assert "paced at 40 Mbit/s" in said, f"cap set said {said!r}: {setter.stderr.read()}"
        setter.wait(5)
        client = spawn(["iperf3", "-c", net.server_v4, "-p", str(port), "-P", "4", "-t", "6",
                        "-J"], cgroup_path=cg, netns=net.pair.sender, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
        time.sleep(3.0)
        capsys.readouterr()
        assert main(["cap", "list", "--json", "--window", "1"]) == 0
        live = json.loads(capsys.readouterr().out)[0]["live_mbit"]
        out, err = client.communicate(timeout=30)
        assert client.returncode == 0, f"iperf3 failed under a pace cap: {err.decode()[-300:]}"
        got = json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e6
        assert abs(got / target_mbit - 1) <= 0.15, (
            f"4 paced streams got {got:.1f} Mbit/s together, target {target_mbit}")
        assert abs(live / target_mbit - 1) <= 0.25, (
            f"cap list's live rate {live:.1f} Mbit/s, target {target_mbit}")
    finally:
        for proc in (client, server):
            if proc is not None:
                stop(proc)

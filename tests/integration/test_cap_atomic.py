"""Caps that never surprise (issue 30), against the real kernel: a plan goes
in whole or not at all, a kill -9 at any point leaves the old caps or the
new ones (and pins `cap list` describes exactly), the count stays exact
under a connect/close storm, and the cgroup v2 root is never capped by
accident."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from tamebpf.cap.spec import parse_dest
from tamebpf.cap.table import Add, CapTable
from tamebpf.kernel.cgroups import require_cgroup2
from tests.integration import kernel_fixtures as kf
from tests.integration.kernel_fixtures import Net, cgroup, read_line, sh, spawn, stop
from tests.integration.test_cap_cli import assert_refused, state, tamebpf

pytestmark = pytest.mark.root

MAPS = {"cap_rules", "cap_gen", "cap_counts", "cap_state", "cap_ids", "cap_socks",
        "cap_follow"}
CG_LINKS = ("c4", "c6", "rel", "pace")


def listed() -> list[tuple[str, str, int, str]]:
    res = tamebpf("cap", "list", "--json", "--window", "0")
    assert res.returncode == 0, res.stderr
    return sorted((c["cgroup"], c["dest"], c["max_streams"], c["mode"])
                  for c in json.loads(res.stdout))


def write_caps(path: str, cg: str, caps: list[tuple[str, int]]) -> None:
    with open(path, "w") as f:
        for dest, n in caps:
            f.write(f'[[cap]]\ncgroup = "{cg}"\ndest = "{dest}"\nmax_streams = {n}\n\n')


def test_apply_over_the_per_cgroup_limit_changes_nothing(
        pins: str, cg: str, tmp_path: object) -> None:
    """The issue's example: a cap of 3 in force; a file makes it 5 and adds
    16 destinations on the same cgroup (17 > 16). Today's code changed the
    3 to 5 and set 15 caps before it failed."""
    rel = "/" + os.path.basename(cg)
    res = tamebpf("cap", "set", "--cgroup", cg, "--dest", "192.0.2.1/32", "--max-streams", "3")
    assert res.returncode == 0, res.stderr
    before = state(pins, cg)
    path = os.path.join(str(tmp_path), "caps.toml")
    write_caps(path, cg, [("192.0.2.1/32", 5)] + [(f"198.18.0.{i}/32", 2) for i in range(16)])
    res = tamebpf("cap", "apply", path)
    assert_refused(res, 2, "would have 17 caps")
    assert "cap #" in res.stderr, res.stderr
    assert state(pins, cg) == before, "a refused plan changed the caps in force"
    assert listed() == [(rel, "192.0.2.1/32", 3, "refuse")]
    # The same limit met in the kernel (a plan the file alone cannot see):
    # nothing changes either.
    table = CapTable()
    table.commit([Add(cg, parse_dest(f"198.19.0.{i}/32"), 1) for i in range(15)])  # one load
    before = state(pins, cg)
    write_caps(path, cg, [("192.0.2.1/32", 5), ("198.18.0.1/32", 1), ("198.18.0.2/32", 1)])
    assert_refused(tamebpf("cap", "apply", path), 2, "would have")
    assert state(pins, cg) == before, "a plan over the limit changed the caps in force"


def test_set_the_root_cgroup_only_when_confirmed(pins: str) -> None:
    """An empty or '.' --cgroup used to resolve to the root: every process."""
    dest = ["--dest", "192.0.2.0/24", "--max-streams", "1000"]
    for bad, says in (("", "empty"), (".", "cgroup v2 root"), ("/", "--all-processes"),
                      ("//", "cgroup v2 root"), ("./", "cgroup v2 root")):
        assert_refused(tamebpf("cap", "set", "--cgroup", bad, *dest), 2, says)
        assert not os.path.exists(pins), f"--cgroup {bad!r} created pins"
    root_path = require_cgroup2()
    assert_refused(tamebpf("cap", "set", "--cgroup", root_path, *dest), 2, "cgroup v2 root")
    assert_refused(tamebpf("cap", "rm", "--cgroup", "", "--dest", "192.0.2.0/24"), 2, "empty")
    # Explicit and confirmed: allowed (a TEST-NET destination nobody uses).
    res = tamebpf("cap", "set", "--cgroup", "/", "--all-processes", *dest)
    try:
        assert res.returncode == 0, res.stderr
        assert listed() == [("/", "192.0.2.0/24", 1000, "refuse")]
    finally:
        res = tamebpf("cap", "rm", "--cgroup", "/", "--dest", "192.0.2.0/24")
    assert res.returncode == 0, res.stderr
    assert not os.path.exists(pins)


def expected_pins(pins: str, caps: list[tuple[str, str, int, str]]) -> tuple[set[str], set[str]]:
    """(pins there, pins the caps listed need)."""
    have = set(os.listdir(pins)) if os.path.isdir(pins) else set()
    if not caps:
        return have, set()
    table = CapTable()
    cgids = {c.cgroup_id for c in table.list()}
    need = MAPS | {"state"} | {f"cg{i}_{k}" for i in cgids for k in CG_LINKS}
    return have, need


# A cap command in a process of its own, imported and waiting: it runs the
# command line it reads on stdin (JSON) as `python -m tamebpf` would, so a
# kill lands in the command's own work, not in Python's start-up.
WAITING_COMMAND = r"""
import json, sys
from tamebpf.cli import main
print("ready", flush=True)
raise SystemExit(main(json.loads(sys.stdin.readline())))
"""


def test_kill_9_at_any_point_leaves_old_or_new(pins: str, tmp_path: object) -> None:
    """30 cap commands killed at random points of their run: `cap list`
    shows the caps before or after the command, never a mix, and afterwards
    the pins are exactly those of the caps listed (what the killed command
    left is removed by the next one, here `cap list` itself)."""
    rng = random.Random(30)
    path = os.path.join(str(tmp_path), "caps.toml")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with cgroup() as a, cgroup() as b:
        files = [
            [(a, "198.18.0.0/15", 4), (b, "198.18.0.0/15", 2), (a, "192.0.2.1/32", 1)],
            [(a, "198.18.0.0/15", 5), (b, "203.0.113.0/24", 3)],
            [(b, "198.18.0.0/15", 2)],
            [],
        ]

        def command(i: int) -> list[str]:
            kind = rng.choice(("set", "rm", "apply", "apply"))
            cg = rng.choice((a, b))
            if kind == "set":
                return ["set", "--cgroup", cg, "--dest", "192.0.2.7/32",
                        "--max-streams", str(i % 5 + 1)]
            if kind == "rm":
                return ["rm", "--cgroup", cg, "--dest", "192.0.2.7/32"]
            write_caps_file(path, rng.choice(files))
            return ["apply", "--prune", path]

        def waiting() -> subprocess.Popen[str]:
            return subprocess.Popen([sys.executable, "-c", WAITING_COMMAND],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, env=env, text=True)

        def go(proc: subprocess.Popen[str], argv: list[str]) -> None:
            assert read_line(proc, 60, "cap command") == "ready"
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(argv) + "\n")
            proc.stdin.flush()

        killed = 0
        proc = waiting()
        try:
            # The kill points: uniform over the run of the longest command
            # here (a file of 3 caps on 2 cgroups applied to none: maps
            # pinned, programs loaded and attached to both), measured on
            # this machine now, so they fall all along a command's work
            # (plan, load, stage, switch, tidy) whether the machine is fast
            # or loaded; some shorter commands finish first.
            write_caps_file(path, files[0])
            go(proc, ["cap", "apply", "--prune", path])
            started = time.monotonic()
            proc.wait(timeout=60)
            within = time.monotonic() - started
            assert proc.returncode == 0
            proc = waiting()
            deadline = time.monotonic() + 120
            before = listed()
            # At least 30 commands, and more (up to 60) until 10 were killed
            # midway: a command that ends before its kill point is checked
            # too, but only a kill shows a half-done one.
            for i in range(60):
                if time.monotonic() > deadline or (i >= 30 and killed >= 10):
                    break
                argv = ["cap", *command(i)]
                go(proc, argv)
                time.sleep(rng.uniform(0, within))
                if proc.poll() is None:
                    proc.send_signal(signal.SIGKILL)
                    killed += 1
                proc.wait(timeout=30)
                was_killed = proc.returncode == -signal.SIGKILL
                proc = waiting()  # the next one starts up while this one is checked
                after_kill = listed()
                have, need = expected_pins(pins, after_kill)
                assert have == need, (
                    f"after {argv} (killed: {was_killed}): pins "
                    f"{sorted(have)} but the caps listed {after_kill} need {sorted(need)}")
                check_counters_agree()
                # the command's own outcome, had it finished: run it again to know
                outcome = tamebpf(*argv)
                new = listed()
                assert after_kill in (before, new), (
                    f"{argv} killed: caps {after_kill} are neither the old {before} nor the "
                    f"new {new} ({outcome.stderr.strip()})")
                before = new
        finally:
            stop(proc)  # type: ignore[arg-type]
        assert killed >= 10, f"only {killed} commands were killed midway: tune the timing"
        for c in (a, b):  # leave nothing: remove what the last command set
            for cap in CapTable().list():
                if cap.cgroup == "/" + os.path.basename(c):
                    CapTable().remove(c, parse_dest(cap.dest))
    assert not os.path.exists(pins), f"pins left: {os.listdir(pins)}"


def write_caps_file(path: str, caps: list[tuple[str, str, int]]) -> None:
    with open(path, "w") as f:
        for c, d, n in caps:
            f.write(f'[[cap]]\ncgroup = "{c}"\ndest = "{d}"\nmax_streams = {n}\n')


def check_counters_agree() -> None:
    for cap in CapTable().list():
        assert cap.streams == cap.charged + cap.seeded - cap.released, cap


# 2,000 connect/close cycles; HOLD sockets stay open throughout.
STORM = r"""
import socket, sys
host, port, cycles, hold = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
held = [socket.create_connection((host, port), timeout=10) for _ in range(hold)]
print("holding", flush=True)
sys.stdin.readline()
for _ in range(cycles):
    s = socket.create_connection((host, port), timeout=10)
    s.close()
print("done", flush=True)
sys.stdin.readline()
"""
# Accepts and closes at once, as fast as it can: the storm never waits on
# a full accept queue (a client's FIN to a connection still queued there is
# retransmitted for up to minutes, and the socket counts until then).
STORM_SERVER = r"""
import socket, sys
lst = socket.socket()
lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
lst.bind(("0.0.0.0", int(sys.argv[1])))
lst.listen(4096)
print("ready", flush=True)
while True:
    lst.accept()[0].close()
"""
STORM_PORT = 5011


def storm_sockets(net: Net, port: int) -> str:
    """What a wrong count after the storm is made of: the sender's sockets
    to the port by state, and whether the receiver dropped handshakes."""
    states: dict[str, int] = {}
    for line in sh("ss", "-Htan", f"dport = :{port}", netns=net.pair.sender).splitlines():
        states[line.split()[0]] = states.get(line.split()[0], 0) + 1
    drops = sh("nstat", "-az", "TcpExtListenOverflows", "TcpExtListenDrops",
               netns=net.pair.receiver, check=False)
    progs = json.loads(sh("bpftool", "-j", "prog", "show", "name", "tb_cap_state", check=False)
                       or "[]")
    progs = progs if isinstance(progs, list) else [progs]
    misses = sum(p.get("recursion_misses", 0) for p in progs)
    return (f"sender sockets by state: {states}; receiver: {' '.join(drops.split())}; "
            f"tb_cap_state recursion misses: {misses}")


def test_storm_of_connects_keeps_the_count_exact(net: Net, pins: str, cg: str) -> None:
    """4 processes x 2,000 connect/close cycles, each holding 3 sockets open:
    afterwards STREAMS equals the sockets open (12), and charged - released
    agrees; after a kill -9 of the holders, 0."""
    procs, cycles, hold = 4, 2000, 3
    dest = f"{net.server_v4}/32:{STORM_PORT}"
    server = spawn([sys.executable, "-c", STORM_SERVER, str(STORM_PORT)],
                   netns=net.pair.receiver, stdout=subprocess.PIPE, text=True)
    table = CapTable()
    storms: list[subprocess.Popen[str]] = []
    try:
        assert read_line(server, 10, "storm server") == "ready"
        table.add(cg, parse_dest(dest), 1000)
        storms = [spawn([sys.executable, "-c", STORM, net.server_v4, str(STORM_PORT),
                         str(cycles), str(hold)], cgroup_path=cg, netns=net.pair.sender,
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                  for _ in range(procs)]
        for s in storms:
            assert read_line(s, 20, "storm") == "holding"
        for s in storms:
            assert s.stdin is not None
            s.stdin.write("go\n")
            s.stdin.flush()
        for s in storms:
            assert read_line(s, 120, "storm") == "done"
        try:
            kf.wait_value(lambda: kf.the_cap(table, cg, dest).streams, procs * hold,
                       "streams after the storm (the held sockets are open)", timeout=30)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{storm_sockets(net, STORM_PORT)}") from None
        cap = kf.the_cap(table, cg, dest)
        assert cap.charged == procs * (cycles + hold), cap
        assert cap.refused == 0, cap
    finally:
        for s in storms:
            stop(s)  # type: ignore[arg-type]
        stop(server)  # type: ignore[arg-type]
    kf.wait_value(lambda: kf.the_cap(table, cg, dest).streams, 0, "streams after kill -9")
    cap = kf.the_cap(table, cg, dest)
    assert cap.charged == cap.released == procs * (cycles + hold), cap


def test_caps_of_an_older_layout_are_named_and_left_alone(pins: str, cg: str) -> None:
    """Maps pinned by a tamebpf from before issue 30 (cap_rules keyed by the
    cgroup id alone) are neither reused nor torn down by `cap list`."""
    os.mkdir(pins)
    old = os.path.join(pins, "cap_rules")
    subprocess.run(["bpftool", "map", "create", old, "type", "hash", "key", "8", "value", "8",
                    "entries", "4", "name", "cap_rules"], check=True, timeout=30)
    for argv in (["list"], ["set", "--cgroup", cg, "--dest", "192.0.2.0/24",
                            "--max-streams", "2"]):
        res = tamebpf("cap", *argv)
        assert res.returncode == 1 and "older tamebpf" in res.stderr, (argv, res.stderr)
        assert os.listdir(pins) == ["cap_rules"], f"{argv} touched the old pins"

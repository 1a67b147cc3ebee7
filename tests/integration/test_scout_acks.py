"""A following cap's path capacity from its scout's ACKs (cap/scoutacks.py)
on the testbed's shaped path, path memory empty: under `tamebpf run` whose
pace cap holds the transfer well below the path (its first seconds' ACKs
are spaced at our own rate), also beside cross traffic, and under
`export`'s follow agent for a cap that could not follow (cap/plan.py's
"cannot follow its path yet"). The scout is the one stream the kernel
leaves unpaced; a window on its first ACKs alone gives the capacity,
stored as a passive entry, and the cap follows.
Each test uses its own path memory (conftest) and pin directory."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tamebpf.cap.book import FollowBook, FollowSpec
from tamebpf.cap.scoutacks import METHOD
from tamebpf.cap.spec import parse_dest
from tamebpf.cap.table import PACE_NO_LIMIT, CapTable
from tamebpf.common.units import pace_bytes_per_s
from tamebpf.paths.entry import PathKey
from tamebpf.paths.store import state_dir
from tamebpf_testbed import Testbed, iperf
from tests.integration import testbed_fixtures as tbfix
from tests.integration.kernel_fixtures import spawn, stop
from tests.integration.test_export_acks import (
    TAMEBPF,
    WINDOW_PROGRAMS,
    Programs,
    events,
    exporter,
    learned,
    watch,
)

pytestmark = pytest.mark.root
RATE, RTT, QUEUE = 20.0, 20.0, 25
CAPACITY = RATE * 1448 / 1514  # TCP goodput the bottleneck allows
HELD_MBPS = 8.0  # the pace cap's target: well below the path, so it binds
LIMIT = 0.3
# A run's transfer: its scout's one window is read about 6 s in (the path is
# chosen at the second 1-s step, when the flows have a rate; the follower,
# every 2 s, picks the scout at its second step and reads the window, 2 s
# long, at its third: runner/session.py, cap/scoutacks.py); twice that lets
# a loaded machine's steps run late.
TRANSFER_S = 12


@pytest.fixture(scope="module")
def tb() -> Iterator[Testbed]:
    with tbfix.running_testbed(rate_mbit=RATE, rtt_ms=RTT, queue_pkts=QUEUE, cc="cubic") as t:
        yield t


def test_run_held_by_its_cap_learns_the_capacity_from_its_scout(
        tb: Testbed, pins: str, tmp_path: Path) -> None:
    """iperf3 -P 4 under `run --rate 8M` on a 20 Mbit/s path: the cap holds
    the streams, so the first seconds' ACKs give nothing; the cap follows at
    once, and its scout's ACKs give the capacity."""
    server = iperf.start_server(tb, 5211)
    with tbfix.killed_on_exit(server):
        dst, ns = tb.addresses["receiver"], tb.namespaces["sender"]
        summary = tmp_path / "summary.json"
        res = subprocess.run(
            [*TAMEBPF, "run", "--netns", ns, "--rate", f"{HELD_MBPS:g}M", f"--json={summary}",
             "--", *iperf.client_argv(dst, 5211, 4, TRANSFER_S, "cubic", json_out=False)],
            capture_output=True, text=True, timeout=90)
    assert res.returncode == 0, res.stderr
    s = json.loads(summary.read_text())
    assert [x["dest"] for x in s["learned"]] == [dst], (
        f"nothing learned: {s['not_learned']}; {s['notes']}")
    got = s["learned"][0]
    assert got["capacity_method"] == METHOD, s
    assert abs(got["capacity_mbps"] / CAPACITY - 1) <= 0.10, (
        f"capacity from the scout's ACKs {got['capacity_mbps']:.2f} Mbit/s, the link gives "
        f"{CAPACITY:.2f}")
    assert CapTable("test").list() == [], "the run's caps are left"


def test_a_run_on_a_shared_path_learns_from_its_scout_or_holds_its_target(
        tb: Testbed, pins: str, tmp_path: Path) -> None:
    """The same run beside 2 CUBIC flows: the scout's first seconds unpaced
    give the link's capacity (within 10%: it gave 19.13 and 19.20 here), or
    no trusted one, and then the cap holds every stream at the target again
    and says so; never a share of the link taken for its capacity."""
    dst, ns = tb.addresses["receiver"], tb.namespaces["sender"]
    servers = [iperf.start_server(tb, p) for p in (5213, 5214)]
    cross = tb.popen("cross", iperf.client_argv(dst, 5214, 2, 120, "cubic", json_out=False),
                     stdout=subprocess.DEVNULL)
    with tbfix.killed_on_exit(*servers, cross):
        iperf.wait_flows(tb, "cross", 5214, 2, cross)
        summary = tmp_path / "summary.json"
        res = subprocess.run(
            [*TAMEBPF, "run", "--netns", ns, "--rate", f"{HELD_MBPS / 2:g}M",
             f"--json={summary}", "--",
             *iperf.client_argv(dst, 5213, 4, TRANSFER_S, "cubic", json_out=False)],
            capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    s = json.loads(summary.read_text())
    got = [x for x in s["learned"] if x["capacity_method"] == METHOD]
    if got:
        assert abs(got[0]["capacity_mbps"] / CAPACITY - 1) <= 0.10, s
    else:
        held = [n for n in s["notes"] if n.startswith("held at the target: the scout's ACKs")]
        assert held, f"neither a capacity nor the hold: {s['notes']}; {s['not_learned']}"
        assert len(held) == 1, f"the run went on following after the hold: {s['notes']}"
    assert CapTable("test").list() == [], "the run's caps are left"


@pytest.mark.long
def test_a_following_cap_with_no_capacity_gets_one_from_its_scout_and_follows(
        tb: Testbed, pins: str, cg: str) -> None:
    """A pace cap that follows its path, path memory empty (the case
    `cap set --follow` warns about): export's agent (by default: no
    --ack-sampling) samples the scout's ACKs, stores the capacity, detaches
    the window, and the cap follows."""
    dst, ns = tb.addresses["receiver"], tb.namespaces["sender"]
    key = PathKey(f"{dst}/32", ns, "cubic")
    table = CapTable("test")
    cap = table.add(cg, parse_dest(f"{dst}/32"), PACE_NO_LIMIT, pace_bytes_per_s(HELD_MBPS),
                    False)
    book = FollowBook(state_dir())
    server = iperf.start_server(tb, 5212)
    client = None
    try:
        book.put(FollowSpec(cap.cgroup, cap.dest, key, LIMIT, dst, time.time()))
        assert learned(key) is None
        client = spawn(iperf.client_argv(dst, 5212, 4, 90, "cubic", json_out=False),
                       cgroup_path=cg, netns=ns, stdout=subprocess.DEVNULL)
        with tbfix.killed_on_exit(server), exporter(ns, sampling=False) as (proc, err, _):
            programs = Programs(proc.pid)
            held = watch(programs, lambda: learned(key) is not None or proc.poll() is not None,
                         timeout=40)
            entry = learned(key)
            assert entry is not None, (
                f"no capacity learned; export said: {[e['msg'] for e in events(err)][-6:]}")
            time.sleep(0.5)  # the window is closed in the step that stored the entry
            after = programs.held()
            deadline = time.monotonic() + 45
            spec = book.find(cap.cgroup, cap.dest)
            while time.monotonic() < deadline and proc.poll() is None and \
                    (spec is None or not spec.change_count):
                time.sleep(1.0)
                spec = book.find(cap.cgroup, cap.dest)
            said = events(err)
    finally:
        if client is not None:
            stop(client)
        table.remove(cg, parse_dest(f"{dst}/32"))
    assert any(h >= WINDOW_PROGRAMS for h in held), (
        f"export never held the window's programs {WINDOW_PROGRAMS}: {held[-1:]}")
    assert not WINDOW_PROGRAMS & after, f"still held after the window: {after}"
    opened = [e for e in said if e.get("event") == "scout_ack_window"]
    assert opened and spec is not None and opened[0]["cookie"] == spec.scout_cookie, opened
    assert entry.source == "passive" and entry.capacity_method == METHOD, entry
    assert entry.capacity_mbps is not None
    assert abs(entry.capacity_mbps / CAPACITY - 1) <= 0.10, (
        f"capacity from the scout's ACKs {entry.capacity_mbps:.2f} Mbit/s, the link gives "
        f"{CAPACITY:.2f}")
    assert spec is not None and spec.change_count >= 1 and spec.target_mbps is not None, (
        f"the cap did not follow: {spec}; export said: {[e['msg'] for e in said][-6:]}")
    assert spec.note is None or "no capacity" not in spec.note, spec.note

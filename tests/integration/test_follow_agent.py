"""A pace cap that follows its path (docs/paths.md, "Caps that follow the
path"), end to end on the testbed: the agent (`tamebpf export`, its own
process) picks a scout among the cap's streams, the kernel leaves it
unpaced, and when the cross traffic drops from 8 CUBIC flows to 2 the
target rises and the competing flows read fewer. The capacity comes from a
path-memory entry as `advise --capacity` leaves it (the link's TCP goodput),
so no probe runs here; the accuracy against a fresh advise is `make
cap-follow-eval`'s (docs/cap.md)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tamebpf.cap.book import FollowBook, FollowSpec
from tamebpf.cap.spec import parse_dest
from tamebpf.cap.table import PACE_NO_LIMIT, CapTable
from tamebpf.estimate.capacity import tcp_goodput_mbps
from tamebpf.model import Probe, Settings, fit_capacity, predict
from tamebpf.paths.entry import FitData, PathEntry
from tamebpf.paths.store import STATE_DIR_ENV, PathStore
from tamebpf.paths.where import path_key
from tamebpf_testbed import Testbed, iperf
from tests.integration.kernel_fixtures import bpf_pin_dir, cgroup, iperf3_available
from tests.integration.testbed_fixtures import killed_on_exit, running_testbed

pytestmark = [pytest.mark.skipif(not iperf3_available(), reason="needs iperf3"), pytest.mark.long]

RATE, RTT, QUEUE = 60.0, 20.0, 100
LIMIT = 0.3
STREAMS = 8
PORT_EXTRA = iperf.PORT_CROSS + 10


def cross(tb: Testbed, port: int, n: int) -> subprocess.Popen[bytes]:
    proc = tb.popen("cross", iperf.client_argv(tb.addresses["receiver"], port, n, 600, "cubic",
                                               json_out=False),
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL)
    iperf.wait_flows(tb, "cross", port, n, proc)
    return proc


def capacity_entry(tb: Testbed, key: object) -> PathEntry:
    """What `advise --capacity` stores: the capacity fit on a 1-stream probe
    (its value does not matter here: the agent reads only the capacity)."""
    c = tcp_goodput_mbps(RATE, 1448, False)
    fit = fit_capacity([Probe(1, c / 9)], c)
    a = predict(fit, Settings(max_impact=LIMIT)).advice
    return PathEntry(key, time.time(), "--capacity", "settled",  # type: ignore[arg-type]
                     FitData("capacity", ((1, c / 9),), fit.model, fit.coeffs,
                             fit.evidence_limit, fit.capacity),
                     a.num_flows, a.max_nondisruptive_thru, a.cross_traffic_impact, LIMIT,
                     capacity_mbps=c, capacity_method="given", link_mbps=RATE,
                     host=tb.addresses["receiver"])


@contextmanager
def agent(state: str, netns: str) -> Iterator[subprocess.Popen[bytes]]:
    log = open(os.path.join(state, "agent.log"), "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, "-m", "tamebpf", "export", "--netns", netns,
                             "--listen", "off", "--jsonl", os.devnull, "--interval", "5"],
                            env={**os.environ, STATE_DIR_ENV: state},
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def agent_log(state: str) -> str:
    with open(os.path.join(state, "agent.log")) as f:
        return f.read()


def wait_spec(book: FollowBook, cgroup_rel: str, dest: str, until: float,
              ok: object) -> FollowSpec | None:
    spec = None
    while time.monotonic() < until:
        spec = book.find(cgroup_rel, dest)
        if spec is not None and ok(spec):  # type: ignore[operator]
            return spec
        time.sleep(1.0)
    return spec


def test_a_following_cap_reads_the_cross_traffic_from_its_scout() -> None:
    with tempfile.TemporaryDirectory(prefix="tamebpf-follow-") as state, \
            bpf_pin_dir() as pins, running_testbed(rate_mbit=RATE, rtt_ms=RTT,
                                                   queue_pkts=QUEUE, cc="cubic") as tb:
        os.environ["TAMEBPF_PIN_DIR"] = pins
        try:
            servers = [iperf.start_server(tb, p)
                       for p in (iperf.PORT_MAIN, iperf.PORT_CROSS, PORT_EXTRA)]
            base = cross(tb, iperf.PORT_CROSS, 2)
            extra = cross(tb, PORT_EXTRA, 6)
            recv = tb.addresses["receiver"]
            key = path_key(recv, tb.namespaces["sender"], "cubic")
            PathStore(state).put(capacity_entry(tb, key))
            book = FollowBook(state)
            dest = f"{recv}/32:{iperf.PORT_MAIN}"
            table = CapTable("test")
            with killed_on_exit(*servers, base, extra), cgroup() as cg:
                cap = table.add(cg, parse_dest(dest), PACE_NO_LIMIT, int(15e6 / 8), False)
                try:
                    book.put(FollowSpec(cap.cgroup, cap.dest, key, LIMIT, recv, time.time()))

                    def enter() -> None:
                        with open(os.path.join(cg, "cgroup.procs"), "w") as f:
                            f.write(str(os.getpid()))
                    transfer = tb.popen("sender", iperf.client_argv(
                        recv, iperf.PORT_MAIN, STREAMS, 200, "cubic", json_out=False),
                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL, preexec_fn=enter)
                    with killed_on_exit(transfer), agent(state, tb.namespaces["sender"]):
                        iperf.wait_flows(tb, "sender", iperf.PORT_MAIN, STREAMS, transfer)
                        eight = wait_spec(book, cap.cgroup, cap.dest, time.monotonic() + 60,
                                          lambda s: s.target_mbps is not None)
                        assert eight is not None and eight.target_mbps is not None, \
                            (eight, agent_log(state))
                        assert eight.scout_cookie is not None
                        got = table.follow(cap.id)
                        assert got is not None and got[0] == eight.scout_cookie
                        extra.kill()
                        extra.wait()
                        two = wait_spec(book, cap.cgroup, cap.dest, time.monotonic() + 70,
                                        lambda s: (s.target_mbps or 0) > 1.15 * (
                                            eight.target_mbps or 0))
                        assert two is not None and two.target_mbps is not None
                        assert two.target_mbps > 1.15 * eight.target_mbps, (eight, two)
                        assert two.change_count >= 1 and two.changes[-1].why
                        assert two.competing_flows is not None and eight.competing_flows \
                            is not None and two.competing_flows < eight.competing_flows
                    # the path's memory learned from the follow: a passive entry
                    newest = PathStore(state).newest(key)
                    assert newest is not None and newest.source == "passive"
                finally:
                    table.remove(cg, parse_dest(dest))
                assert table.follow(cap.id) is None
                tb.check()
        finally:
            os.environ.pop("TAMEBPF_PIN_DIR", None)

"""A site of two nodes sharing one impact budget through a real Prometheus.

The testbed's sender and sender2 are the nodes, behind one bottleneck,
each with its own `tamebpf export --netns NS --node NAME` and path memory;
Debian's Prometheus, started here with its own configuration and data,
scrapes both every SCRAPE_S, and a third target that the test controls
(node C: present with no demand, then publishing an absurd value). One
cross flow shares the bottleneck. In one run:

1. Node A and node B each run `iperf3 -P 8` under `run --site`, B starting
   10 s after A: within 30 s of B's start their pace targets add up to the
   site's advised rate within 10%, and the cross flow's loss against its
   goodput beside one stream of ours stays within the limit + 0.05.
2. Node C publishes streams -5: both nodes fall back to their local advice
   within 3 scrape intervals plus 5 s, with one line naming the value.
3. Node B is killed with -9 (its run, its transfer, its export): A takes
   back B's share within 3 scrape intervals after B's series went stale.
4. Prometheus stops: A falls back to its local advice within 3 scrape
   intervals plus 5 s, with one log line, and its streams stay paced.
5. Without --site, on the same path: the two nodes at their own advice
   take more from the cross flow (both figures are printed).
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tamebpf.common.errors import TamebpfError
from tamebpf_testbed import Testbed, iperf
from tests.integration import testbed_fixtures as tbfix
from tests.integration.kernel_fixtures import free_port, wait_for
from tests.integration.test_export import exporter, prometheus

pytestmark = pytest.mark.root

TAMEBPF = [sys.executable, "-m", "tamebpf"]
RATE, RTT, QUEUE = 40.0, 20.0, 50
MAX_IMPACT = 0.10
SCRAPE_S = 2.0
# The cross flow's goodput is read over this long: a CUBIC flow's share of
# a 20-ms path varies by a tenth between 5-s windows.
WINDOW_S = 10.0
# Long enough for a CUBIC flow on this path to regrow its window after many
# streams beside it took it down.
RECOVER_S = 10.0
PORT_A, PORT_B = iperf.PORT_MAIN, 5209
DEST = "198.18.3.0/24"


class NodeC:
    """A scrape target the test controls: node C with no demand, until
    `absurd` makes it publish a stream count no node can have."""

    def __init__(self) -> None:
        self.absurd = False
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server name
                body = 'tamebpf_build_info{node="C",version="test"} 1\n'
                if outer.absurd:
                    body += (f'tamebpf_site_path_streams{{node="C",dest="{DEST}",'
                             'direction="send"} -5\n')
                data = body.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.target = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> NodeC:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


class Node:
    """One node of the site: its namespace, state directory, export."""

    def __init__(self, tb: Testbed, name: str, role: str, port: int, state: str) -> None:
        self.tb, self.name, self.role, self.port, self.state = tb, name, role, port, state
        self.listen = f"127.0.0.1:{free_port()}"
        self.runs: list[tuple[subprocess.Popen[str], Path]] = []

    @property
    def netns(self) -> str:
        return self.tb.namespaces[self.role]

    def advise(self) -> dict[str, Any]:
        res = subprocess.run(
            [*TAMEBPF, "advise", f"{self.tb.addresses['receiver']}:{self.port}", "--netns",
             self.netns, "--max-impact", f"{MAX_IMPACT:.0%}", "--congestion", "cubic",
             "--json", "--state-dir", self.state],
            capture_output=True, text=True, timeout=90)
        assert res.returncode == 0, res.stderr
        out: dict[str, Any] = json.loads(res.stdout)
        return out

    def run(self, seconds: int, site: str | None, log: Path) -> subprocess.Popen[str]:
        argv = [*TAMEBPF, "run", "--netns", self.netns, "--state-dir", self.state,
                "--max-impact", f"{MAX_IMPACT:.0%}", "--no-learn", "--log-format", "json",
                "--log-level", "debug", "--node", self.name, "--json",
                *(["--site", site] if site else []), "--",
                *iperf.client_argv(self.tb.addresses["receiver"], self.port, 8, seconds,
                                   "cubic", json_out=False)]
        err = open(log, "w")  # noqa: SIM115 - closed with the run, in stop_runs
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, text=True)
        err.close()
        self.runs.append((proc, log))
        return proc


def events(log: Path, event: str) -> list[dict[str, Any]]:
    out = []
    for line in log.read_text().splitlines():
        with contextlib.suppress(ValueError):
            rec = json.loads(line)
            if isinstance(rec, dict) and rec.get("event") == event:
                out.append(rec)
    return out


def site_view(url: str) -> dict[str, Any] | None:
    res = subprocess.run([*TAMEBPF, "site", "--site", url, "--json", "--max-impact",
                          f"{MAX_IMPACT:.0%}"], capture_output=True, text=True, timeout=30)
    if res.returncode != 0:
        return None
    paths = [p for p in json.loads(res.stdout)["paths"]
             if p["dest"] == DEST and p["direction"] == "send"]
    return paths[0] if paths else None


def targets_add_up(url: str) -> tuple[bool, str]:
    """Both nodes' pace targets sum to the site's budget within 10%."""
    p = site_view(url)
    if p is None or p["budget"] is None:
        return False, f"no budget yet: {p}"
    targets = {n["node"]: n["pace_target_mbps"] for n in p["nodes"]
               if n["pace_target_mbps"] is not None}
    total, budget = sum(targets.values()), p["budget"]["mbps"]
    ok = set(targets) >= {"A", "B"} and abs(total - budget) <= 0.10 * budget
    return ok, f"targets {targets} sum {total:.1f} against the budget {budget:.1f} Mbit/s"


def cross_impact(tb: Testbed, base: float, seconds: float = WINDOW_S) -> tuple[float, float]:
    """The cross flow's goodput over the next seconds, and its loss against base."""
    got = iperf.cross_rate(tb, seconds)
    return got, 1 - got / base


@contextlib.contextmanager
def stopped_at_exit(nodes: list[Node]) -> Iterator[None]:
    try:
        yield
    finally:
        for node in nodes:
            for proc, _ in node.runs:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for proc, _ in node.runs:
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        # A run killed with -9 leaves its cgroup and caps to the next
        # command that reads the cap table (docs/run.md).
        subprocess.run([*TAMEBPF, "cap", "list"], capture_output=True, timeout=30)


def kill_node(node: Node, export: subprocess.Popen[bytes]) -> None:
    """kill -9 of the node's run, of its transfer (run's child) and of its
    export, all at once."""
    proc, _ = node.runs[-1]
    children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                              text=True).stdout.split()
    for pid in [proc.pid, export.pid, *map(int, children)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=10)
    export.wait(timeout=10)


def stop_prometheus(url: str) -> None:
    """SIGTERM to the Prometheus this test started (its context waits for it)."""
    port = url.rsplit(":", 1)[1]
    pids = subprocess.run(["pgrep", "-f", f"web.listen-address=127.0.0.1:{port}"],
                          capture_output=True, text=True).stdout.split()
    assert pids, f"no Prometheus on port {port}"
    for pid in pids:
        os.kill(int(pid), signal.SIGTERM)


def ours_at_once(a: Node, b: Node, tb: Testbed, base: float, tmp: Path) -> float:
    """Both nodes under run without --site, 8 streams each: the cross flow's loss."""
    for node in (a, b):
        node.run(int(WINDOW_S) + 12, None, tmp / f"{node.name}-alone.log")
    time.sleep(8)
    _, impact = cross_impact(tb, base)
    for proc, _ in (a.runs[-1], b.runs[-1]):
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
    for port in (a.port, b.port):
        wait_for(lambda port=port: iperf.server_idle(tb, port), 15, f"server {port} idle")
    return impact


def test_two_nodes_share_one_budget_and_fall_back_on_faults(tmp_path: Path, pins: str) -> None:
    # pins: the runs' caps in a private table, never the host's.
    with tbfix.running_testbed(rate_mbit=RATE, rtt_ms=RTT, queue_pkts=QUEUE, cc="cubic",
                               senders=2) as tb, NodeC() as c, \
            tempfile.TemporaryDirectory(prefix="tamebpf-site-") as tmp:
        a = Node(tb, "A", "sender", PORT_A, os.path.join(tmp, "a"))
        b = Node(tb, "B", "sender2", PORT_B, os.path.join(tmp, "b"))
        servers = [iperf.start_server(tb, p) for p in (PORT_A, PORT_B, iperf.PORT_CROSS)]
        with tbfix.killed_on_exit(*servers), \
                prometheus([a.listen, b.listen, c.target], interval_s=SCRAPE_S) as prom, \
                exporter("--netns", a.netns, "--node", "A", "--state-dir", a.state,
                         "--no-learn", listen=a.listen), \
                exporter("--netns", b.netns, "--node", "B", "--state-dir", b.state,
                         "--no-learn", listen=b.listen) as (b_export, _), \
                stopped_at_exit([a, b]):
            cross = tb.popen("cross", iperf.client_argv(tb.addresses["receiver"],
                                                        iperf.PORT_CROSS, 1, 600, "cubic",
                                                        json_out=False),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            with tbfix.killed_on_exit(cross):
                iperf.wait_past_slow_start(tb, "cross", iperf.PORT_CROSS, 1, cross)
                # Each node's path memory: a settled advise beside the cross
                # flow (a quick one's rate varies too much to hold a budget
                # to). B's waits for the cross flow to regrow its window
                # after A's 10-stream probe: probed at once, B's one stream
                # found it short and took more.
                local = a.advise()["advice"]["max_nondisruptive_thru_mbps"]
                time.sleep(RECOVER_S)
                print(f"local advice: A {local:.1f} Mbit/s, "
                      f"B {b.advise()['advice']['max_nondisruptive_thru_mbps']:.1f}")
                # The baseline: the cross flow beside one unpaced stream of ours.
                one = tb.popen("sender", iperf.client_argv(tb.addresses["receiver"], PORT_A,
                                                           1, 30, "cubic", json_out=False),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                with tbfix.killed_on_exit(one):
                    iperf.wait_flows(tb, "sender", PORT_A, 1, one)
                    time.sleep(3)
                    base = iperf.cross_rate(tb, WINDOW_S)
                wait_for(lambda: iperf.server_idle(tb, PORT_A), 15, "A's server idle")

                # 5 (first: it needs no Prometheus). Without --site.
                impact_alone = ours_at_once(a, b, tb, base, tmp_path)

                # 1. Both nodes under run --site, B 10 s after A.
                a_run = a.run(150, prom, tmp_path / "a.log")
                time.sleep(10)
                b_start = time.monotonic()
                b.run(150, prom, tmp_path / "b.log")
                msgs: list[str] = []

                def shared() -> bool:
                    ok, msg = targets_add_up(prom)
                    msgs.append(msg)
                    return ok
                try:
                    wait_for(shared, 30, "the nodes' targets to add up to the site's budget",
                             step=1.0)
                except TamebpfError:
                    pytest.fail(f"30 s after B started: {msgs[-1] if msgs else 'no view'}")
                took = time.monotonic() - b_start
                time.sleep(SCRAPE_S)
                got, impact_site = cross_impact(tb, base)
                print(f"site: targets added up {took:.1f} s after B started ({msgs[-1]}); "
                      f"cross flow {base:.2f} Mbit/s beside one stream, {got:.2f} beside the "
                      f"site, loss {impact_site:.3f}; without --site: loss {impact_alone:.3f}")
                assert impact_site <= MAX_IMPACT + 0.05, (
                    f"with --site the cross flow lost {impact_site:.3f} of its {base:.2f} "
                    f"Mbit/s, over the limit {MAX_IMPACT} + 0.05")
                assert impact_alone > impact_site, (
                    f"without --site the cross flow lost {impact_alone:.3f}, with it "
                    f"{impact_site:.3f}: the site's budget took nothing off")

                # 2. An absurd value: both nodes back to their local advice.
                c.absurd = True
                t0 = time.monotonic()
                for node in (a, b):
                    log = node.runs[-1][1]
                    wait_for(lambda log=log: any("-5.0" in e["msg"] for e in
                                                 events(log, "site_fallback")),
                             3 * SCRAPE_S + 5, f"node {node.name} to fall back")
                print(f"absurd value: both fell back in {time.monotonic() - t0:.1f} s")
                c.absurd = False
                wait_for(lambda: targets_add_up(prom)[0], 20, "the shares back", step=1.0)

                # 3. Node B killed with -9: A takes back its share.
                kill_node(b, b_export)
                killed = time.monotonic()

                def alone() -> bool:
                    last = events(tmp_path / "a.log", "site_target")
                    return bool(last) and last[-1].get("nodes") == ["A"]
                # Its series go stale at its next failed scrape (one interval).
                wait_for(alone, SCRAPE_S + 3 * SCRAPE_S + 2, "A to take back B's share")
                print(f"B killed: A alone after {time.monotonic() - killed:.1f} s")

                # 4. Prometheus stops: A falls back, with one line.
                before = len(events(tmp_path / "a.log", "site_fallback"))
                stop_prometheus(prom)
                stopped = time.monotonic()
                wait_for(lambda: len(events(tmp_path / "a.log", "site_fallback")) > before,
                         3 * SCRAPE_S + 5, "A to fall back without Prometheus")
                print(f"Prometheus stopped: A fell back after {time.monotonic() - stopped:.1f} s")
                time.sleep(2 * SCRAPE_S)
                said = events(tmp_path / "a.log", "site_fallback")[before:]
                assert len(said) == 1, [e["msg"] for e in said]
                assert a_run.poll() is None, "A's run ended"
                targets = events(tmp_path / "a.log", "site_target")
                assert targets[-1]["target_mbps"] == pytest.approx(local, rel=0.01), (
                    f"A's target {targets[-1]['target_mbps']:.1f}, not its local advice "
                    f"{local:.1f}")

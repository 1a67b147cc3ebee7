"""Path memory on the testbed: a second `advise` for the same path within
--max-age answers from memory, at once, and sends nothing (issue 32)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tamebpf.model import Settings
from tamebpf.paths.recall import recall
from tamebpf.paths.remote import fetch
from tamebpf.paths.store import PathStore, state_dir
from tamebpf_testbed import Testbed, iperf
from tests.integration import testbed_fixtures as tbfix
from tests.integration.test_export import exporter, loopback_target, prometheus, query
from tests.unit.paths.test_paths_store import an_entry

pytestmark = pytest.mark.root

RATE, RTT, QUEUE = 20.0, 20.0, 25


def tamebpf(*argv: str) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "tamebpf", *argv], capture_output=True,
                         text=True, timeout=90)
    return res, time.monotonic() - start


def advise(tb: Testbed, *extra: str) -> tuple[subprocess.CompletedProcess[str], float]:
    return tamebpf("advise", f"{tb.addresses['receiver']}:5201", "--max-impact", "10%",
                   "--netns", tb.namespaces["sender"], "--congestion", "cubic", *extra)


def test_a_second_advise_answers_from_memory_and_sends_nothing() -> None:
    with tbfix.running_testbed(rate_mbit=RATE, rtt_ms=RTT, queue_pkts=QUEUE, cc="cubic") as tb:
        server = iperf.start_server(tb, 5201)
        with tbfix.killed_on_exit(server):
            before = tb.tx_packets()
            res, _ = advise(tb, "--quick", "--json")
            assert res.returncode == 0, res.stderr
            probed = json.loads(res.stdout)
            assert probed["from_memory"] is False
            sent = tb.tx_packets() - before
            assert sent > 1000, f"the probes sent only {sent} packets"

            before = tb.settled_tx_packets()  # the probes' last FINs and ACKs are out
            res, took = advise(tb, "--quick", "--json")
            assert res.returncode == 0, res.stderr
            # A probe sends thousands; the link itself may send a stray
            # neighbour-discovery packet meanwhile, which is not ours.
            stray = tb.tx_packets() - before
            assert stray <= 3, f"an answer from memory sent {stray} packets"
            assert took < 1.0, f"the answer from memory took {took:.2f} s"
            memo = json.loads(res.stdout)
            assert memo["from_memory"] is True
            assert memo["memory"]["source"] == "probe" and memo["memory"]["probes"] == "quick"
            assert 0 <= memo["memory"]["age_s"] < 60
            assert memo["advice"]["num_flows"] == probed["advice"]["num_flows"]
            assert memo["advice"]["max_nondisruptive_thru_mbps"] == pytest.approx(
                probed["advice"]["max_nondisruptive_thru_mbps"], rel=1e-9)
            for a, b in zip(memo["curve"], probed["curve"], strict=True):
                assert a["streams"] == b["streams"]
                assert a["throughput_mbps"] == pytest.approx(b["throughput_mbps"], rel=1e-9)
                assert a["impact"] == pytest.approx(b["impact"], rel=1e-9, abs=1e-12)

            # The text says where the answer came from; the ADVICE line is
            # the one a probed advice prints.
            res, took = advise(tb, "--quick")
            assert res.returncode == 0 and took < 1.0, (res.stderr, took)
            assert "from memory" in res.stdout and "nothing was sent" in res.stdout
            assert f"ADVICE: {probed['advice']['num_flows']} stream" in res.stdout

            # A default advise waits for settled probes: a quick entry does
            # not answer it. Checked with --max-age 0 to keep the test short:
            # an entry older than --max-age is not used either.
            iperf.wait_for(lambda: iperf.server_idle(tb, 5201), 30.0, "the iperf3 server")
            before = tb.tx_packets()
            res, _ = advise(tb, "--quick", "--json", "--max-age", "0")
            assert res.returncode == 0, res.stderr
            assert json.loads(res.stdout)["from_memory"] is False
            assert tb.tx_packets() - before > 1000

            listed, _ = tamebpf("paths", "--json")
            assert listed.returncode == 0, listed.stderr
            paths = json.loads(listed.stdout)["paths"]
            assert [(p["dest"], p["netns"], p["congestion"]) for p in paths] == [
                (f"{tb.addresses['receiver']}/32", tb.namespaces["sender"], "cubic")]
            assert os.environ["TAMEBPF_STATE_DIR"] == json.loads(listed.stdout)["state_dir"]

            gone, _ = tamebpf("paths", "forget", "--dest", tb.addresses["receiver"])
            assert gone.returncode == 0 and "forgot 2 entries" in gone.stdout, gone
            # Forgotten, memory answers no more. Asked with the server
            # stopped, so that no probe has to run to show it: an entry left
            # behind would answer (exit 0, from memory); none leaves advise
            # no answer (exit 3, naming memory).
            server.kill()
            server.wait()
            res, _ = advise(tb, "--quick", "--json")
            assert res.returncode == 3 and "path memory has no entry for that path" in res.stderr, (
                res.returncode, res.stdout, res.stderr)


# Passive learning: a path with cross traffic the transfers share, so that
# the goodput depends on the stream count (about n / (n + 2) of the link).
P_RATE, P_RTT, P_QUEUE, CROSS = 40.0, 30.0, 50, 2
PHASE_S = 16  # a settled window (paths/pool.MIN_WINDOW_S, 15 s) at each count
CHECK_S = 10  # the measured run that checks the fit (after its omitted second)


def iperf_mbps(proc: subprocess.Popen[bytes]) -> float:
    out, _ = proc.communicate(timeout=PHASE_S + 30)
    report: dict[str, Any] = json.loads(out)
    return float(report["end"]["sum_received"]["bits_per_second"]) / 1e6


@pytest.mark.long
def test_transfers_at_two_stream_counts_teach_a_fit_that_predicts_a_third(
        tmp_path: Path) -> None:
    """No probes: `export` sees an iperf3 transfer at 2 streams, then at 8,
    and path memory gets a passive fit whose goodput at 4 streams is within
    15% of a measured 4-stream run (issue 32's acceptance)."""
    with tbfix.running_testbed(rate_mbit=P_RATE, rtt_ms=P_RTT, queue_pkts=P_QUEUE,
                               cc="cubic") as tb:
        rcv = tb.addresses["receiver"]
        servers = [iperf.start_server(tb, p) for p in (5201, 5202)]
        cross = tb.popen("cross", iperf.client_argv(rcv, 5202, CROSS, 600, "cubic",
                                                    json_out=False),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        sink = tmp_path / "export.jsonl"
        export = subprocess.Popen(
            [sys.executable, "-m", "tamebpf", "export", "--listen", "off", "--jsonl",
             str(sink), "--interval", "1", "--netns", tb.namespaces["sender"]],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        with tbfix.killed_on_exit(*servers, cross, export):
            # The cross traffic fills the queue first, and export reads
            # (its first record is written) before the first transfer starts.
            iperf.wait_past_slow_start(tb, "cross", 5202, CROSS, cross)
            iperf.wait_for(lambda: export.poll() is not None or (
                sink.exists() and sink.stat().st_size > 0), 30.0, "export's first record")
            assert export.poll() is None, f"export exited: {export.stderr}"
            for streams in (2, 8):
                iperf.wait_for(lambda: iperf.server_idle(tb, 5201), 30.0, "the iperf3 server")
                run = tb.popen("sender", iperf.client_argv(rcv, 5201, streams, PHASE_S,
                                                           "cubic"),
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
                iperf_mbps(run)
            found: list[dict[str, Any]] = []

            def learned() -> bool:
                assert export.poll() is None, f"export exited: {export.stderr}"
                res, _ = tamebpf("paths", "--json")
                paths = json.loads(res.stdout)["paths"]
                found[:] = [p for p in paths if p["source"] == "passive"
                            and sorted(x["streams"] for x in p["fit"]["probes"]) == [2, 8]]
                return bool(found)

            iperf.wait_for(learned, 15.0, "a passive entry with points at 2 and 8 streams")
            entry = found[0]
            assert (entry["dest"], entry["netns"], entry["congestion"]) == (
                f"{rcv}/32", tb.namespaces["sender"], "cubic")
            # The learning is over: the run that checks the fit must not feed
            # it (a goodput outside the entry's interval would mark the path
            # changed, and a path only transfers taught is then learned anew
            # from that run: the fit checked would no longer be the one made).
            export.terminate()
            assert export.wait(timeout=15) == 0, export.stderr
            iperf.wait_for(lambda: iperf.server_idle(tb, 5201), 30.0, "the iperf3 server")
            # One second omitted: 4 streams beside the cross traffic reach
            # their share within it (in a 60-s run, the 10 s after its first
            # second averaged within 2% of the whole run's mean), so the
            # measured run is those 10 s.
            run = tb.popen("sender", iperf.client_argv(rcv, 5201, 4, CHECK_S, "cubic",
                                                       omit=1),
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            measured = iperf_mbps(run)
            # What the stored fit predicts at 4 streams: advise reads it so.
            res, _ = advise(tb, "--json", "--max-streams", "8")
            assert res.returncode == 0, res.stderr
            out = json.loads(res.stdout)
            assert out["from_memory"] is True and out["memory"]["source"] == "passive", out
            predicted = out["curve"][3]["throughput_mbps"]
            points = {x["streams"]: round(x["goodput_mbps"], 2) for x in entry["fit"]["probes"]}
            print(f"passive points {points}; at 4 streams predicted {predicted:.2f}, "
                  f"measured {measured:.2f} Mbit/s")
            assert abs(predicted / measured - 1) <= 0.15, (predicted, measured, points)


def test_another_nodes_exported_path_answers_advise_paths_from(tmp_path: Path) -> None:
    """Node A's `export` serves its path memory; a real Prometheus scrapes
    it; node B (an empty memory of its own) gets A's path through
    `advise --paths-from`, recomputed for its own limit, sending nothing,
    and names node A by its label node."""
    entry = an_entry()
    PathStore(state_dir()).put(entry)  # node A: this test's state directory
    target = loopback_target()
    with prometheus(target) as prom, exporter("--node", "A", listen=target):
        iperf.wait_for(lambda: bool(query(prom, "tamebpf_path_fit_info")), 20.0,
                       "Prometheus to scrape node A's path series", step=0.3)
        own = tmp_path / "node-b"
        res, took = tamebpf("advise", "198.18.3.2", "--max-impact", "5%", "--congestion",
                            "cubic", "--paths-from", prom, "--state-dir", str(own), "--json")
        assert res.returncode == 0, res.stderr
        out = json.loads(res.stdout)
        assert out["from_memory"] is True, out
        assert out["memory"]["node"] == "A", out["memory"]
        assert out["memory"]["source"] == entry.source
        want = recall(entry, Settings(max_impact=0.05)).advice
        assert out["advice"]["num_flows"] == want.num_flows
        assert out["advice"]["max_nondisruptive_thru_mbps"] == pytest.approx(
            want.max_nondisruptive_thru, rel=1e-9)
        assert took < 2.0, f"the shared answer took {took:.2f} s"
        assert not own.exists(), "an answer from memory wrote node B's memory"
        # A path marked changed on node A is not shared.
        PathStore(state_dir()).mark_changed(entry.key)
        iperf.wait_for(lambda: not query(prom, "tamebpf_path_changed == 0"), 20.0,
                       "Prometheus to see the changed mark", step=0.3)
        assert fetch(prom, "198.18.3.2/32", "cubic", time.time()).entries == []

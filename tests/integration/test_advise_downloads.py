"""`tamebpf advise --reverse` on the testbed's back bottleneck: probes that
download, measured as they arrive, checked against downloads measured
from the outside."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tamebpf_testbed import Testbed, iperf
from tests.integration import testbed_fixtures as tbfix

pytestmark = pytest.mark.root

# The forward link is faster: a probe that measured uploads, or the ACK
# spacing of the wrong direction, would show 2.5 times the back capacity.
RATE, RATE_BACK, RTT, QUEUE = 50.0, 20.0, 20.0, 25
CAPACITY_BACK = RATE_BACK * 1448 / 1514


@pytest.fixture(scope="module")
def tb() -> Iterator[Testbed]:
    with tbfix.running_testbed(rate_mbit=RATE, rtt_ms=RTT, queue_pkts=QUEUE, cc="cubic",
                               rate_back_mbit=RATE_BACK) as t:
        yield t


def advise(tb: Testbed, *extra: str, reverse: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tamebpf", "advise", tb.addresses["receiver"],
         *(["--reverse"] if reverse else []), "--max-impact", "10%",
         "--netns", tb.namespaces["sender"], "--congestion", "cubic", *extra],
        capture_output=True, text=True, timeout=90)


def download_mbps(tb: Testbed, streams: int, seconds: int = 4) -> float:
    argv = iperf.client_argv(tb.addresses["receiver"], iperf.PORT_MAIN, streams, seconds,
                             "cubic", omit=1, reverse=True)
    report = tbfix.iperf3_json(tb, argv)
    return float(report["end"]["sum_received"]["bits_per_second"]) / 1e6


def cross_download_rate(tb: Testbed, seconds: float) -> float:
    """The cross host's download over the next `seconds`, counted at its
    sender (the receiver's iperf3 server on the cross port)."""
    a = iperf.acked_bytes(tb, "receiver", iperf.PORT_CROSS, served=True)
    time.sleep(seconds)
    return iperf.mbit_between(a, iperf.acked_bytes(tb, "receiver", iperf.PORT_CROSS,
                                                   served=True))


@pytest.mark.long
def test_download_advice_predicts_a_download_and_its_impact(tb: Testbed) -> None:
    """--quick download probes of 1 and 10 streams: measured at this host as
    they arrive, at the back link's rate; their prediction at 4 streams
    checked against a 4-stream download and its impact on a cross host's
    download."""
    servers = [iperf.start_server(tb, p) for p in (iperf.PORT_MAIN, iperf.PORT_CROSS)]
    with tbfix.killed_on_exit(*servers):
        res = advise(tb, "--json", "--quick")
        assert res.returncode == 0, res.stderr
        out = json.loads(res.stdout)
        assert out["direction"] == "receive" and out["target"]["direction"] == "receive", out
        m = out["measurements"]
        assert [x["streams"] for x in m] == [1, 10]
        for x in m:
            assert x["goodput_mbps"] <= CAPACITY_BACK * 1.03, (
                f"{x['streams']} streams: {x['goodput_mbps']:.2f} Mbit/s received, above "
                f"the back link's {CAPACITY_BACK:.2f}")
            assert RTT * 0.9 < x["srtt_ms"] < RTT * 2, f"receiver's RTT {x['srtt_ms']} ms"
        assert m[1]["goodput_mbps"] >= 0.85 * CAPACITY_BACK, f"10 streams fill it: {m[1]}"
        # A 25-packet queue drops: the holes seen here, and the server's count
        assert m[1]["loss_rate"] and m[1]["loss_rate"] > 0, m[1]
        assert m[1]["sender_retransmits"] and m[1]["sender_retransmits"] > 0, m[1]
        e = out["capacity_estimate"]
        assert e["method"] == "data-spacing", e
        if e["goodput_mbps"] is not None:
            assert abs(e["goodput_mbps"] - CAPACITY_BACK) <= 0.15 * CAPACITY_BACK, e
        curve = {c["streams"]: c for c in out["curve"]}

        ours = download_mbps(tb, 4)
        cross = tb.popen("cross", iperf.client_argv(tb.addresses["receiver"], iperf.PORT_CROSS,
                                                    1, 40, "cubic", json_out=False,
                                                    reverse=True),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with tbfix.killed_on_exit(cross):
            iperf.wait_for(lambda: iperf.left_slow_start(tb, "receiver", iperf.PORT_CROSS, 1,
                                                         served=True),
                           20.0, "the cross download past slow start")
            alone = cross_download_rate(tb, 4)
            ours4 = tb.popen("sender", iperf.client_argv(
                tb.addresses["receiver"], iperf.PORT_MAIN, 4, 30, "cubic", json_out=False,
                reverse=True), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            with tbfix.killed_on_exit(ours4):
                iperf.wait_for(lambda: iperf.left_slow_start(
                    tb, "receiver", iperf.PORT_MAIN, 4, served=True), 20.0,
                    "our 4 downloading streams past slow start")
                time.sleep(1)
                shared = cross_download_rate(tb, 4)
        measured_impact = 1 - shared / alone
        predicted = curve[4]
        err = (predicted["throughput_mbps"] - ours) / ours
        assert abs(err) <= 0.15, (
            f"4 streams: predicted {predicted['throughput_mbps']:.2f}, downloaded "
            f"{ours:.2f} Mbit/s (error {err:+.0%}, bound 15%)")
        assert abs(predicted["impact"] - measured_impact) <= 0.30, (
            f"impact of 4 downloading streams on a cross download: predicted "
            f"{predicted['impact']:.2f}, measured {measured_impact:.2f} "
            f"({alone:.2f} -> {shared:.2f} Mbit/s)")


def test_download_advice_is_remembered_as_a_download(tb: Testbed) -> None:
    """The advice is kept under the path's receive direction: asked again it
    comes from memory, the upload advice does not take it, and --format
    prints the tool's download form."""
    server = iperf.start_server(tb, iperf.PORT_MAIN)
    with tbfix.killed_on_exit(server):
        first = advise(tb, "--quick", "--format", "iperf3")
        assert first.returncode == 0, first.stderr
        assert first.stdout.startswith("-R -P "), first.stdout
        again = advise(tb, "--quick", "--json")
        assert again.returncode == 0, again.stderr
        out = json.loads(again.stdout)
        assert out.get("from_memory") is True and out["measurements"] == [], out
        assert out["direction"] == "receive", out
        upload = advise(tb, "--quick", "--json", reverse=False)
        assert upload.returncode == 0, upload.stderr
        up = json.loads(upload.stdout)
        assert up.get("from_memory") is False and up["direction"] == "send", up
        assert up["measurements"][0]["goodput_mbps"] > CAPACITY_BACK * 1.5, (
            "uploads cross the faster forward link", up["measurements"])
    listed = subprocess.run([sys.executable, "-m", "tamebpf", "paths", "--json"],
                            capture_output=True, text=True, timeout=30, check=True)
    entries = json.loads(listed.stdout)["paths"]
    ours = [e for e in entries if e["dest"].startswith(tb.addresses["receiver"])]
    assert sorted((e["direction"], e["congestion"]) for e in ours) == \
        [("receive", "remote"), ("send", "cubic")], ours

"""Measures the testbed's accuracy (for docs/testbed.md, `make eval PRESET=testbed-accuracy`).

Three measurements, each on fresh testbeds:

- rate: goodput of 1 and 8 CUBIC flows against R x 1448/1514, several runs
  per point, with the link's CPU use and the host's steal time per run;
- rtt: idle ping RTT of the sender and of the cross traffic (at half the
  RTT), IPv4 and IPv6;
- queue: ping under a UDP overload, which must wait behind a full queue of
  B - 1 frames.
"""

from __future__ import annotations

import json
import os
import secrets
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from tamebpf_testbed import iperf
from tamebpf_testbed.config import FRAME
from tamebpf_testbed.delay import LINK
from tamebpf_testbed.testbed import Testbed

# The rate table measures the link, not the host: the queue lasts 100 ms at
# every rate (83 frames at 10 Mbit/s, 1651 at 200), so neither a CUBIC
# back-off nor a host stall (the hypervisor takes a vCPU for 30-190 ms at a
# time here) leaves the link idle. A fixed 400 frames lasted 485 ms at 10
# Mbit/s but only 24 ms at 200, which is where stalls cost 3-6% of the rate.
RATE_RTT_MS, RATE_QUEUE_MS = 40.0, 100.0
BIG_PING = 1000  # payload bytes: over the 128 the back link lets through untouched


def frame_ms(ping_payload: int, family: int, rate_mbit: float) -> float:
    """How long a ping of ping_payload bytes takes on a link of rate_mbit."""
    ip_bytes = ping_payload + 8 + (20 if family == 4 else 40)
    return (ip_bytes + 14) * 8 / (rate_mbit * 1e3)  # the link counts the Ethernet header


def rate_queue_frames(rate_mbit: float) -> int:
    """Frames the rate table's queue holds: RATE_QUEUE_MS of the link at R."""
    return max(2, round(rate_mbit * 1e6 * RATE_QUEUE_MS / 1e3 / (8 * FRAME)))


def cpu_seconds(pid: int) -> float:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def steal_ticks() -> tuple[int, int]:
    """(stolen, total) jiffies of all CPUs: time the hypervisor ran someone else."""
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return f[7], sum(f)


def _name() -> str:
    return f"acc{secrets.token_hex(3)}"


def goodput_runs(rate: float, flows: int, runs: int, seconds: int = 8) -> dict[str, Any]:
    """runs x iperf3 -P flows (CUBIC, first 2 s omitted) on one testbed."""
    rows = []
    with Testbed.up(_name(), rate, RATE_RTT_MS, rate_queue_frames(rate)) as tb:
        server = iperf.start_server(tb, iperf.PORT_MAIN)
        try:
            for _ in range(runs):
                iperf.wait_for(lambda: iperf.server_idle(tb, iperf.PORT_MAIN), 10.0,
                               "the iperf3 server to be idle")
                pid = tb.pids[LINK]
                c0, s0, t0 = cpu_seconds(pid), steal_ticks(), time.monotonic()
                out = tb.exec("sender", iperf.client_argv(
                    tb.addresses["receiver"], iperf.PORT_MAIN, flows, seconds, "cubic", omit=2),
                    timeout=seconds + 30)
                c1, s1, t1 = cpu_seconds(pid), steal_ticks(), time.monotonic()
                mbit = json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e6
                rows.append({"mbit": round(mbit, 3),
                             "link_cpu": round((c1 - c0) / (t1 - t0), 3),
                             "steal": round((s1[0] - s0[0]) / max(1, s1[1] - s0[1]), 3)})
            stats = tb.link_stats()
        finally:
            server.terminate()
            server.wait(5)
        tb.check()
        want = tb.config.goodput_mbit
    med = statistics.median(r["mbit"] for r in rows)
    return {"rate_mbit": rate, "flows": flows, "queue_pkts": rate_queue_frames(rate),
            "expected_mbit": round(want, 3),
            "median_mbit": round(med, 3), "error": round(med / want - 1, 4), "runs": rows,
            "late_mean_us": stats["late_mean_us"], "late_max_us": stats["late_max_us"]}


def idle_rtt(rtt: float, pings: int = 50) -> dict[str, Any]:
    """Idle RTT for sender (rtt) and cross (rtt / 2), IPv4 and IPv6."""
    row: dict[str, Any] = {"rtt_ms": rtt}
    with Testbed.up(_name(), 100, rtt, 100, cross_rtt_ms=rtt / 2) as tb:
        for role, want in (("sender", rtt), ("cross", rtt / 2)):
            for fam in (4, 6):
                tb.ping(role, count=2, interval=0.05, family=fam)  # neighbour discovery
                r = sorted(tb.ping(role, count=pings, interval=0.02, family=fam)["rtt_ms"])
                row[f"{role}_v{fam}"] = {
                    "want_ms": want, "median_ms": round(statistics.median(r), 3),
                    "p95_ms": round(r[int(0.95 * (len(r) - 1))], 3),
                    "min_ms": round(r[0], 3), "max_ms": round(r[-1], 3)}
    return row


def full_queue_rtt(rate: float, queue: int, aqm: str = "droptail",
                   rtt: float = 20.0) -> dict[str, Any]:
    """Ping behind a UDP overload (1.5 x R from the cross host). DropTail: a
    full queue, RTT + (B - 1) frames. RED: below that; ns-2's gentle RED
    settles between max_th and 2 max_th against unresponsive traffic."""
    with Testbed.up(_name(), rate, rtt, queue, aqm=aqm) as tb:
        server = iperf.start_server(tb, iperf.PORT_MAIN)
        load = tb.popen("cross", iperf.client_argv(
            tb.addresses["receiver"], iperf.PORT_MAIN, 1, 10, "cubic", udp_mbit=rate * 1.5,
            json_out=False), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        try:
            iperf.wait_for(lambda: tb.link_stats()["backlog"] >= queue // 2, 5.0,
                           "the bottleneck queue to fill")
            r = tb.ping("sender", count=60, interval=0.05)
            stats = tb.link_stats()
        finally:
            load.terminate()
            load.wait(10)
            server.terminate()
            server.wait(10)
        red = tb.config.red
    frame_ms = FRAME * 8 / (rate * 1e3)
    want = rtt + (queue - 1) * frame_ms
    med = statistics.median(r["rtt_ms"]) if r["rtt_ms"] else float("nan")
    row = {"rate_mbit": rate, "queue_pkts": queue, "aqm": aqm, "rtt_ms": rtt,
           "want_ms": round(want, 3), "median_ms": round(med, 3),
           "error": round(med / want - 1, 4), "pings_through": len(r["rtt_ms"]),
           "tail_drops": stats["tail_drops"], "red_drops": stats["red_drops"]}
    if red is not None:
        row["red_band_ms"] = [round(rtt + red.max_th * frame_ms, 3),
                              round(rtt + 2 * red.max_th * frame_ms, 3)]
    return row

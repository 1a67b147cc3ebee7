"""Measures the testbed's accuracy (for docs/testbed.md, `make eval PRESET=testbed-accuracy`).

Three measurements, each on fresh testbeds and in each direction:

- rate: goodput of 1 and 8 CUBIC flows against R x 1448/1514, several runs
  per point, with the link's CPU use and the host's steal time per run;
  back: downloads (iperf3 -R) against R_back x 1448/1514;
- rtt: idle ping RTT of the sender and of the cross traffic (at half the
  RTT), IPv4 and IPv6; back: the receiver's pings to them, large enough to
  cross the back link;
- queue: ping under a UDP overload, which must wait behind a full queue of
  B - 1 frames; back: the receiver's ping behind its own overload toward
  the sender.
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
from tamebpf_testbed.delay import BACK, LINK
from tamebpf_testbed.testbed import Testbed

# The rate table measures the link, not the host: the queue lasts 100 ms at
# every rate (83 frames at 10 Mbit/s, 1651 at 200), so neither a CUBIC
# back-off nor a host stall (the hypervisor takes a vCPU for 30-190 ms at a
# time here) leaves the link idle. A fixed 400 frames lasted 485 ms at 10
# Mbit/s but only 24 ms at 200, which is where stalls cost 3-6% of the rate.
RATE_RTT_MS, RATE_QUEUE_MS = 40.0, 100.0
BIG_PING = 1000  # payload bytes: over the 128 the back link lets through untouched
BACK_FORWARD_MBIT = 100.0  # the forward rate under the back queue table


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


def goodput_runs(rate: float, flows: int, runs: int, seconds: int = 8,
                 rate_back: float | None = None, back: bool = False) -> dict[str, Any]:
    """runs x iperf3 -P flows (CUBIC, first 2 s omitted) on one testbed;
    back: downloads (-R) through the back link, at rate_back (default rate)."""
    rows = []
    link_rate = (rate_back or rate) if back else rate
    queue = rate_queue_frames(link_rate)
    with Testbed.up(_name(), rate, RATE_RTT_MS, queue, rate_back_mbit=rate_back) as tb:
        server = iperf.start_server(tb, iperf.PORT_MAIN)
        try:
            for _ in range(runs):
                iperf.wait_for(lambda: iperf.server_idle(tb, iperf.PORT_MAIN), 10.0,
                               "the iperf3 server to be idle")
                pid = tb.pids[BACK if back else LINK]
                c0, s0, t0 = cpu_seconds(pid), steal_ticks(), time.monotonic()
                out = tb.exec("sender", iperf.client_argv(
                    tb.addresses["receiver"], iperf.PORT_MAIN, flows, seconds, "cubic", omit=2,
                    reverse=back), timeout=seconds + 30)
                c1, s1, t1 = cpu_seconds(pid), steal_ticks(), time.monotonic()
                mbit = json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e6
                rows.append({"mbit": round(mbit, 3),
                             "link_cpu": round((c1 - c0) / (t1 - t0), 3),
                             "steal": round((s1[0] - s0[0]) / max(1, s1[1] - s0[1]), 3)})
            stats = tb.link_stats("back" if back else "forward")
        finally:
            server.terminate()
            server.wait(5)
        tb.check()
        want = tb.config.goodput_back_mbit if back else tb.config.goodput_mbit
    med = statistics.median(r["mbit"] for r in rows)
    return {"rate_mbit": rate, "rate_back_mbit": tb.config.effective_rate_back_mbit,
            "flows": flows, "queue_pkts": queue,
            "expected_mbit": round(want, 3),
            "median_mbit": round(med, 3), "error": round(med / want - 1, 4), "runs": rows,
            "late_mean_us": stats["late_mean_us"], "late_max_us": stats["late_max_us"]}


def _rtt_cell(tb: Testbed, src: str, dst: str, fam: int, want: float, pings: int,
              size: int | None = None) -> dict[str, Any]:
    tb.ping(src, dst, count=2, interval=0.05, family=fam)  # neighbour discovery
    r = sorted(tb.ping(src, dst, count=pings, interval=0.02, family=fam, size=size)["rtt_ms"])
    return {"want_ms": round(want, 3), "median_ms": round(statistics.median(r), 3),
            "p95_ms": round(r[int(0.95 * (len(r) - 1))], 3),
            "min_ms": round(r[0], 3), "max_ms": round(r[-1], 3)}


def idle_rtt(rtt: float, pings: int = 50) -> dict[str, Any]:
    """Idle RTT for sender (rtt) and cross (rtt / 2), IPv4 and IPv6."""
    row: dict[str, Any] = {"rtt_ms": rtt}
    with Testbed.up(_name(), 100, rtt, 100, cross_rtt_ms=rtt / 2) as tb:
        for role, want in (("sender", rtt), ("cross", rtt / 2)):
            for fam in (4, 6):
                row[f"{role}_v{fam}"] = _rtt_cell(tb, role, "receiver", fam, want, pings)
    return row


def idle_rtt_back(rtt: float, pings: int = 50) -> dict[str, Any]:
    """Idle RTT of the receiver's pings to the sender (rtt) and the cross
    host (rtt / 2): ping's default size (which skips the back link) and
    BIG_PING bytes (which cross it, adding a frame's time on each link)."""
    rate = 100.0
    row: dict[str, Any] = {"rtt_ms": rtt, "rate_mbit": rate}
    with Testbed.up(_name(), rate, rtt, 100, cross_rtt_ms=rtt / 2) as tb:
        row["sender_small_v4"] = _rtt_cell(tb, "receiver", "sender", 4, rtt, pings)
        for role, base in (("sender", rtt), ("cross", rtt / 2)):
            for fam in (4, 6):
                want = base + 2 * frame_ms(BIG_PING, fam, rate)
                row[f"{role}_v{fam}"] = _rtt_cell(tb, "receiver", role, fam, want, pings,
                                                  BIG_PING)
    return row


def full_queue_rtt(rate: float, queue: int, aqm: str = "droptail",
                   rtt: float = 20.0, back: bool = False) -> dict[str, Any]:
    """Ping behind a UDP overload (1.5 x R from the cross host). DropTail: a
    full queue, RTT + (B - 1) frames. RED: below that; ns-2's gentle RED
    settles between max_th and 2 max_th against unresponsive traffic.
    back: rate is the back link's (the forward one runs at
    BACK_FORWARD_MBIT); the overload goes from the receiver to the sender
    (iperf3 -R) and the receiver pings the sender with BIG_PING bytes."""
    fwd_rate, back_rate = (BACK_FORWARD_MBIT, rate) if back else (rate, None)
    direction = "back" if back else "forward"
    with Testbed.up(_name(), fwd_rate, rtt, queue, aqm=aqm, rate_back_mbit=back_rate) as tb:
        server = iperf.start_server(tb, iperf.PORT_MAIN)
        load = tb.popen("sender" if back else "cross", iperf.client_argv(
            tb.addresses["receiver"], iperf.PORT_MAIN, 1, 10, "cubic", udp_mbit=rate * 1.5,
            json_out=False, reverse=back), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            iperf.wait_for(lambda: tb.link_stats(direction)["backlog"] >= queue // 2, 5.0,
                           f"the {direction} link's queue to fill")
            if back:
                r = tb.ping("receiver", "sender", count=60, interval=0.05, size=BIG_PING)
            else:
                r = tb.ping("sender", count=60, interval=0.05)
            stats = tb.link_stats(direction)
        finally:
            load.terminate()
            load.wait(10)
            server.terminate()
            server.wait(10)
        red = tb.config.red
    frame = FRAME * 8 / (rate * 1e3)
    want = rtt + (queue - 1) * frame
    med = statistics.median(r["rtt_ms"]) if r["rtt_ms"] else float("nan")
    row = {"rate_mbit": rate, "queue_pkts": queue, "aqm": aqm, "rtt_ms": rtt,
           "direction": direction, "forward_mbit": fwd_rate,
           "want_ms": round(want, 3), "median_ms": round(med, 3),
           "error": round(med / want - 1, 4), "pings_through": len(r["rtt_ms"]),
           "tail_drops": stats["tail_drops"], "red_drops": stats["red_drops"]}
    if red is not None:
        row["red_band_ms"] = [round(rtt + red.max_th * frame, 3),
                              round(rtt + 2 * red.max_th * frame, 3)]
    return row

"""Measures the testbed's accuracy per bottleneck rate (for docs/testbed.md).

    python -m tamebpf.testbed.accuracy --rates 10,50,100,200,300,500 --out acc.json

For each rate R a fresh testbed (RTT 50 ms, queue 200 packets) is brought up:
idle ping RTT (30 pings), goodput of 1 and 4 CUBIC flows against
R x 1448/1514, and the sender delay line's release lateness and CPU use
while the 4 flows run (read with SIGUSR1). Lateness is what the delay adds
to the configured RTT; past some rate it grows and the emulated RTT drifts.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import signal
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tamebpf.errors import TamebpfError
from tamebpf.testbed import iperf
from tamebpf.testbed.testbed import Testbed, state_dir

RTT_MS, QUEUE = 50.0, 200
_STATS = re.compile(r"packets (\d+) .* late_mean_us ([\d.]+) late_max_us ([\d.]+)")


def _cpu_s(pid: int) -> float:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def _line_stats(tb: Testbed, label: str) -> tuple[int, float, float]:
    log = state_dir(tb.name) / f"delay-{label}.log"
    before = log.read_text().count("\n")
    os.kill(tb.pids[label], signal.SIGUSR1)
    iperf.wait_for(lambda: log.read_text().count("\n") > before, 5.0, "delay-line statistics")
    m = _STATS.search(log.read_text().splitlines()[-1])
    assert m, "unexpected statistics line"
    return int(m[1]), float(m[2]), float(m[3])


def _goodput(tb: Testbed, streams: int, seconds: int = 8) -> float:
    out = tb.exec("sender", iperf.client_argv(tb.addresses["receiver"], iperf.PORT_MAIN,
                                              streams, seconds, "cubic", omit=2),
                  timeout=seconds + 30)
    return float(json.loads(out)["end"]["sum_received"]["bits_per_second"]) / 1e6


def measure(rate: float) -> dict[str, Any]:
    with Testbed.up(f"acc{secrets.token_hex(3)}", rate, RTT_MS, QUEUE) as tb:
        tb.ping(count=2, interval=0.05)
        idle = tb.ping(count=30, interval=0.02)["rtt_ms"]
        server = iperf.start_server(tb, iperf.PORT_MAIN)
        try:
            one = _goodput(tb, 1)
            pid = tb.pids["sender-acks"]
            p0, c0, t0 = _line_stats(tb, "sender-acks")[0], _cpu_s(pid), time.monotonic()
            four = _goodput(tb, 4)
            cpu = (_cpu_s(pid) - c0) / (time.monotonic() - t0)
            p1, late_mean, late_max = _line_stats(tb, "sender-acks")
        finally:
            server.terminate()
            server.wait(5)
        tb.check()
        return {"rate_mbit": rate, "expected_mbit": round(tb.config.goodput_mbit, 2),
                "idle_rtt_median_ms": round(statistics.median(idle), 3),
                "idle_rtt_max_ms": round(max(idle), 3),
                "goodput_1_mbit": round(one, 2), "goodput_4_mbit": round(four, 2),
                "acks_delayed": p1 - p0, "late_mean_us": late_mean, "late_max_us": late_max,
                "delayline_cpu_core_fraction": round(cpu, 3),
                "loadavg": os.getloadavg()[0]}


def measure_rtt(rtt: float, pings: int = 50) -> dict[str, Any]:
    """Idle RTT for sender (rtt) and cross (rtt / 2), IPv4 and IPv6."""
    row: dict[str, Any] = {"rtt_ms": rtt}
    with Testbed.up(f"acc{secrets.token_hex(3)}", 100, rtt, 100, cross_rtt_ms=rtt / 2) as tb:
        for role, want in (("sender", rtt), ("cross", rtt / 2)):
            for fam in (4, 6):
                tb.ping(role, count=2, interval=0.05, family=fam)  # neighbour discovery
                r = sorted(tb.ping(role, count=pings, interval=0.02, family=fam)["rtt_ms"])
                row[f"{role}_v{fam}"] = {
                    "want_ms": want, "median_ms": round(statistics.median(r), 3),
                    "p95_ms": round(r[int(0.95 * (len(r) - 1))], 3),
                    "min_ms": round(r[0], 3), "max_ms": round(r[-1], 3)}
    return row


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tamebpf.testbed.accuracy", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rates", default="10,50,100,200,300,500")
    p.add_argument("--rtts", default="", help="instead: idle RTT table for these RTTs (ms)")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    rows = []
    if a.rtts:
        for rtt in [float(x) for x in a.rtts.split(",")]:
            rows.append(measure_rtt(rtt))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    else:
        for r in [float(x) for x in a.rates.split(",")]:
            try:
                rows.append(measure(r))
            except TamebpfError as err:  # e.g. iperf3 cannot keep up: that is a result
                rows.append({"rate_mbit": r, "error": str(err)})
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    a.out.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

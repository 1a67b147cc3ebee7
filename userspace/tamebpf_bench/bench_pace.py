"""What pace mode costs (make bench): a loopback transfer with and without it.

iperf3 -P 4 over loopback from a process in a test cgroup, in alternating
rounds of three modes so machine noise hits all alike:

  none       no cap on the cgroup
  pace-idle  a pace cap whose target (100 Gbit/s) never binds: the cost of
             the sock_ops program's check-ins alone
  pace-1G    a pace cap of 1 Gbit/s: pacing at work

Reports each mode's goodput (median of rounds), the median of the per-round
ratios to `none`, and what the pace program costs per run and per stream,
from the kernel's BPF run-time statistics (BPF_ENABLE_STATS for the run).
Writes its section of docs/performance.md with --write.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

from tamebpf.cap.spec import parse_dest
from tamebpf.cap.table import PACE_NO_LIMIT, CapTable
from tamebpf_bench.bench_cap import bench_cgroup, prog_costs
from tamebpf_bench.bpfstats import bpf_run_stats
from tamebpf_eval.commands import pin_dir
from tamebpf_eval.docsection import markers, write_section

START, END = markers("bench_pace")
MODES = {"none": None, "pace-idle": 100e9, "pace-1G": 1e9}  # target, bit/s
STREAMS = 4
PORT = 5290


def one_run(cg: str, seconds: float) -> float:
    def enter() -> None:
        with open(os.path.join(cg, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))

    out = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(PORT), "-P", str(STREAMS),
                          "-t", f"{seconds:g}", "-J"], preexec_fn=enter, capture_output=True,
                         text=True, timeout=seconds + 30, check=True).stdout
    return float(json.loads(out)["end"]["sum_received"]["bits_per_second"]) / 1e6


def run(rounds: int, seconds: float) -> tuple[dict[str, list[float]], dict[str, list[int]]]:
    gbit: dict[str, list[float]] = {m: [] for m in MODES}
    cost = {"runs": 0, "ns": 0, "streams": 0}
    dest = parse_dest("127.0.0.0/8")
    with bench_cgroup() as cg, pin_dir("tamebpf-bench-") as pin, bpf_run_stats():
        table = CapTable("bench")
        server = subprocess.Popen(["iperf3", "-s", "-p", str(PORT), "-B", "127.0.0.1"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(0.5)
            modes = list(MODES)
            for r in range(rounds):
                for mode in modes[r % 3:] + modes[:r % 3]:
                    target = MODES[mode]
                    if target is not None:
                        table.add(cg, dest, PACE_NO_LIMIT, pace_bytes_per_s=int(target / 8))
                    try:
                        gbit[mode].append(one_run(cg, seconds) / 1e3)
                        if mode == "pace-idle":
                            c = prog_costs(cg, pin).get("tb_cap_pace", (0, 0))
                            cost["runs"] += c[0]
                            cost["ns"] += c[1]
                            cost["streams"] += STREAMS + 1  # iperf3's control connection
                    finally:
                        if target is not None:
                            table.remove(cg, dest)
        finally:
            server.kill()
            server.wait()
    return gbit, {k: [v] for k, v in cost.items()}


def section(gbit: dict[str, list[float]], cost: dict[str, list[int]], rounds: int,
            seconds: float) -> str:
    base = gbit["none"]
    lines = [START, "## cap: pace mode on a loopback transfer", "",
             f"`iperf3 -c 127.0.0.1 -P {STREAMS} -t {seconds:g}` from a test cgroup, {rounds} "
             "rounds, the three modes alternating within each round: *none* (no cap), "
             "*pace-idle* (a pace cap of 100 Gbit/s, which never binds: the check-ins "
             "alone), *pace-1G* (a pace cap of 1 Gbit/s). Goodput is iperf3's received "
             "rate; the ratio is the median of the per-round ratios to *none*.", "",
             f"Measured on this VM: Linux {platform.release()}, "
             f"{os.cpu_count()} CPUs (`make bench`, tamebpf_bench.bench_pace).", "",
             "| mode | goodput Gbit/s (median) | vs none | runs (Gbit/s) |",
             "|---|---|---|---|"]
    for mode, vals in gbit.items():
        ratio = "—" if mode == "none" else (
            f"{statistics.median(v / b for v, b in zip(vals, base, strict=True)):.3f}")
        lines.append(f"| {mode} | {statistics.median(vals):.2f} | {ratio} "
                     f"| {' '.join(f'{v:.2f}' for v in vals)} |")
    runs, ns, streams = cost["runs"][0], cost["ns"][0], cost["streams"][0]
    per_run = ns / runs if runs else float("nan")
    lines += ["", f"`tb_cap_pace` in *pace-idle*: {runs} runs over {streams} sockets "
              f"({runs / max(1, streams):.0f} per socket: one per ACK with an RTT sample; "
              f"the share is recomputed at most once per smoothed RTT, 1 ms at least, and "
              f"the other runs return after the storage lookup), {per_run:.0f} ns per run, "
              f"{ns / max(1, streams) / 1e3:.1f} µs per socket over the whole "
              f"{seconds:g} s transfer (BPF run-time statistics).", END, ""]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--write", metavar="FILE")
    a = ap.parse_args()
    gbit, cost = run(a.rounds, a.seconds)
    text = section(gbit, cost, a.rounds, a.seconds)
    sys.stdout.write(text)
    if a.write:
        write_section(a.write, "bench_pace", text, "Performance")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

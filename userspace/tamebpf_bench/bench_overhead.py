"""Overhead of flow telemetry on TCP throughput (make bench).

Loopback iperf3 with 1 and 16 streams, in alternating runs so that machine
noise hits both sides alike; reports the median of the paired ratios.
Two arms:
- telemetry (default): telemetry attached (and read once a second, as
  `watch` and `export` do) versus not attached;
- acks: export's passive capacity sampling (tamebpf.exporter.acksampling): telemetry
  on both sides, and on one an ACK sampling window (kernel/acktrain.AckWindow)
  held open on iperf3's connections for the whole run. That is the cost per
  received segment while a window is open, host wide; export opens one
  for 5 s, a few times an hour per path, and nothing runs per packet between.
  Goodput pairs on this VM wander by tens of percent, so the same runs also
  read the window's per-segment program from the kernel's BPF run-time
  stats: its share of the CPUs' busy time while the window was open, the
  most it can take from a CPU-bound transfer (tamebpf_bench.bpfstats).
Writes its section of docs/performance.md with --write.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tamebpf.common.errors import TamebpfError
from tamebpf.common.records import Flow
from tamebpf.kernel.acktrain import AckWindow
from tamebpf.kernel.flows import FlowReader
from tamebpf_bench.bpfstats import bpf_run_stats, busy_cpu_ns, own_prog_runs
from tamebpf_eval.docsection import markers, write_section

SECTIONS = {"telemetry": "bench_overhead", "acks": "bench_acks"}  # the arm's docs section


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


Snapshot = Callable[[], list[Flow]]


@contextlib.contextmanager
def telemetry(interval: float) -> Iterator[Snapshot]:
    """Attach flow telemetry and read a snapshot every `interval` seconds;
    yields a snapshot that is safe beside those reads (one at a time)."""
    stop = threading.Event()
    lock = threading.Lock()
    with FlowReader(command="bench") as reader:
        def snapshot() -> list[Flow]:
            with lock:
                return reader.snapshot()

        def poll() -> None:
            while not stop.wait(interval):
                snapshot()
        t = threading.Thread(target=poll, daemon=True)
        t.start()
        try:
            yield snapshot
        finally:
            stop.set()
            t.join()


WINDOW_WAIT_S = 1.0  # iperf3's streams are up by then (-O 1 omits that second)


WINDOW_PROG = "log_ack"  # bpf/acktrain.bpf.c: the program that runs per received segment


@dataclass
class WindowCost:
    """The window's per-segment program over one open window: its runs and
    run time (BPF run-time stats) and the CPUs' busy time meanwhile."""

    runs: int
    prog_ns: int
    busy_ns: int
    seconds: float

    @property
    def share(self) -> float:
        return self.prog_ns / self.busy_ns


@contextlib.contextmanager
def ack_window(snapshot: Snapshot, port: int, streams: int,
               costs: list[WindowCost] | None = None) -> Iterator[None]:
    """An ACK sampling window on the iperf3 client's connections to `port`
    (its streams and its control connection), open until the block ends;
    with `costs` (BPF run-time stats on), what it cost is appended there."""
    deadline = time.monotonic() + WINDOW_WAIT_S
    while True:
        mine = [f.cookie for f in snapshot() if f.remote_port == port
                and f.state == "ESTABLISHED" and not f.closed]
        if len(mine) > streams or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    if len(mine) <= streams:
        raise TamebpfError(f"iperf3's {streams} streams were not up within {WINDOW_WAIT_S:g} s")
    with AckWindow(mine):
        if costs is None:
            yield
            return
        runs0, ns0 = own_prog_runs(WINDOW_PROG)
        busy0, t0 = busy_cpu_ns(), time.monotonic()
        yield
        runs1, ns1 = own_prog_runs(WINDOW_PROG)
        costs.append(WindowCost(runs1 - runs0, ns1 - ns0, busy_cpu_ns() - busy0,
                                time.monotonic() - t0))


def iperf3(port: int, streams: int, seconds: int,
           during: Callable[[], contextlib.AbstractContextManager[None]] | None = None,
           pin: str | None = None) -> float:
    """Receiver-side goodput in Mbit/s, first second omitted; `during`: a
    context entered once the client has started, left when it has ended;
    pin: "CLIENT_CPU,SERVER_CPU" (iperf3 -A: the client sets the server's
    affinity for its test too)."""
    proc = subprocess.Popen(
        ["iperf3", "-c", "127.0.0.1", "-p", str(port), "-P", str(streams), "-t", str(seconds),
         "-O", "1", "-J", *(["-A", pin] if pin else [])],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        with during() if during is not None else contextlib.nullcontext():
            out, err = proc.communicate(timeout=seconds + 30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if proc.returncode:
        raise TamebpfError(f"iperf3 failed ({proc.returncode}): {err.strip()[-200:]}")
    return float(json.loads(out)["end"]["sum_received"]["bits_per_second"]) / 1e6


def measure(arm: str, side: str, port: int, streams: int, seconds: int,
            interval: float, pin: str | None = None,
            costs: list[WindowCost] | None = None) -> float:
    """One iperf3 run of one side of an arm (off: the baseline); `costs`:
    see ack_window."""
    if arm == "telemetry":
        if side == "off":
            return iperf3(port, streams, seconds, pin=pin)
        with telemetry(interval):
            return iperf3(port, streams, seconds, pin=pin)
    with telemetry(interval) as snapshot:
        if side == "off":
            return iperf3(port, streams, seconds, pin=pin)
        return iperf3(port, streams, seconds,
                      lambda: ack_window(snapshot, port, streams, costs), pin=pin)


def median_interval(xs: list[float], level: float = 0.90) -> tuple[float, float]:
    """A distribution-free interval for the median of xs (order statistics:
    the k-th smallest and largest, k the largest with P(Binomial(n, 1/2) <
    k) <= (1 - level) / 2); the whole range when n is too small for it."""
    ys, n = sorted(xs), len(xs)
    tail, k, below = (1 - level) / 2, 0, 0.0
    while k < n // 2:
        below += math.comb(n, k) / 2 ** n  # P(Binomial < k + 1)
        if below > tail:
            break
        k += 1
    k = max(k, 1)
    return ys[k - 1], ys[n - k]


Results = dict[int, dict[str, Any]]  # n -> "off", "on", "ratios", "costs": lists


def run(streams_list: list[int], reps: int, seconds: int, interval: float,
        arm: str = "telemetry", pin: str | None = None) -> Results:
    port = free_port()
    results: Results = {n: {"off": [], "on": [], "ratios": [], "costs": []}
                        for n in streams_list}
    # Run-time stats on for both sides of the acks arm (they slow every
    # program a little, telemetry's on both sides alike).
    with (bpf_run_stats() if arm == "acks" else contextlib.nullcontext()):
        server = subprocess.Popen(["iperf3", "-s", "-p", str(port)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(0.5)
            for rep in range(reps):
                for n in streams_list:
                    # Alternate which side goes first, so drift cancels out.
                    order = ("off", "on") if rep % 2 == 0 else ("on", "off")
                    pair = {}
                    costs = results[n]["costs"] if arm == "acks" else None
                    for side in order:
                        pair[side] = measure(arm, side, port, n, seconds, interval, pin,
                                             costs if side == "on" else None)
                        results[n][side].append(pair[side])
                    results[n]["ratios"].append(pair["on"] / pair["off"])
                    share = f" window's program {costs[-1].share:.2%} of CPU" if costs else ""
                    print(f"rep {rep + 1}/{reps} streams {n:2d}: off {pair['off']:9.1f} "
                          f"on {pair['on']:9.1f} Mbit/s ratio {pair['on'] / pair['off']:.4f}"
                          + share, file=sys.stderr, flush=True)
        finally:
            server.kill()
            server.wait()
    return results


def section(results: Results, reps: int, seconds: int, interval: float,
            arm: str = "telemetry", pin: str | None = None) -> str:
    start, end = markers(SECTIONS[arm])
    if arm == "telemetry":
        title, what = "flows: telemetry overhead", (
            f"telemetry attached and read every {interval:g} s versus not attached")
        off, on = "detached", "attached"
    else:
        title, what = "export: ACK sampling window overhead", (
            f"export's telemetry (read every {interval:g} s) on both sides, and on one an ACK "
            "sampling window open on iperf3's connections for the whole run")
        off, on = "no window", "window open"
    lines = [
        start,
        f"## {title}",
        "",
        f"Loopback iperf3 (`-t {seconds} -O 1`"
        + (f", client and server pinned to CPUs {pin} (`-A {pin}`)" if pin else "")
        + f", receiver goodput), {what}; {reps} alternating pairs per row. Ratio = median "
        f"of the per-pair ratios {on}/{off} (1.000 = no cost); its 90% interval from the "
        "pairs' order statistics (distribution-free).",
        "",
        "Measured on this VM: "
        f"Linux {platform.release()}, {os.cpu_count()} CPUs.",
        "",
        f"| streams | {off} Mbit/s (median) | {on} Mbit/s (median) | ratio (median) "
        "| median's 90% interval | ratio min..max |",
        "|---|---|---|---|---|---|",
    ]
    for n, r in results.items():
        lo, hi = median_interval(r["ratios"])
        lines.append(
            f"| {n} | {statistics.median(r['off']):.0f} | {statistics.median(r['on']):.0f} "
            f"| {statistics.median(r['ratios']):.3f} | {lo:.3f}..{hi:.3f} | "
            f"{min(r['ratios']):.3f}..{max(r['ratios']):.3f} |")
    if arm == "acks":
        lines += _cost_table(results)
    cmd = " ".join(["python -m tamebpf_bench.bench_overhead", *sys.argv[1:]])
    lines += ["", f"Reproduce: `make bench` (runs `{cmd}`).",
              "Loopback throughput is CPU-bound and noisy on a 2-CPU VM; the spread column "
              "shows how far single pairs wander."]
    if arm == "telemetry":
        lines.append("Nothing of the telemetry runs per packet or per ACK: between snapshots "
                     "only the state-change tracepoint runs, so the cost is one iterator "
                     "pass a second, below what this machine can resolve.")
    else:
        lines.append("While a window is open, tp_btf/tcp_probe runs for every segment TCP "
                     "receives on the host (one load turns a data segment away, an ACK costs "
                     "one socket-storage lookup more; a marked socket's ACKs are also "
                     "logged). export opens a 5-s window at most 3 times an hour per path "
                     "(tamebpf.exporter.acksampling), so its cost over an hour is at most 1/240 of "
                     "the one measured here; between windows the program is detached and "
                     "nothing runs per packet.")
    lines.append(end)
    return "\n".join(lines) + "\n"


def _cost_table(results: Results) -> list[str]:
    """The window's per-segment program (WINDOW_PROG) in the "window open"
    runs, from the kernel's run-time stats."""
    lines = [
        "",
        f"The same \"window open\" runs, read from the kernel's BPF run-time stats: the "
        f"window's per-segment program ({WINDOW_PROG}, tp_btf/tcp_probe) against the time "
        "all CPUs were busy while the window was open. Loopback iperf3 is CPU-bound, so "
        "its share of that time is the most it can take from the transfer's goodput.",
        "",
        "| streams | runs per second (median) | ns per run (median) "
        "| share of busy CPU time (median) | share min..max |",
        "|---|---|---|---|---|",
    ]
    for n, r in results.items():
        costs: list[WindowCost] = r["costs"]
        if not costs:
            continue
        shares = [c.share for c in costs]
        lines.append(
            f"| {n} | {statistics.median(c.runs / c.seconds for c in costs):,.0f} "
            f"| {statistics.median(c.prog_ns / max(1, c.runs) for c in costs):.0f} "
            f"| {statistics.median(shares):.2%} | {min(shares):.2%}..{max(shares):.2%} |")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", default="1,16", help="comma-separated stream counts")
    ap.add_argument("--reps", type=int, default=7, help="alternating pairs per stream count")
    ap.add_argument("--seconds", type=int, default=5, help="length of one iperf3 run")
    ap.add_argument("--interval", type=float, default=1.0, help="snapshot interval, seconds")
    ap.add_argument("--arm", choices=sorted(SECTIONS), default="telemetry",
                    help="telemetry: attached versus not; acks: export with an ACK sampling "
                    "window open versus without (default telemetry)")
    ap.add_argument("--pin", metavar="CLIENT,SERVER",
                    help="pin iperf3's client and server to these CPUs (iperf3 -A), e.g. 0,1")
    ap.add_argument("--write", metavar="FILE", help="write the section into this Markdown file")
    args = ap.parse_args()
    streams = [int(s) for s in args.streams.split(",")]
    results = run(streams, args.reps, args.seconds, args.interval, args.arm, args.pin)
    text = section(results, args.reps, args.seconds, args.interval, args.arm, args.pin)
    sys.stdout.write(text)
    if args.write:
        write_section(args.write, SECTIONS[args.arm], text, "Performance")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

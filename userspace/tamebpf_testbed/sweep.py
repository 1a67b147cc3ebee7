"""Throughput of n parallel streams, and of m cross-traffic flows with and
without them, on a running testbed. Every raw run is kept in the output.

One run (n, m):
  1. m cross flows start (cross namespace -> receiver), warm up, and their
     goodput alone is measured over `duration` seconds;
  2. our n streams start (sender -> receiver), warm up, and over the next
     `duration` seconds both our aggregate and the cross goodput are measured;
  3. our streams stop, then the cross traffic (started first, stopped last).
Goodput comes from the senders' tcp_info bytes_acked, read at the window's
edges, so both sides cover exactly the same interval.
"""

from __future__ import annotations

import argparse
import csv
import json
import secrets
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tamebpf.common.errors import TamebpfError
from tamebpf_testbed import iperf, scenario, topology
from tamebpf_testbed.testbed import Testbed


@dataclass(frozen=True)
class Run:
    n: int
    m: int
    repeat: int
    mbit: float  # our n streams' aggregate goodput over the window
    cross_alone_mbit: float | None  # m cross flows before ours started
    cross_with_mbit: float | None  # m cross flows during the same window as `mbit`
    iperf3_mbit: float | None  # iperf3's own receiver-side figure (omit = warm-up)
    retransmits: int | None
    window_s: float
    started: float  # unix time



def _flush(tb: Testbed) -> None:
    for role in ("sender", "cross", "receiver"):
        topology.flush_tcp_metrics(tb.namespaces[role])


def _stop(proc: subprocess.Popen[bytes] | None, timeout: float = 5.0) -> bytes:
    if proc is None:
        return b""
    if proc.poll() is None:
        proc.terminate()
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return out or b""


def run_once(tb: Testbed, plan: scenario.SweepPlan, n: int, m: int, repeat: int) -> Run:
    dst = tb.addresses["receiver"]
    tb.check()
    iperf.wait_for(lambda: all(iperf.server_idle(tb, p)
                               for p in (iperf.PORT_MAIN, iperf.PORT_CROSS)),
                   30.0, "the iperf3 servers to finish the previous test")
    _flush(tb)
    started = time.time()
    cross = main = None
    cross_alone = cross_with = None
    try:
        if m:
            cross = tb.popen("cross", iperf.client_argv(
                dst, iperf.PORT_CROSS, m, 3600, plan.cross_cc or plan.cc,
                window_kb=plan.cross_window_kb, json_out=False),
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            iperf.wait_flows(tb, "cross", iperf.PORT_CROSS, m, cross)
            time.sleep(plan.warmup_s)
            a = iperf.acked_bytes(tb, "cross", iperf.PORT_CROSS)
            time.sleep(plan.duration_s)
            b = iperf.acked_bytes(tb, "cross", iperf.PORT_CROSS)
            cross_alone = iperf.mbit_between(a, b)
        omit = max(1, round(plan.warmup_s))
        main = tb.popen("sender", iperf.client_argv(
            dst, iperf.PORT_MAIN, n, omit + plan.duration_s + 1, plan.cc,
            window_kb=plan.window_kb, omit=omit),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        iperf.wait_flows(tb, "sender", iperf.PORT_MAIN, n, main)
        time.sleep(plan.warmup_s)
        s1 = iperf.acked_bytes(tb, "sender", iperf.PORT_MAIN)
        c1 = iperf.acked_bytes(tb, "cross", iperf.PORT_CROSS) if m else None
        time.sleep(plan.duration_s)
        s2 = iperf.acked_bytes(tb, "sender", iperf.PORT_MAIN)
        c2 = iperf.acked_bytes(tb, "cross", iperf.PORT_CROSS) if m else None
        if c1 and c2:
            cross_with = iperf.mbit_between(c1, c2)
        out, _ = main.communicate(timeout=plan.duration_s + 30)
        main = None
    finally:
        _stop(main)
        _stop(cross)
    tb.check()  # a delay line that died mid-run invalidates the run
    ip_mbit = retrans = None
    try:
        end = json.loads(out)["end"]
        ip_mbit = end["sum_received"]["bits_per_second"] / 1e6
        retrans = int(end["sum_sent"].get("retransmits", 0))
    except (ValueError, KeyError):
        pass
    return Run(n=n, m=m, repeat=repeat, mbit=iperf.mbit_between(s1, s2),
               cross_alone_mbit=cross_alone, cross_with_mbit=cross_with, iperf3_mbit=ip_mbit,
               retransmits=retrans,
               window_s=s2[1] - s1[1], started=started)


def _with_retry(tb: Testbed, plan: scenario.SweepPlan, n: int, m: int, rep: int,
                attempts: int = 3) -> Run:
    """A run whose iperf3 failed (e.g. a connection refused while the server
    was still closing the last test) is repeated; a dead testbed is not."""
    for i in range(attempts):
        try:
            return run_once(tb, plan, n, m, rep)
        except TamebpfError as err:
            tb.check()
            if i == attempts - 1:
                raise
            print(f"sweep: n={n} m={m} rep={rep}: {err}; retrying", file=sys.stderr)
            time.sleep(2)
    raise AssertionError("unreachable")


def summarise(runs: Sequence[Run]) -> list[dict[str, Any]]:
    out = []
    for key in sorted({(r.n, r.m) for r in runs}, key=lambda k: (k[1], k[0])):
        rs = [r for r in runs if (r.n, r.m) == key]
        row: dict[str, Any] = {"n": key[0], "m": key[1], "runs": len(rs)}
        for field in ("mbit", "cross_alone_mbit", "cross_with_mbit"):
            vals = [v for r in rs if (v := getattr(r, field)) is not None]
            if not vals:
                continue
            med = statistics.median(vals)
            row[f"{field}_median"] = round(med, 3)
            row[f"{field}_min"] = round(min(vals), 3)
            row[f"{field}_max"] = round(max(vals), 3)
            row[f"{field}_spread"] = round((max(vals) - min(vals)) / med, 4) if med else None
        out.append(row)
    return out


def sweep(tb: Testbed, plan: scenario.SweepPlan,
          progress: Callable[[Run], None] | None = None) -> list[Run]:
    """Runs the plan: for each m, for each repeat, every n (interleaved, so that
    slow drift in the machine's load spreads over all n rather than one)."""
    servers = [iperf.start_server(tb, iperf.PORT_MAIN)]
    if any(plan.cross):
        servers.append(iperf.start_server(tb, iperf.PORT_CROSS))
    runs: list[Run] = []
    try:
        for m in plan.cross:
            for rep in range(plan.repeats):
                for n in plan.streams:
                    for s in servers:  # a server that died would hang the run
                        if s.poll() is not None:
                            raise TamebpfError("iperf3 server exited during the sweep")
                    r = _with_retry(tb, plan, n, m, rep)
                    runs.append(r)
                    if progress:
                        progress(r)
    finally:
        for s in servers:
            _stop(s)
    return runs


def write(path: Path, tb: Testbed, plan: scenario.SweepPlan, runs: Sequence[Run],
          meta: dict[str, Any]) -> None:
    doc = {"testbed": tb.describe(), "plan": asdict(plan), "meta": meta,
           "summary": summarise(runs), "runs": [asdict(r) for r in runs]}
    path.write_text(json.dumps(doc, indent=1) + "\n")
    with path.with_suffix(".csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(Run.__dataclass_fields__))
        w.writeheader()
        for r in runs:
            w.writerow(asdict(r))


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="sweep", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", nargs="?", help="running testbed (omit with --scenario)")
    p.add_argument("--scenario", type=Path, help="TOML scenario: brings its own testbed up "
                   "and down, and supplies defaults for the options below")
    p.add_argument("--streams", type=_ints, help="n values, e.g. 1,2,4,8")
    p.add_argument("--cross", type=_ints, help="m values (cross flows), e.g. 0,5")
    p.add_argument("--repeats", type=int)
    p.add_argument("--duration", type=float, help="measured window per run, s")
    p.add_argument("--warmup", type=float, help="seconds left out after each start")
    p.add_argument("--cc", help="our streams' congestion control")
    p.add_argument("--cross-cc", help="cross traffic's congestion control")
    p.add_argument("--window", type=int, help="our socket buffer, KB (iperf3 -w)")
    p.add_argument("--cross-window", type=int, help="cross flows' socket buffer, KB")
    p.add_argument("--out", type=Path, required=True, help="JSON output (CSV beside it)")
    a = p.parse_args(argv)
    if bool(a.name) == bool(a.scenario):
        p.error("give a testbed NAME or --scenario FILE (not both)")
    sc = scenario.load(a.scenario) if a.scenario else None
    base = asdict(sc.sweep) if sc else {"streams": [1, 2, 4, 8]}
    over = {"streams": a.streams, "cross": a.cross, "repeats": a.repeats,
            "duration_s": a.duration, "warmup_s": a.warmup, "cc": a.cc,
            "cross_cc": a.cross_cc, "window_kb": a.window, "cross_window_kb": a.cross_window}
    plan = scenario.SweepPlan(**{**base, **{k: v for k, v in over.items() if v is not None}})

    def progress(r: Run) -> None:
        cross = (f" cross alone {r.cross_alone_mbit:.2f} with {r.cross_with_mbit:.2f}"
                 if r.cross_with_mbit is not None and r.cross_alone_mbit is not None else "")
        print(f"n={r.n:3d} m={r.m:2d} rep={r.repeat} {r.mbit:8.3f} Mbit/s "
              f"retrans={r.retransmits}{cross}", file=sys.stderr, flush=True)

    # Torn down on SIGTERM too, and on Ctrl-C even when started in the
    # background (where the shell leaves SIGINT ignored).
    signal.signal(signal.SIGTERM, _exit_on_signal)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    meta = {"argv": list(argv or sys.argv[1:]), "scenario": sc.name if sc else None,
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if sc:
        with Testbed.up_config(f"sw{secrets.token_hex(3)}", sc.testbed) as tb:
            runs = sweep(tb, plan, progress)
            write(a.out, tb, plan, runs, meta)
    else:
        tb = Testbed.attach(a.name)
        runs = sweep(tb, plan, progress)
        write(a.out, tb, plan, runs, meta)
    for row in summarise(runs):
        print(json.dumps(row))
    return 0

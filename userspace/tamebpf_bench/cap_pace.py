"""Pace mode on the testbed, side by side with no cap (make eval PRESET=cap-pace).

On one testbed path with m CUBIC cross flows running throughout:
1. the advisor (tamebpf advise, limit --limit) gives N and its throughput T;
2. our transfer, iperf3 -P 16 in a cgroup, runs unpaced, then paced at T by
   `tamebpf cap set --mode pace` (set by a tamebpf process that is killed -9
   right after: the pacing is pinned, nothing of ours stays running);
3. iperf3 runs of 2, 8 and 16 streams one after another in the same cgroup;
4. one unpaced stream of ours, the reference the limit is measured against.
For each: our aggregate goodput and the cross traffic's over the same window
(bytes acked, read from the senders' sockets), iperf3's exit status. The
impact on the cross traffic is 1 - cross / (cross beside one stream of ours),
as the advisor defines it. Results -> a section of docs/cap.md.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from typing import Any

from tamebpf.advise.advisor import Target, run_advice
from tamebpf.cap.spec import parse_dest
from tamebpf.cap.table import CapTable
from tamebpf.common.words import count
from tamebpf.model import Settings
from tamebpf_bench.bench_cap import bench_cgroup
from tamebpf_eval.docsection import markers, write_section
from tamebpf_eval.records import write_json
from tamebpf_eval.truth import run_streams, settle, start_cross
from tamebpf_testbed import Testbed, iperf, teardown
from tamebpf_testbed.iperf import cross_rate

SECTION = "cap_pace_eval"
REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run_ours(tb: Testbed, cg: str | None, streams: int, warmup_s: float, window_s: float,
             m: int) -> dict[str, Any]:
    """iperf3 -P streams in cg: ours and the cross traffic's goodput."""
    mbit, cross, code, err = run_streams(tb, streams, "cubic", m, warmup_s, window_s, cg)
    return {"streams": streams, "exit": code, "error": err if code else "",
            "mbit": round(mbit, 2), "cross_mbit": None if cross is None else round(cross, 2)}


def set_pace_cap(cg: str, dest: str, mbit: float) -> str:
    """`tamebpf cap set --mode pace` in its own process, killed -9 once it
    has reported: what stays in force is only what the kernel holds."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tamebpf", "cap", "set", "--cgroup", cg, "--dest", dest,
         "--mode", "pace", "--rate", f"{mbit:.3f}M"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    said = proc.stdout.readline().strip()
    proc.kill()
    proc.wait(5)
    if "paced at" not in said:
        raise SystemExit(f"cap set failed: {said} {proc.stderr.read()}")
    return said


def evaluate(a: argparse.Namespace) -> dict[str, Any]:
    name = "pe" + os.urandom(2).hex()
    tb = Testbed.up(name, a.rate, a.rtt, a.queue, cc="cubic")
    procs: list[subprocess.Popen[bytes]] = []
    out: dict[str, Any] = {"path": {"rate_mbit": a.rate, "rtt_ms": a.rtt, "queue": a.queue,
                                    "cross": a.cross, "limit": a.limit}}
    try:
        procs = [iperf.start_server(tb, p) for p in (iperf.PORT_MAIN, iperf.PORT_CROSS)]
        procs.append(start_cross(tb, a.cross, "cubic", 5.0))
        alone = cross_rate(tb, 3.0)
        out["cross_alone_mbit"] = round(alone, 2)
        log(f"cross traffic alone: {alone:.2f} Mbit/s")
        settle(tb, a.cross, alone)
        adv = run_advice(Target(tb.addresses["receiver"], iperf.PORT_MAIN,
                                tb.namespaces["sender"], "cubic"),
                         Settings(max_impact=a.limit)).prediction.advice
        target = a.target or adv.max_nondisruptive_thru
        out["advice"] = {"streams": adv.num_flows,
                         "mbit": round(adv.max_nondisruptive_thru, 2),
                         "impact": round(adv.cross_traffic_impact, 3)}
        out["target_mbit"] = round(target, 2)
        log(f"advice: {adv.num_flows} streams, {adv.max_nondisruptive_thru:.2f} Mbit/s; "
            f"target {target:.2f}")
        dest = f"{tb.addresses['receiver']}/32:{iperf.PORT_MAIN}"
        with bench_cgroup() as cg:
            runs = {}
            for label, n in (("one", 1), ("two", 2), ("unpaced", a.streams)):
                settle(tb, a.cross, alone)
                runs[label] = run_ours(tb, cg, n, a.warmup, a.seconds, a.cross)
                log(f"{label} x{n}: {runs[label]}")
            out["cap_set"] = set_pace_cap(cg, dest, target)
            try:
                settle(tb, a.cross, alone)
                runs["paced"] = run_ours(tb, cg, a.streams, a.warmup, a.seconds, a.cross)
                log(f"paced x{a.streams}: {runs['paced']}")
                for n in (2, 8, 16):
                    iperf.wait_for(lambda: iperf.server_idle(tb, iperf.PORT_MAIN), 30.0,
                                   "the iperf3 server")
                    runs[f"churn{n}"] = run_ours(tb, cg, n, 2.0, a.churn_seconds, a.cross)
                    log(f"churn x{n}: {runs[f'churn{n}']}")
            finally:
                CapTable("cap rm").remove(cg, parse_dest(dest))
        out["runs"] = runs
    finally:
        for proc in reversed(procs):
            proc.kill()
            proc.wait()
        teardown(name)
    return out


def table(r: dict[str, Any], command: str) -> str:
    p, runs, target = r["path"], r["runs"], r["target_mbit"]
    ref = runs["one"]["cross_mbit"]

    def impact(run: dict[str, Any]) -> str:
        if not ref or run["cross_mbit"] is None:
            return "-"
        return f"{1 - run['cross_mbit'] / ref:.2f}"

    def vs_target(run: dict[str, Any]) -> str:
        return f"{run['mbit'] / target - 1:+.1%}"

    lines = [
        f"`{command}`: testbed {p['rate_mbit']:g} Mbit/s, "
        f"{p['rtt_ms']:g} ms, {p['queue']} packets, {p['cross']} CUBIC cross flows running "
        f"throughout ({r['cross_alone_mbit']} Mbit/s alone). Advice for a "
        f"{p['limit']:.0%} limit: {count(r['advice']['streams'], 'stream')}, "
        f"{r['advice']['mbit']} Mbit/s; pace target {target} Mbit/s. Impact = 1 - cross "
        "traffic's goodput / its goodput beside one stream of ours.", "",
        "| run | streams | iperf3 exit | our Mbit/s | vs target | cross Mbit/s | impact |",
        "|---|---|---|---|---|---|---|"]
    names = {"one": "one stream, no cap (reference)", "two": "two streams, no cap",
             "unpaced": "no cap",
             "paced": "pace cap", "churn2": "pace cap, then 2", "churn8": "... then 8",
             "churn16": "... then 16"}
    for key, label in names.items():
        run = runs[key]
        vs = vs_target(run) if key not in ("one", "two", "unpaced") else "-"
        lines.append(f"| {label} | {run['streams']} | {run['exit']} | {run['mbit']} | {vs} "
                     f"| {run['cross_mbit']} | {impact(run)} |")
    start, end = markers(SECTION)
    return f"{start}\n" + "\n".join(lines) + f"\n{end}\n"


def main() -> int:
    signal.signal(signal.SIGTERM, lambda s, f: (_ for _ in ()).throw(SystemExit(128 + s)))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=100.0, help="bottleneck Mbit/s")
    ap.add_argument("--rtt", type=float, default=40.0, help="ms")
    ap.add_argument("--queue", type=int, default=330, help="packets (default: 1 BDP)")
    ap.add_argument("--cross", type=int, default=4, help="CUBIC cross flows")
    ap.add_argument("--limit", type=float, default=0.2, help="the advice's max impact")
    ap.add_argument("--streams", type=int, default=16, help="our transfer's -P")
    ap.add_argument("--target", type=float, help="pace at this Mbit/s instead of the advice")
    ap.add_argument("--warmup", type=float, default=3.0, help="seconds before measuring")
    ap.add_argument("--seconds", type=float, default=15.0, help="measuring window")
    ap.add_argument("--churn-seconds", type=float, default=6.0,
                    help="measuring window of each run of 2, 8, 16 streams")
    ap.add_argument("--write", metavar="FILE", help="replace the section in this Markdown file")
    ap.add_argument("--json", metavar="FILE", help="also write the raw results here, gzipped "
                    "(FILE.gz unless FILE ends .gz)")
    a = ap.parse_args()
    r = evaluate(a)
    text = table(r, "make cap-pace-eval")
    sys.stdout.write(text)
    if a.json:
        write_json(a.json, r)
    if a.write:
        write_section(a.write, SECTION, text, "Pace mode on the testbed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Pace mode on the testbed, side by side with no cap (make eval PRESET=cap-pace),
and downloads under `tamebpf run --rate R` (PRESET=cap-pace-receive).

Uploads (--direction send), on one testbed path with m CUBIC cross flows
running throughout:
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

Downloads (--direction receive): for each RTT a testbed whose links both
ways are faster than every R (--link), and for each R `tamebpf run --rate R
-- iperf3 -c RECEIVER -R -P 8 -t T`, the run's pace cap clamping the
receive windows (bpf/cap_pace.bpf.h). What iperf3 received over its whole
test, against R; the slowest of its seconds (a stall shows there); its exit
status, and whether anything said EPERM. Results -> another section of
docs/cap.md.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
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
RECEIVE_SECTION = "cap_pace_receive_eval"
WITHIN = 0.10  # of R: what a download under run --rate R must get
STALL = 0.5  # of R: a second slower than this is a stall
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


def run_download(tb: Testbed, rate: float, streams: int, seconds: float,
                 state: str) -> dict[str, Any]:
    """`tamebpf run --rate RATE -- iperf3 -R -P STREAMS`: what iperf3
    received, each of its seconds, the sender's retransmissions."""
    iperf.wait_for(lambda: iperf.server_idle(tb, iperf.PORT_MAIN), 30.0, "the iperf3 server")
    out: dict[str, Any] = {"rate_mbit": rate, "exit": None, "eperm": False,
                           "run_goodput_mbit": None, "mbit": None, "slowest_mbit": None,
                           "retransmits": None, "error": ""}
    with tempfile.NamedTemporaryFile(prefix="tamebpf-run-", suffix=".json") as summary:
        try:
            res = subprocess.run(
                [sys.executable, "-m", "tamebpf", "run", "--netns", tb.namespaces["sender"],
                 "--rate", f"{rate:g}M", "--state-dir", state, f"--json={summary.name}", "--",
                 *iperf.client_argv(tb.addresses["receiver"], iperf.PORT_MAIN, streams,
                                    seconds, "cubic", reverse=True)],
                capture_output=True, text=True, timeout=seconds + 60)
        except subprocess.TimeoutExpired:
            # A stall that never ended; the testbed's teardown kills iperf3.
            out["error"] = f"no end after {seconds + 60:g} s"
            return out
        said = json.loads(summary.read() or b"{}")
    out |= {"exit": res.returncode,
            "eperm": "Operation not permitted" in res.stdout + res.stderr}
    if said.get("destinations"):
        out["run_goodput_mbit"] = round(said["destinations"][0]["goodput_mbps"], 2)
    try:
        report = json.loads(res.stdout)
        end = report["end"]
        out["mbit"] = round(end["sum_received"]["bits_per_second"] / 1e6, 2)
        out["slowest_mbit"] = round(min(i["sum"]["bits_per_second"]
                                        for i in report["intervals"]) / 1e6, 2)
        out["retransmits"] = end["sum_sent"].get("retransmits")
    except (ValueError, KeyError):
        out["error"] = (res.stderr or res.stdout).strip()[-300:]
    return out


def held(run: dict[str, Any]) -> bool:
    """Within WITHIN of R over the whole test, to its end: exit 0, no
    second slower than STALL x R, no EPERM."""
    rate = run["rate_mbit"]
    return (run["exit"] == 0 and not run["eperm"] and run["mbit"] is not None
            and abs(run["mbit"] / rate - 1) <= WITHIN and run["slowest_mbit"] >= STALL * rate)


def evaluate_receive(a: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"link_mbit": a.link, "streams": a.download_streams,
                           "seconds": a.download_seconds, "runs": []}
    for rtt in a.rtts:
        name = "pr" + os.urandom(2).hex()
        queue = max(100, round(a.link * 1e6 / 8 * rtt / 1000 / 1514))  # 1 BDP
        tb = Testbed.up(name, a.link, rtt, queue, cc="cubic", rate_back_mbit=a.link)
        server = None
        try:
            server = iperf.start_server(tb, iperf.PORT_MAIN)
            with tempfile.TemporaryDirectory(prefix="tamebpf-state-") as state:
                for rate in a.rates:
                    run = run_download(tb, rate, a.download_streams, a.download_seconds, state)
                    run["rtt_ms"] = rtt
                    log(f"RTT {rtt:g} ms, R {rate:g} Mbit/s: {run}")
                    out["runs"].append(run)
        finally:
            if server is not None:
                server.kill()
                server.wait()
            teardown(name)
    return out


def receive_table(r: dict[str, Any], command: str) -> str:
    """One row a rate, one column an RTT: what iperf3 received, against R."""
    runs = r["runs"]
    rtts = sorted({x["rtt_ms"] for x in runs})
    rates = sorted({x["rate_mbit"] for x in runs})
    by = {(x["rate_mbit"], x["rtt_ms"]): x for x in runs}

    def cell(run: dict[str, Any] | None) -> str:
        if run is None:
            return "-"
        if run["mbit"] is None:
            return (run["error"] if run["exit"] is None else
                    f"exit {run['exit']}: {run['error'][:60]}")
        text = f"{run['mbit']:.2f} ({run['mbit'] / run['rate_mbit'] - 1:+.1%})"
        return text if held(run) else f"{text}, not held"

    ended = [x for x in runs if x["slowest_mbit"] is not None]
    slowest = min(ended, key=lambda x: x["slowest_mbit"] / x["rate_mbit"], default=None)
    lines = [
        f"`{command}`: `tamebpf run --rate R -- iperf3 -c RECEIVER -R -P {r['streams']} -t "
        f"{r['seconds']:g} -C cubic`, testbeds of {r['link_mbit']:g} Mbit/s both ways, 1 BDP "
        "of queue. What iperf3 received over its whole test, Mbit/s, and against R:", "",
        "| R | " + " | ".join(f"RTT {t:g} ms" for t in rtts) + " |",
        "|---" * (len(rtts) + 1) + "|"]
    lines += [f"| {rate:g} | " + " | ".join(cell(by.get((rate, t))) for t in rtts) + " |"
              for rate in rates]
    held_n = sum(held(x) for x in runs)
    summary = (f"{held_n} of {len(runs)} within {WITHIN:.0%} of R, to the end: exit "
               f"{'0 in every run' if all(x['exit'] == 0 for x in runs) else 'not 0 in some'}, "
               f"{'no EPERM' if not any(x['eperm'] for x in runs) else 'EPERM said'}")
    if slowest is not None:
        summary += (f", the slowest second {slowest['slowest_mbit'] / slowest['rate_mbit']:.0%}"
                    f" of R (R {slowest['rate_mbit']:g} at {slowest['rtt_ms']:g} ms)")
    retrans = sum(x["retransmits"] or 0 for x in runs)
    lines += ["", summary + f"; {retrans} retransmissions in all."]
    start, end = markers(RECEIVE_SECTION)
    return f"{start}\n" + "\n".join(lines) + f"\n{end}\n"


def numbers(text: str) -> list[float]:
    return [float(x) for x in text.split(",")]


def publish(a: argparse.Namespace, results: dict[str, Any], text: str, section: str) -> None:
    """The table on stdout, the raw results to --json, the section to --write."""
    sys.stdout.write(text)
    if a.json:
        write_json(a.json, results)
    if a.write:
        write_section(a.write, section, text, "Pace mode on the testbed")


def main() -> int:
    signal.signal(signal.SIGTERM, lambda s, f: (_ for _ in ()).throw(SystemExit(128 + s)))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--direction", choices=("send", "receive"), default="send",
                    help="uploads beside no cap (default), or downloads under run --rate")
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
    ap.add_argument("--rates", type=numbers, default=[20.0, 50.0, 100.0, 200.0],
                    help="receive: the run's --rate values, Mbit/s (comma-separated)")
    ap.add_argument("--rtts", type=numbers, default=[10.0, 40.0, 100.0],
                    help="receive: the testbeds' RTTs, ms (comma-separated)")
    ap.add_argument("--link", type=float, default=250.0,
                    help="receive: the links' rate both ways, above every R, Mbit/s")
    ap.add_argument("--download-streams", type=int, default=8, help="receive: iperf3 -P")
    ap.add_argument("--download-seconds", type=float, default=10.0, help="receive: iperf3 -t")
    ap.add_argument("--write", metavar="FILE", help="replace the section in this Markdown file")
    ap.add_argument("--json", metavar="FILE", help="also write the raw results here, gzipped "
                    "(FILE.gz unless FILE ends .gz)")
    a = ap.parse_args()
    if a.direction == "receive":
        r = evaluate_receive(a)
        publish(a, r, receive_table(r, "make eval PRESET=cap-pace-receive"), RECEIVE_SECTION)
        return 0 if all(held(x) for x in r["runs"]) else 1
    r = evaluate(a)
    publish(a, r, table(r, "make cap-pace-eval"), SECTION)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

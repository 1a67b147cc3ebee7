#!/usr/bin/env python3
"""Accuracy of `tamebpf advise` on the WAN testbed (make eval).

For each scenario and congestion control: start m cross-traffic flows, run
the advisor's two probes (and a third, for the full order-2 baseline) while
they run, then measure ground truth with the testbed sweep: our aggregate
goodput for each n, and the cross traffic's goodput alone and alongside our
n streams. Every estimator and baseline is scored on
- throughput error per n, (prediction - measurement) / measurement (Eq 15);
- impact error per n, predicted minus measured impact relative to one stream
  (measured: 1 - cross(n) / cross(1));
- advice quality: measured throughput at the advised n over the best measured
  throughput of any n whose measured impact stays within the limit;
- whether the measured impact at the advised n exceeds the limit.
Raw results go to docs/results/eval.json, tables into docs/accuracy.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "userspace"))

from docsection import markers, write_section  # noqa: E402

from tamebpf.advise.probe import Target, run_probe  # noqa: E402
from tamebpf.advise.report import build  # noqa: E402
from tamebpf.model import (  # noqa: E402
    Probe,
    Settings,
    fit_altman,
    fit_throughput,
    predict,
)
from tamebpf.testbed import Testbed, iperf, scenario, teardown  # noqa: E402
from tamebpf.testbed.sweep import run_once  # noqa: E402

START, END = markers("eval_advise")


@dataclass(frozen=True)
class Case:
    name: str
    rate: float
    rtt: float
    queue: int
    aqm: str
    cc: str
    cross: int


def cases(quick: bool) -> list[Case]:
    """Scaled from Fig. 2 of the paper (docs/testbed.md): bottlenecks this
    machine emulates accurately, DropTail and RED, Reno and CUBIC."""
    base = [
        ("100M-20ms-droptail", 100.0, 20.0, 25, "droptail"),
        ("100M-50ms-red", 100.0, 50.0, 100, "red"),
        ("20M-50ms-droptail", 20.0, 50.0, 25, "droptail"),
    ]
    ccs = ("cubic",) if quick else ("cubic", "reno")
    crosses = (2,) if quick else (2, 8)
    return [Case(n, r, t, q, a, cc, m) for (n, r, t, q, a) in base for cc in ccs
            for m in crosses]


def start_cross(tb: Testbed, m: int, cc: str) -> subprocess.Popen[bytes]:
    argv = iperf.client_argv(tb.addresses["receiver"], iperf.PORT_CROSS, m, 3600, cc,
                             json_out=False)
    proc = tb.popen("cross", argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL)
    iperf.wait_for(lambda: iperf.established(tb, "cross", iperf.PORT_CROSS) > m, 10.0,
                   f"{m} cross flows")
    time.sleep(2.0)
    return proc


def score(pred_thru: dict[int, float], pred_impact: dict[int, float], advised: int,
          truth: dict[int, dict[str, float]], limit: float) -> dict[str, Any]:
    ns = sorted(truth)
    errs = [abs(pred_thru[n] - truth[n]["mbit"]) / truth[n]["mbit"] for n in ns
            if n in pred_thru]
    imp_errs = [abs(pred_impact[n] - truth[n]["impact"]) for n in ns
                if n in pred_impact and truth[n].get("impact") is not None]
    allowed = [truth[n]["mbit"] for n in ns if (truth[n].get("impact") or 0.0) <= limit]
    best = max(allowed) if allowed else max(truth[n]["mbit"] for n in ns)
    got = truth[advised]["mbit"] if advised in truth else None
    impact = truth[advised].get("impact") if advised in truth else None

    def p90(xs: list[float]) -> float | None:
        return statistics.quantiles(xs, n=10)[-1] if len(xs) >= 2 else (xs[0] if xs else None)

    return {
        "advised": advised,
        "thru_err_mean": statistics.fmean(errs) if errs else None,
        "thru_err_p90": p90(errs),
        "impact_err_p90": p90(imp_errs),
        "quality": got / best if got is not None and best else None,
        "exceeds": impact is not None and impact > limit,
    }


def evaluate(case: Case, ns: list[int], limit: float, duration: int) -> dict[str, Any]:
    name = "ev" + os.urandom(2).hex()
    tb = Testbed.up(name, case.rate, case.rtt, case.queue, aqm=case.aqm, cc=case.cc)
    servers = []
    try:
        servers = [iperf.start_server(tb, p) for p in (iperf.PORT_MAIN, iperf.PORT_CROSS)]
        target = Target(tb.addresses["receiver"], iperf.PORT_MAIN, tb.namespaces["sender"],
                        case.cc)
        cross = start_cross(tb, case.cross, case.cc) if case.cross else None
        try:
            probes = [run_probe(target, n, duration) for n in (1, 5, 10)]
        finally:
            if cross:
                cross.kill()
                cross.wait()
        settings = Settings(max_impact=limit)
        two = [probes[0], probes[2]]
        result = build(target, two, settings)
        p1, p5, p10 = (Probe(p.streams, p.steady.goodput_mbps) for p in probes)
        models: dict[str, Any] = {"tamebpf (throughput fit)": result.prediction}
        if result.loss_prediction is not None:
            models["tamebpf (loss-RTT fit)"] = result.loss_prediction
        models["linear fit"] = predict(fit_throughput([p1, p10], "linear"), settings)
        models["full order 2 (3 probes)"] = predict(fit_throughput([p1, p5, p10], "full"),
                                                    settings)
        altman = fit_altman([p1, p10])
        # Ground truth at the probe levels' neighbours and every advised n.
        wanted = set(ns) | {p.advice.num_flows for p in models.values()} | {4, 8}
        plan = scenario.SweepPlan(streams=sorted(wanted), cross=[case.cross], repeats=1,
                                  duration_s=4.0, warmup_s=2.0, cc=case.cc)
        truth: dict[int, dict[str, float]] = {}
        for n in sorted(wanted):
            r = run_once(tb, plan, n, case.cross, 0)
            truth[n] = {"mbit": r.mbit, "cross_alone": r.cross_alone_mbit or 0.0,
                        "cross_with": r.cross_with_mbit or 0.0}
            print(f"  {case.name} {case.cc} m={case.cross} n={n}: {r.mbit:.2f} Mbit/s, "
                  f"cross {r.cross_alone_mbit} -> {r.cross_with_mbit}", file=sys.stderr,
                  flush=True)
        one = truth[1]["cross_with"]
        for n in truth:
            truth[n]["impact"] = (max(0.0, 1 - truth[n]["cross_with"] / one)
                                  if case.cross and one > 0 else None)  # type: ignore[assignment]
        scores = {}
        for label, pred in models.items():
            thru = {c.streams: c.throughput for c in pred.curve}
            imp = {c.streams: c.impact for c in pred.curve}
            scores[label] = score(thru, imp, pred.advice.num_flows, truth, limit)
        hacker = {n: n * p1.throughput for n in truth}
        scores["Hacker bound"] = score(hacker, {}, max(truth), truth, limit)
        alt = {n: altman.throughput(n) for n in truth}
        scores["Altman formula"] = score(alt, {}, max(truth), truth, limit)
        for fixed in (4, 8):
            scores[f"fixed {fixed} streams"] = score({}, {}, fixed, truth, limit)
        return {"case": asdict(case), "probes": [
            {"streams": p.streams, "goodput_mbps": p.steady.goodput_mbps,
             "loss_rate": p.steady.loss_rate, "srtt_ms": p.steady.srtt_ms,
             "duration_s": p.duration_s} for p in probes],
            "truth": truth, "scores": scores, "warnings": list(result.warnings)}
    finally:
        for s in servers:
            s.kill()
            s.wait()
        teardown(name)


def fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def tables(results: list[dict[str, Any]], limit: float, argv: list[str]) -> str:
    out = [START, "## Results", "",
           f"Impact limit {limit:.0%}; probes of {results[0]['probes'][0]['duration_s']:.1f} s "
           "wall time each (two for the advice, a third only for the full order-2 baseline).",
           "Throughput error: mean and 90th percentile of |Eq 15| over the measured n. "
           "Impact error: 90th percentile of |predicted - measured|. Quality: measured "
           "throughput at the advised n over the best measured throughput within the limit.",
           ""]
    labels = list(results[0]["scores"])
    for r in results:
        c = r["case"]
        out += [f"### {c['name']}, {c['cc']}, {c['cross']} cross flows", "",
                "| estimator | advised n | thru err mean | thru err p90 | impact err p90 "
                "| quality | over limit |", "|---|---|---|---|---|---|---|"]
        for label in labels:
            s = r["scores"][label]
            out.append(f"| {label} | {s['advised']} | {fmt(s['thru_err_mean'], '.3f')} "
                       f"| {fmt(s['thru_err_p90'], '.3f')} | {fmt(s['impact_err_p90'], '.3f')} "
                       f"| {fmt(s['quality'], '.2f')} | {'yes' if s['exceeds'] else 'no'} |")
        truth = r["truth"]
        out += ["", "Measured: " + ", ".join(
            f"n={n}: {v['mbit']:.1f} Mbit/s (impact {fmt(v.get('impact'), '.2f')})"
            for n, v in sorted(truth.items(), key=lambda kv: int(kv[0]))), ""]
        if r["warnings"]:
            out += ["Advisor warnings: " + "; ".join(r["warnings"]), ""]
    out += ["### Over all scenarios", "",
            "| estimator | mean thru err | impact err p90 (mean) | quality (mean) "
            "| over limit |", "|---|---|---|---|---|"]
    for label in labels:
        ss = [r["scores"][label] for r in results]
        te = [s["thru_err_mean"] for s in ss if s["thru_err_mean"] is not None]
        ie = [s["impact_err_p90"] for s in ss if s["impact_err_p90"] is not None]
        q = [s["quality"] for s in ss if s["quality"] is not None]
        out.append(f"| {label} | {fmt(statistics.fmean(te) if te else None, '.3f')} "
                   f"| {fmt(statistics.fmean(ie) if ie else None, '.3f')} "
                   f"| {fmt(statistics.fmean(q) if q else None, '.2f')} "
                   f"| {sum(s['exceeds'] for s in ss)}/{len(ss)} |")
    out += ["", f"Reproduce: `make eval` (runs `scripts/eval_advise.py {' '.join(argv)}`); raw "
            "results in `docs/results/eval.json`.", END]
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="Reno too, and 8 cross flows")
    ap.add_argument("--streams", default="1,2,4,8,16,30", help="ground-truth stream counts")
    ap.add_argument("--max-impact", type=float, default=0.5)
    ap.add_argument("--duration", type=int, default=2, help="seconds per probe")
    ap.add_argument("--only", help="run only cases whose name contains this")
    ap.add_argument("--write", metavar="FILE", help="write tables into this Markdown file")
    args = ap.parse_args()
    ns = [int(x) for x in args.streams.split(",")]
    results = []
    for case in cases(not args.full):
        if args.only and args.only not in case.name:
            continue
        print(f"case {case.name} {case.cc} m={case.cross}", file=sys.stderr, flush=True)
        results.append(evaluate(case, ns, args.max_impact, args.duration))
    text = tables(results, args.max_impact, sys.argv[1:])
    sys.stdout.write(text)
    if args.write:
        os.makedirs("docs/results", exist_ok=True)
        with open("docs/results/eval.json", "w") as f:
            json.dump(results, f, indent=1)
        write_section(args.write, "eval_advise", text, "Accuracy of tamebpf advise")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Why the advice for BBR senders misses issue 29's targets, from the
stored probes of fresh draws 4-7 (no kernel).

The advice for BBR senders rests on the bottleneck's capacity
(model/share.py), and the advisor refuses when the probes' ACK spacing
gives none it trusts. This replays, per BBR case: the capacity estimate
against the link's TCP goodput, with the reason it was not trusted; and
what the fallback that refusal avoids would have advised, the throughput
fit on the same 1- and 10-stream probes (the loss law's fit, which BBR does
not follow); and the share advice with the link's rate given (`advise
--capacity`), each scored against the case's ground truth as make eval
scores.

    python -m tamebpf_eval.bbr_refusal [--results FILE[,FILE...]]
        [--write docs/results/bbr-refusal.md]
"""

from __future__ import annotations

import json
from typing import Any

from tamebpf.advise.estimate.acktrain import estimate_capacity
from tamebpf.advise.estimate.advice import build
from tamebpf.advise.estimate.capacity import tcp_goodput_mbps
from tamebpf.advise.record import Target
from tamebpf.model import Probe, Settings, fit_throughput, predict
from tamebpf_eval.docsection import replay_main
from tamebpf_eval.score import probe_from_dict, score, truth_table

RESULTS = ("docs/results/eval-fresh4.json,docs/results/eval-fresh5.json,"
           "docs/results/eval-fresh6.json,docs/results/eval-fresh7.json")
SECTION = "bbr_refusal"


def row(rec: dict[str, Any], plan: str) -> str:
    probes = [probe_from_dict(p) for p in rec["advice"][plan]["probes"]]
    rates = [r for p in probes for r in p.ack_pair_mbps]
    top = max(p.steady.goodput_mbps for p in probes)
    est = estimate_capacity(rates, top)
    link = tcp_goodput_mbps(rec["case"]["rate"], probes[-1].steady.mss, False)
    truth = truth_table(rec)
    limit = rec["max_impact"]
    g = {p.streams: p.steady.goodput_mbps for p in probes}
    settings = Settings(max_impact=limit, max_streams=max(32, max(truth)))
    pred = predict(fit_throughput([Probe(1, g[1]), Probe(10, g[10])], "square"), settings)
    s = score({c.streams: c.throughput for c in pred.curve},
              {c.streams: c.impact for c in pred.curve}, pred.advice.num_flows, truth, limit)
    given = build(Target("eval", 0), probes, settings, capacity_mbps=rec["case"]["rate"])
    if given.refused is None:
        gp = given.prediction
        gs = score({c.streams: c.throughput for c in gp.curve},
                   {c.streams: c.impact for c in gp.curve}, gp.advice.num_flows, truth, limit)
        with_capacity = (f"{gp.advice.num_flows}, {gs['thru_err_mean']:.3f}, "
                         f"{(gs['exceeds_by'] or 0.0):+.2f}")
    else:
        with_capacity = "refused"
    t1 = truth[1]["mbit"] or 0.0
    # How far the joining stream's share during the probe was from its settled one.
    ratio = f"{g[1] / t1:.2f}x" if t1 else "-"
    estimate = "-" if est.goodput_mbps is None else \
        f"{est.goodput_mbps:.1f} ({est.goodput_mbps / link - 1:+.0%}), " \
        f"{est.pairs} of {est.considered} pairs"
    return (f"| {rec['key']} | {plan} | {link:.1f} | {estimate} | "
            f"{'yes' if est.trusted else 'no: ' + (est.reason or '')} | "
            f"{g[1]:.1f} / {t1:.1f} ({ratio}) | {pred.advice.num_flows} | "
            f"{s['thru_err_mean']:.3f} | "
            f"{(s['exceeds_by'] or 0.0):+.2f} | {s['quality'] or 0.0:.2f} | {with_capacity} |")


def report(paths: str) -> str:
    """`paths`: the results files, comma-separated."""
    records = []
    for path in paths.split(","):
        with open(path) as f:
            records += [r for r in json.load(f)["records"] if r["case"]["cc"] == "bbr"]
    lines = [f"<!-- {SECTION}:start -->",
             f"## BBR cases of {paths.replace(',', ', ')}: the capacity, and the loss-law "
             "fit the share advice replaces", "",
             "| case | plan | link TCP goodput | ACK-spacing estimate | trusted | 1-stream "
             "probe / truth Mbit/s (ratio) | throughput fit advises | its thru err | over by | "
             "quality | with --capacity: advised, thru err, over by |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [row(r, plan) for r in records for plan in ("default", "quick")
              if plan in r["advice"]]
    lines.append(f"<!-- {SECTION}:end -->")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(replay_main(__doc__ or "", report, SECTION,
                                 "BBR senders: why the targets are not met", RESULTS))

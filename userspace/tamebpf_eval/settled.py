"""Choosing the default stop rule (advise/settled.py) on cases already seen.

Each loss-based case of the two earlier fresh draws (whose settled ground
truth is in docs/results/eval-fresh-settled.json and eval-fresh2-settled.json)
is probed once more, as `advise` does by default (1 then 10 streams, stages
of one test), but every stage runs its full 15 s. While it runs, every
candidate rule is asked at each check, as run_probes asks the real one; the
first time a candidate says "stop", what the probe had measured then (its
steady window and its ACK pair rates so far) is kept under the candidate's
name. Fixed lengths (2, 5, 10 s) are kept the same way for reference. So all
candidates are scored on the very same probes against the same truth
(eval_score), each as if it had ended the probe when it said so.

The choice is made here, on these cases; whether it holds is measured on a
fresh draw it was not chosen on (make eval PRESET=fresh4, docs/accuracy.md).

    make eval PRESET=settled-design                      # measure (about 45 min)
    make eval PRESET=settled-design EVAL_ARGS=--report   # score what was measured
"""

from __future__ import annotations

import gzip
import json
import os
import statistics
from collections.abc import Callable
from dataclasses import asdict, replace
from typing import Any

from tamebpf.advise.estimate.steady import Steady
from tamebpf.advise.probes import run_probes
from tamebpf.advise.settled import Settled
from tamebpf_eval.advise import case_path, cases
from tamebpf_eval.report import OVER_BY, TARGET_QUALITY
from tamebpf_eval.resumable import arguments, measure_missing, publish
from tamebpf_eval.score import OURS, estimators, probe_from_dict
from tamebpf_eval.truth import settle

RESULTS = "docs/results/settled-design.json.gz"
TRUTHS = ("docs/results/eval-fresh-settled.json", "docs/results/eval-fresh2-settled.json")
LIMIT_S = 15.0
FIXED_S = (2.0, 5.0, 10.0)
EPOCHS = (1, 2, 3, 4, 6, 8)
MAX_IMPACT = 0.5  # as the settled truths were scored (make eval PRESET=fresh-settled)


def candidates(last: bool) -> dict[str, Callable[[Steady, Callable[[], list[float]]], Any]]:
    out: dict[str, Callable[[Steady, Callable[[], list[float]]], Any]] = {
        f"k{k}": Settled(epochs=k, capacity=last) for k in EPOCHS}
    out["k3-trend"] = Settled(epochs=3, capacity=last, max_trend=0.15)
    # Over whole epochs the sawtooth averages out, so a looser per-sample
    # error bound and capacity interval may do (short paths hit them first).
    for k in (2, 4, 8):
        out[f"k{k}-rse10"] = Settled(epochs=k, capacity=last, rse=0.10)
        out[f"k{k}-loose"] = Settled(epochs=k, capacity=last, rse=0.10,
                                     capacity_halfwidth=0.10)
    for t in FIXED_S:
        out[f"t{t:g}"] = _after(t)
    return out


def _after(seconds: float) -> Callable[[Steady, Callable[[], list[float]]], bool]:
    def rule(s: Steady, rates: Callable[[], list[float]]) -> bool:
        return s.end_s >= seconds
    return rule


class Recorder:
    """A stop rule that never stops: it notes when each candidate would have,
    and what the probe had measured by then."""

    def __init__(self, last: bool,
                 rules: dict[str, Callable[[Steady, Callable[[], list[float]]], Any]] | None = None
                 ) -> None:
        self.rules = candidates(last) if rules is None else rules
        self.kept: dict[str, dict[str, Any]] = {}

    def __call__(self, s: Steady, rates: Callable[[], list[float]]) -> bool:
        read: list[list[float]] = []

        def once() -> list[float]:  # the ACK log is read at most once a check
            if not read:
                read.append(rates())
            return read[0]

        for name, rule in self.rules.items():
            if name not in self.kept and rule(s, once):
                self.kept[name] = {"at_s": s.end_s, "steady": asdict(s),
                                   "ack_pair_mbps": [round(r, 1) for r in once()]}
        return False


def probe_plan(rec: dict[str, Any], target: Any) -> dict[str, list[dict[str, Any]]]:
    """One 15 s + 15 s probe; every candidate's view of it, as probe records."""
    recorders = [Recorder(False), Recorder(True)]
    pair = run_probes(target, [(1, LIMIT_S), (10, LIMIT_S)], enough=list(recorders))
    setup = pair[0].setup_s or 0.0
    finish = pair[-1].finish_s or 0.0
    plans: dict[str, list[dict[str, Any]]] = {}
    full = []
    for p in pair:
        d = asdict(replace(p, ack_pair_mbps=()))
        d["ack_pair_mbps"] = [round(r, 1) for r in p.ack_pair_mbps]
        full.append(d)
    plans["t15"] = full
    for name in recorders[0].rules:
        views = []
        for k, r in enumerate(recorders):
            seen = r.kept.get(name)
            if seen is None:  # never said stop: ran to the limit
                views.append(full[k])
                continue
            traffic = seen["at_s"] + 0.1  # to the next sample
            views.append({**full[k], "steady": seen["steady"],
                          "ack_pair_mbps": seen["ack_pair_mbps"],
                          "duration_s": traffic + (setup if k == 0 else finish),
                          "stopped": name})
        plans[name] = views
    return plans


def load(path: str) -> list[dict[str, Any]]:
    try:
        with gzip.open(path, "rt") as f:
            return list(json.load(f)["records"])
    except FileNotFoundError:
        return []


def save(path: str, records: list[dict[str, Any]]) -> None:
    tmp = path + ".tmp"
    with gzip.open(tmp, "wt") as f:
        json.dump({"records": records}, f)
    os.replace(tmp, path)


def truths() -> dict[str, dict[str, Any]]:
    out = {}
    for path in TRUTHS:
        with open(path) as f:
            for r in json.load(f)["records"]:
                out[r["key"]] = {**r, "probes": {}}
    return out


# The 1-stream probe weighs 1/11 in the capacity fit's competing flows
# (model/capacity.py), so it may not need the 10-stream probe's epochs:
# stage rules are independent here, so any first-stage rule pairs with any
# second-stage one ("FIRST+SECOND").
COMBOS = [(a, b) for a in ("t2", "k1", "k2", "k2-rse10") for b in ("k4", "k4-rse10", "k6")]


def with_combos(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for rec in records:
        probes = dict(rec["probes"])
        for a, b in COMBOS:
            if a in probes and b in probes:
                probes[f"{a}+{b}"] = [probes[a][0], probes[b][1]]
        out.append({**rec, "probes": probes})
    return out


# A floor in RTTs on top of an epoch rule: the stage ends at the later of
# the rule's stop and FLOOR smoothed RTTs. Only snapshots at the rule's stop
# and at 5, 10 and 15 s were kept, so the stage is taken at the first of
# them at or after that time: a later stop than the real rule's, never an
# earlier one (its probing time is over-stated, not its accuracy).
FLOORS = (100, 150)
FLOORED = ("k2", "k4", "k6")


def _floored(probes: dict[str, list[dict[str, Any]]], stage: int, rule: str,
             floor: float) -> dict[str, Any]:
    mine = probes[rule][stage]
    if mine.get("stopped") != rule:
        return probes["t15"][stage]
    srtt = (mine["steady"]["srtt_ms"] or 0.0) / 1000
    want = max(mine["steady"]["end_s"], floor * srtt)
    for name in (rule, "t5", "t10"):
        v = probes[name][stage]
        if v.get("stopped") == name and v["steady"]["end_s"] >= want - 0.05:
            return v
    return probes["t15"][stage]


def with_floors(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for rec in records:
        probes = dict(rec["probes"])
        if all(n in probes for n in ("t5", "t10", "t15", *FLOORED)):
            for rule in FLOORED:
                for floor in FLOORS:
                    probes[f"{rule}-floor{floor}"] = [_floored(rec["probes"], k, rule, floor)
                                                      for k in (0, 1)]
        out.append({**rec, "probes": probes})
    return out


def report(records: list[dict[str, Any]]) -> str:
    records = with_floors(with_combos(records))
    names = ["t2", "t5", "t10", "t15"] + [f"k{k}" for k in EPOCHS] + ["k3-trend"] + \
        [f"k{k}-{v}" for v in ("rse10", "loose") for k in (2, 4, 8)] + \
        [f"{a}+{b}" for a, b in COMBOS] + \
        [f"{r}-floor{f}" for r in FLOORED for f in FLOORS]
    rows = []
    for name in names:
        errs, quality, over, secs, short = [], [], 0, [], []
        for rec in records:
            if name not in rec["probes"]:
                continue
            s = estimators(rec, MAX_IMPACT, name)[OURS]
            if s["thru_err_mean"] is not None:
                errs.append(s["thru_err_mean"])
            if s["quality"] is not None:
                quality.append(s["quality"])
            over += (s["exceeds_by"] or 0) > OVER_BY
            t = sum(p["duration_s"] for p in rec["probes"][name])
            secs.append(t)
            if rec["case"]["rtt"] <= 30:
                short.append(t)
        if not errs:
            continue
        rows.append(
            f"| {name} | {len(errs)} | {statistics.fmean(errs):.3f} | "
            f"{statistics.median(errs):.3f} | "
            f"{sum(q >= TARGET_QUALITY for q in quality)}/{len(quality)} "
            f"| {over}/{len(errs)} | {statistics.median(secs):.1f} / {max(secs):.1f} | "
            + (f"{statistics.median(short):.1f}" if short else "-") + " |")
    head = ("| rule | cases | thru err mean | median | >= 95% of best | over by > 0.05 "
            "| probing median / worst s | median s, RTT <= 30 ms |\n"
            "|---|---|---|---|---|---|---|---|\n")
    per_case = ["", "| case | " + " | ".join(names) + " |",
                "|---|" + "---|" * len(names)]
    for rec in records:
        cells = []
        for name in names:
            if name not in rec["probes"]:
                cells.append("-")
                continue
            s = estimators(rec, MAX_IMPACT, name)[OURS]
            t = sum(p["duration_s"] for p in rec["probes"][name])
            err = s["thru_err_mean"]
            cells.append(f"{err:.2f} ({t:.0f} s)" if err is not None else f"- ({t:.0f} s)")
        per_case.append(f"| {rec['key']} | " + " | ".join(cells) + " |")
    return ("<!-- settled_design:start -->\n## Stop rules on the earlier draws (make "
            "eval-settled-design)\n\nEvery rule scored on the same 15 s + 15 s probes as if it "
            "had ended them when it said so; tN: a fixed N s; kN: advise/settled.Settled with N "
            f"epochs. Impact limit {MAX_IMPACT:g}, throughput error the mean over the truth's "
            "points.\n\n" + head + "\n".join(rows) + "\n" + "\n".join(per_case)
            + "\n<!-- settled_design:end -->\n")


def main() -> int:
    ap = arguments(__doc__, f"default: {RESULTS}")
    args = ap.parse_args()
    results = args.results or RESULTS
    records = load(results)
    if not args.report:
        known = truths()

        def measure(case: Any) -> dict[str, Any]:
            with case_path(case, "sd") as (tb, reference, target):
                settle(tb, case.cross, reference)
                plans = probe_plan(known[case.key], target)
            return {**known[case.key], "probes": plans, "default_plan": "t15"}
        todo = [c for c in cases([], [], None, "fresh") + cases([], [], None, "fresh2")
                if c.key in known]
        measure_missing(records, todo, args.only, measure, lambda rs: save(results, rs))
    publish(report(records), args.write, "settled_design", "Choosing the stop rule")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["probe_from_dict"]

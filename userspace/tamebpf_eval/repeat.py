"""How far the default advice moves from run to run on one path.

Fresh draws 6 and 7 ran the same settled pair twice on some long crowded
paths (beside another plan whose rules came to the same there), and the
two runs advised different counts: 3 against 18 streams, 10 against 32.
So part of a single run's error there is the run, not the model. This
re-runs `advise` as it runs by default, RUNS times on each loss-based case
of a draw whose RTT is at least --min-rtt, each run from a settled path,
and scores every run against the draw's stored ground truth with the
draw's own scoring (fresh_draw.plan_score). It measures the spread of one
plan and chooses nothing: these cases were seen before.

    make eval PRESET=repeat-fresh7                      # measure (~2 min a case)
    make eval PRESET=repeat-fresh7 EVAL_ARGS=--report   # score what was measured
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from typing import Any

from tamebpf_eval.advise import Case, case_path, load, log, save
from tamebpf_eval.fresh_draw import DRAWS, Draw, advice_record, advise_once, draw, plan_score
from tamebpf_eval.report import OVER_BY, TARGET_QUALITY, fmt
from tamebpf_eval.resumable import arguments, measure_missing, publish
from tamebpf_eval.truth import settle

RUNS = 3
DRAW_RUN = "draw"  # the draw's own run of the default, kept beside the repeats
SPREAD = 2.0  # a case "moves" when its largest advised n is this many times its smallest


def results_path(d: Draw) -> str:
    return f"docs/results/repeat-{d.name}.json"


def chosen(d: Draw, min_rtt_ms: float) -> list[tuple[Case, dict[str, Any]]]:
    """The draw's loss-based cases of at least min_rtt_ms, with their records."""
    stored = {r["key"]: r for r in load(d.results)}
    return [(c, stored[c.key]) for c in draw(d)
            if c.cc != "bbr" and c.rtt >= min_rtt_ms and c.key in stored]


def long_path_options(ap: argparse.ArgumentParser) -> None:
    """--draw and --min-rtt: which draw's long loss-based cases to run."""
    ap.add_argument("--draw", choices=sorted(DRAWS), required=True)
    ap.add_argument("--min-rtt", type=float, default=80.0, metavar="MS",
                    help="only cases of at least this RTT (default %(default)s)")


def measure_case(case: Case, stored: dict[str, Any], d: Draw, runs: int) -> dict[str, Any]:
    out = []
    with case_path(case, "rp") as (tb, reference, target):
        for i in range(runs):
            settle(tb, case.cross, reference)
            result, wall = advise_once(target, "default", d.default_order)
            out.append(advice_record(result, wall))
            log(f"  run {i + 1}/{runs}: {result.prediction.advice.num_flows} streams "
                f"in {wall:.1f} s")
    keep = {k: stored[k] for k in ("case", "key", "max_impact", "truth", "cross_alone")}
    return {**keep, "runs": out, DRAW_RUN: stored["advice"]["default"]}


def run_scores(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """Every run's score, the draw's own first; refused runs left out."""
    advice = {DRAW_RUN: rec[DRAW_RUN]} | {f"run{i}": a for i, a in enumerate(rec["runs"], 1)}
    as_draw = {**rec, "advice": advice}
    scores = [plan_score(as_draw, name) for name in advice]
    return [s for s in scores if s is not None]


def summary(records: list[dict[str, Any]]) -> list[str]:
    per_case = [run_scores(r) for r in records]
    runs = [s for ss in per_case for s in ss]
    errs = [s["thru_err_mean"] for s in runs if s["thru_err_mean"] is not None]
    moved = sum(1 for ss in per_case if ss and
                max(s["advised"] for s in ss) >= SPREAD * min(s["advised"] for s in ss))
    ranges = [max(e) - min(e) for ss in per_case
              if len(e := [s["thru_err_mean"] for s in ss if s["thru_err_mean"] is not None]) > 1]
    good = sum(1 for s in runs if s["quality"] is not None and s["quality"] >= TARGET_QUALITY)
    over = sum(1 for s in runs if (s["exceeds_by"] or 0.0) > OVER_BY)
    return [
        "| cases | runs scored | >= 95% of best | over by > 0.05 | thru err median / mean "
        f"| cases whose advised n moved {SPREAD:g}x or more | a case's thru err range, median |",
        "|---|---|---|---|---|---|---|",
        f"| {len(records)} | {len(runs)} | {good}/{len(runs)} | {over}/{len(runs)} | "
        f"{fmt(statistics.median(errs) if errs else None, '.3f')} / "
        f"{fmt(statistics.fmean(errs) if errs else None, '.3f')} | {moved}/{len(records)} | "
        f"{fmt(statistics.median(ranges) if ranges else None, '.3f')} |",
    ]


def per_case(records: list[dict[str, Any]]) -> list[str]:
    out = ["| case | advised n (the draw's run first) | quality | thru err |", "|---|---|---|---|"]
    for r in records:
        ss = run_scores(r)
        out.append(f"| {r['key']} | " + ", ".join(str(s["advised"]) for s in ss) + " | "
                   + ", ".join(fmt(s["quality"], ".2f") for s in ss) + " | "
                   + ", ".join(fmt(s["thru_err_mean"], ".3f") for s in ss) + " |")
    return out


def report(records: list[dict[str, Any]], d: Draw, section: str) -> str:
    return "\n".join([
        f"<!-- {section}:start -->",
        f"## The default, run again on {d.name}'s long paths (make eval-repeat-{d.name})", "",
        f"{len(records)} loss-based cases; each run of `advise` by default from a settled path, "
        "scored against the draw's stored ground truth (impact limit "
        f"{records[0]['max_impact'] if records else '-'}); the draw's own run counts as one.", "",
        *summary(records), "", *per_case(records), f"<!-- {section}:end -->", ""])


def measure_long_paths(args: argparse.Namespace, d: Draw, records: list[dict[str, Any]],
                       results: str,
                       measure: Callable[[Case, dict[str, Any]], dict[str, Any]]) -> None:
    """Measure, with measure(case, the draw's record of it), each of the
    draw's long loss-based cases not yet in records; save after each."""
    if args.report:
        return
    cases = chosen(d, args.min_rtt)
    stored = {c.key: rec for c, rec in cases}
    measure_missing(records, [c for c, _ in cases], args.only,
                    lambda case: measure(case, stored[case.key]),
                    lambda rs: save(results, rs))


def main() -> int:
    ap = arguments(__doc__, "default: docs/results/repeat-DRAW.json")
    long_path_options(ap)
    ap.add_argument("--runs", type=int, default=RUNS, help="runs a case (default %(default)s)")
    args = ap.parse_args()
    d = DRAWS[args.draw]
    results = args.results or results_path(d)
    records = load(results)
    measure_long_paths(args, d, records, results,
                       lambda case, stored: measure_case(case, stored, d, args.runs))
    section = f"repeat_{d.name}"
    publish(report(records, d, section), args.write, section,
            "The default advice, run again on the same paths")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

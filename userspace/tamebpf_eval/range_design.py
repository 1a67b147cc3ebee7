"""The advised count's range, fitted on the round-to-round spread of draws 3-7.

Re-reads stored records (no kernel, no testbed): every run of today's
default on the fresh draws 3-7 (and draw 7's 3 repeats), rebuilt with the
advisor's own code (estimate/advice.py build) from its stored probes, and
every truth round of its case (2 per case; 4 on draw 7's long loss-based
paths, truth-rounds-fresh7). A scoring is one (run, truth round): the range
holds it when that round's best nondisruptive count lies inside it.

The range is estimate/spread.py's: the advice recomputed with each probe's
goodput moved by a factor 1 + s. s is chosen per class (RTT < 80 ms or
>= 80 ms; every probe settled, or one not) by a rule fixed before any
result was seen: the smallest s on a grid of 0.025 steps whose coverage of
the training scorings in that class reaches 85% (the largest of the grid if
none does). It is checked by holding out one draw at a time: fitted on the
other draws, scored on the held-out one. Beside it, the range as narrow as
the probes' own samples make it (their standard errors, i.i.d.).

    make eval PRESET=range-design    # -> docs/results/range-design.md
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tamebpf.estimate.advice import build, streams_range
from tamebpf.estimate.record import AdviseResult, Target
from tamebpf.estimate.spread import PathClass, path_class
from tamebpf.estimate.steady import window_samples
from tamebpf.model import ModelInputError, Settings
from tamebpf.model.confidence import relative_standard_error
from tamebpf_eval.advise import load
from tamebpf_eval.docsection import replay_main
from tamebpf_eval.score import probe_from_dict, truth_table

SECTION = "range_design"
TARGET_COVERAGE = 0.85
TARGET_RATIO = 2.0
GRID = tuple(round(0.025 * k, 3) for k in range(0, 41))  # s = 0 .. 1.0
# Each draw that measured today's default, with the plan that ran it (draw
# 5 named it "both", beside a capacity-first default it did not keep).
DRAWS = (("fresh3", "default"), ("fresh4", "default"), ("fresh5", "both"),
         ("fresh6", "default"), ("fresh7", "default"))
Table = dict[int, dict[str, float | None]]
Key = tuple[bool, bool]


@dataclass
class Run:
    draw: str
    case: str
    result: AdviseResult
    limit: float
    cls: PathClass
    bests: list[int]  # each truth round's best nondisruptive count
    recorded_n: int
    ranges: dict[float, tuple[int, int]] = field(default_factory=dict)  # by s, computed once

    @property
    def key(self) -> Key:
        return (self.cls.long, self.cls.unsettled)


def _records(results: str, name: str) -> list[dict[str, Any]]:
    for where in (results, os.path.join(results, "history")):
        recs = load(os.path.join(where, f"{name}.json"))
        if recs:
            return recs
    return []


def _round(truth: dict[str, Any], k: int) -> Table:
    return truth_table({"truth": {
        n: {"mbit": [v["mbit"][k]], "cross_with": [v["cross_with"][k]] if v["cross_with"] else []}
        for n, v in truth.items()}})


def _rounds(truth: dict[str, Any]) -> list[Table]:
    return [_round(truth, k) for k in range(len(next(iter(truth.values()))["mbit"]))]


def best_count(table: Table, limit: float) -> int | None:
    allowed = [(t["mbit"], n) for n, t in table.items()
               if t["mbit"] and (t["impact"] or 0.0) <= limit]
    return max(allowed)[1] if allowed else None


def _merged_truth(rec: dict[str, Any]) -> dict[str, Any]:
    """truth-rounds-fresh7: the draw's 2 stored rounds and the 2 added."""
    return {n: {"mbit": v["mbit"] + rec["added"][n]["mbit"],
                "cross_with": v["cross_with"] + rec["added"][n]["cross_with"]}
            for n, v in rec["truth"].items() if n in rec["added"]}


def _rebuilt(run: dict[str, Any], limit: float) -> tuple[AdviseResult, PathClass] | None:
    if run.get("refused") or not run.get("probes"):
        return None
    probes = [probe_from_dict(p) for p in run["probes"]]
    try:
        result = build(Target("eval"), probes, Settings(max_impact=limit))
    except ModelInputError:
        return None
    if result.refused is not None:
        return None
    return result, path_class([p.path_srtt_us / 1000 or p.steady.srtt_ms or 0.0 for p in probes],
                              [p.stopped for p in probes])


def runs(results: str) -> list[Run]:
    more = {r["key"]: r for r in _records(results, "truth-rounds-fresh7")}
    out: list[Run] = []

    def add(draw: str, rec: dict[str, Any], run: dict[str, Any], truth: dict[str, Any]) -> None:
        limit = rec["max_impact"]
        built = _rebuilt(run, limit)
        bests = [b for b in (best_count(t, limit) for t in _rounds(truth)) if b is not None]
        if built is not None and bests:
            out.append(Run(draw, rec["key"], built[0], limit, built[1], bests, run["n"]))

    for draw, plan in DRAWS:
        for rec in _records(results, f"eval-{draw}"):
            truth = _merged_truth(more[rec["key"]]) if rec["key"] in more else rec["truth"]
            if plan in rec["advice"]:
                add(draw, rec, rec["advice"][plan], truth)
    for rec in _records(results, "repeat-fresh7"):
        truth = _merged_truth(more[rec["key"]]) if rec["key"] in more else rec["truth"]
        for run in rec["runs"]:
            add("fresh7", rec, run, truth)
    return out


def _range(run: Run, s: float) -> tuple[int, int]:
    if s not in run.ranges:
        got = streams_range(run.result, Settings(max_impact=run.limit), spread=s)
        assert got is not None  # refused runs are not kept
        run.ranges[s] = got
    return run.ranges[s]


def _iid(run: Run) -> float:
    """The widest probe's relative standard error: the range if the probes'
    samples were independent draws of the path."""
    return max(relative_standard_error(p.steady.noise, window_samples(p.steady))
               for p in run.result.probes)


def scorings(rs: list[Run], spread: dict[Key, float] | None) -> Iterator[tuple[bool, float]]:
    """(the range holds the round's best count, high / low) per scoring;
    spread None: the i.i.d. range."""
    for r in rs:
        lo, hi = _range(r, _iid(r) if spread is None else spread[r.key])
        for b in r.bests:
            yield lo <= b <= hi, hi / lo


def fit(rs: list[Run]) -> dict[Key, float]:
    """The rule fixed first: per class, the smallest s whose coverage of the
    training scorings reaches TARGET_COVERAGE."""
    out: dict[Key, float] = {}
    for key in [(a, b) for a in (False, True) for b in (False, True)]:
        mine = [r for r in rs if r.key == key]
        out[key] = GRID[-1]
        for s in GRID:
            got = [h for h, _ in scorings(mine, {key: s})]
            if not got or sum(got) >= TARGET_COVERAGE * len(got):
                out[key] = s
                break
    return out


def _cells(scored: list[tuple[bool, float]]) -> str:
    if not scored:
        return "0 | - | - |"
    held = sum(h for h, _ in scored)
    return (f"{len(scored)} | {held}/{len(scored)} ({held / len(scored):.0%}) | "
            f"{statistics.median(r for _, r in scored):.2f} |")


def _class_name(key: Key) -> str:
    return ("RTT >= 80 ms" if key[0] else "RTT < 80 ms") + (", a probe unsettled" if key[1]
                                                           else ", settled")


def rows(results: str) -> list[str]:
    rs = runs(results)
    moved = sum(r.result.prediction.advice.num_flows != r.recorded_n for r in rs)
    out = [f"{len(rs)} runs rebuilt from their stored probes; the rebuilt count differs from "
           f"the recorded one in {moved} (the advisor changed since those draws).",
           "", "| held out | fitted s (short settled, short unsettled, long settled, long "
           "unsettled) | scorings | range holds the round's best | median high/low |",
           "|---|---|---|---|---|"]
    held: list[tuple[bool, float]] = []
    for draw, _ in DRAWS:
        test = [r for r in rs if r.draw == draw]
        if not test:
            continue
        table = fit([r for r in rs if r.draw != draw])
        got = list(scorings(test, table))
        held += got
        out.append(f"| {draw} | {_fmt(table)} | " + _cells(got))
    out.append("| all, held out | | " + _cells(held))
    whole = fit(rs)
    out += ["", "| range | class | scorings | range holds the round's best | median high/low |",
            "|---|---|---|---|---|"]
    for key in sorted(whole):
        mine = [r for r in rs if r.key == key]
        out.append(f"| fitted on all (s = {whole[key]:.3f}) | {_class_name(key)} | "
                   + _cells(list(scorings(mine, whole))))
    out.append("| fitted on all | all | " + _cells(list(scorings(rs, whole))))
    out.append("| i.i.d. (the probes' standard errors) | all | " + _cells(list(scorings(rs, None))))
    out.append("| none (the advised count alone) | all | "
               + _cells(list(scorings(rs, dict.fromkeys(whole, 0.0)))))
    return out


def _fmt(table: dict[Key, float]) -> str:
    return ", ".join(f"{table[k]:.3f}" for k in sorted(table))


def report(results: str) -> str:
    start, end = f"<!-- {SECTION}:start -->", f"<!-- {SECTION}:end -->"
    return "\n".join([
        start, "## The count range on draws 3-7, one draw held out at a time "
        "(make eval PRESET=range-design)", "",
        "Targets: the range holds the best nondisruptive count of a truth round in >= 85% of "
        "(run, round) scorings, median high/low <= 2.", "", *rows(results), end, ""])


if __name__ == "__main__":
    raise SystemExit(replay_main(__doc__ or "", report, SECTION, "The advised count's range",
                                 os.path.join("docs", "results")))

"""The advised count's range, fitted on the round-to-round spread of the fresh draws.

Re-reads stored records (no kernel, no testbed): every run of today's
default on a set of fresh draws (3-7, and draw 7's 3 repeats; 3-8; or 3-8
and 11), rebuilt with the advisor's own code (estimate/advice.py build)
from its stored probes, and every truth round of its case (2 per case on
draws 3-6; 4 on draw 7's long loss-based paths, truth-rounds-fresh7; 3 on
draws 8 and 11). A scoring is one (run, truth round): the range holds it
when that round's best nondisruptive count lies inside it (a round with no
such count is left out).

The range is estimate/spread.py's: the advice recomputed with each probe's
goodput moved by a factor 1 + s. s is chosen per class (RTT < 80 ms or
>= 80 ms; every probe settled, or one not) by a rule fixed before any
result was seen: the smallest s on a grid of 0.025 steps whose coverage of
the training scorings in that class reaches 85% (the largest of the grid if
none does). It is checked by holding out one draw at a time: fitted on the
other draws, scored on the held-out one. Beside it, the range as narrow as
the probes' own samples make it (their standard errors, i.i.d.). A set
with a set before it (3-8 after 3-7) also scores both sets' fits on each
part, and prints its fit as the Python literal of estimate/spread.py's
SPREAD.

On the product's set (PRODUCT_DRAWS) the page also scores the impact range
at the advised count widened by that table (impact_range_design.py).

    make eval PRESET=range-design      # draws 3-7 -> docs/results/range-design.md
    make eval PRESET=range-design-8    # draws 3-8 -> docs/results/range-design-8.md
    make eval PRESET=range-design-11   # draws 3-8 and 11 -> docs/results/range-design-11.md
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tamebpf.estimate.advice import build, streams_range
from tamebpf.estimate.record import AdviseResult, Target
from tamebpf.estimate.spread import SPREAD, PathClass, path_class
from tamebpf.estimate.steady import window_samples
from tamebpf.model import ModelInputError, Settings
from tamebpf.model.confidence import relative_standard_error
from tamebpf_eval.advise import load
from tamebpf_eval.by_class import best_count, measured_impact, rounds_of, some_rounds
from tamebpf_eval.docsection import write_section
from tamebpf_eval.impact_range_design import rows as impact_rows
from tamebpf_eval.score import probe_from_dict

SECTION = "range_design"
TITLE = "The advised count's range"
TARGET_COVERAGE = 0.85
TARGET_RATIO = 2.0
GRID = tuple(round(0.025 * k, 3) for k in range(0, 41))  # s = 0 .. 1.0
Key = tuple[bool, bool]


@dataclass(frozen=True)
class DrawSet:
    """The draws one fit is made on, each with the plan that ran today's
    default there (draw 5 named it "both", beside a capacity-first default
    it did not keep), and the preset that writes its page."""

    name: str
    preset: str
    draws: tuple[tuple[str, str], ...]


_DRAWS_3_7 = (("fresh3", "default"), ("fresh4", "default"), ("fresh5", "both"),
              ("fresh6", "default"), ("fresh7", "default"))
# In order: a set's page sets its fit beside the one of the set before it.
DRAW_SETS = {s.name: s for s in (
    DrawSet("3-7", "range-design", _DRAWS_3_7),
    # Draw 8 checked the fit on 3-7; its rule 1 (fresh8-decision-rules.md)
    # refits on 3-8 if the range held under 85% there.
    DrawSet("3-8", "range-design-8", _DRAWS_3_7 + (("fresh8", "default"),)),
    # Draw 11 checked the fit on 3-8 on cases it was not fitted on; its
    # rule 1 (fresh11-decision-rules.md) refits on 3-8 and 11 if the range
    # held under 85% there.
    DrawSet("3-8+11", "range-design-11",
            _DRAWS_3_7 + (("fresh8", "default"), ("fresh11", "default"))),
)}
# The set estimate/spread.py's SPREAD was fitted on: its unit test refits it.
PRODUCT_DRAWS = "3-8+11"


@dataclass
class Run:
    draw: str
    case: str
    result: AdviseResult
    limit: float
    cls: PathClass
    bests: list[int]  # each truth round's best nondisruptive count
    recorded_n: int
    recorded_range: tuple[int, int] | None  # as the draw's advisor gave it
    rounds: int  # the case's truth rounds, those without a best count too
    # The measured impact at the rebuilt advised count, the median of the
    # rounds (None: the truth did not measure that count).
    impact: float | None = None
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


def round_bests(truth: dict[str, Any], limit: float) -> list[int | None]:
    """Each truth round's best nondisruptive count, round by round (None:
    no count of that round within the limit)."""
    rec = {"truth": truth}
    return [best_count(some_rounds(rec, (k,)), limit) for k in range(rounds_of(rec))]


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


def runs(results: str, draws: str) -> list[Run]:
    """The runs of DRAW_SETS[draws] that the advisor rebuilds unrefused and
    whose case has a round with a best count."""
    more = {r["key"]: r for r in _records(results, "truth-rounds-fresh7")}
    out: list[Run] = []

    def add(draw: str, rec: dict[str, Any], run: dict[str, Any], truth: dict[str, Any]) -> None:
        limit = rec["max_impact"]
        built = _rebuilt(run, limit)
        bests = [b for b in round_bests(truth, limit) if b is not None]
        got = run.get("streams_range")
        if built is not None and bests:
            n = built[0].prediction.advice.num_flows
            out.append(Run(draw, rec["key"], built[0], limit, built[1], bests, run["n"],
                           (got[0], got[1]) if got else None, rounds_of({"truth": truth}),
                           measured_impact({"truth": truth}, n)))

    names = [draw for draw, _ in DRAW_SETS[draws].draws]
    for draw, plan in DRAW_SETS[draws].draws:
        for rec in _records(results, f"eval-{draw}"):
            truth = _merged_truth(more[rec["key"]]) if rec["key"] in more else rec["truth"]
            if plan in rec["advice"]:
                add(draw, rec, rec["advice"][plan], truth)
    if "fresh7" in names:
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
        yield from _scored(r, _range(r, _iid(r) if spread is None else spread[r.key]))


def recorded_scorings(rs: list[Run]) -> Iterator[tuple[bool, float]]:
    """The same scorings of the ranges the draw's own advisor recorded (runs
    without one are left out)."""
    for r in rs:
        if r.recorded_range is not None:
            yield from _scored(r, r.recorded_range)


def _scored(r: Run, got: tuple[int, int]) -> Iterator[tuple[bool, float]]:
    lo, hi = got
    for b in r.bests:
        yield lo <= b <= hi, hi / lo


def truth_scorings(rs: list[Run]) -> Iterator[tuple[bool, float]]:
    """The same scorings of the rounds' own range (the fewest to the most
    of the case's rounds' best counts; it holds them all): how wide a range
    has to be when the rounds alone part, the width a perfect measurement
    of every round would show."""
    for r in rs:
        yield from _scored(r, (min(r.bests), max(r.bests)))


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
    return f"{len(scored)} | " + _held(scored)


def _held(scored: list[tuple[bool, float]]) -> str:
    """holds | median high/low, as two cells."""
    if not scored:
        return "- | - |"
    held = sum(h for h, _ in scored)
    return (f"{held}/{len(scored)} ({held / len(scored):.0%}) | "
            f"{statistics.median(r for _, r in scored):.2f} |")


KEYS: tuple[Key, ...] = ((False, False), (False, True), (True, False), (True, True))


def _class_name(key: Key) -> str:
    return ("RTT >= 80 ms" if key[0] else "RTT < 80 ms") + (", a probe unsettled" if key[1]
                                                           else ", settled")


def rows(rs: list[Run], draws: DrawSet) -> list[str]:
    moved = sum(r.result.prediction.advice.num_flows != r.recorded_n for r in rs)
    out = [f"{len(rs)} runs rebuilt from their stored probes; the rebuilt count differs from "
           f"the recorded one in {moved} (the advisor changed since those draws).",
           "", "| held out | fitted s (short settled, short unsettled, long settled, long "
           "unsettled) | scorings | range holds the round's best | median high/low |",
           "|---|---|---|---|---|"]
    held: list[tuple[bool, float]] = []
    for draw, _ in draws.draws:
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
    out.append("| the rounds' own (their best counts, fewest to most) | all | "
               + _cells(list(truth_scorings(rs))))
    before = _before(draws)
    if before is not None:
        out += ["", *beside(rs, draws, before)]
    return out


def _before(draws: DrawSet) -> DrawSet | None:
    names = list(DRAW_SETS)
    at = names.index(draws.name)
    return DRAW_SETS[names[at - 1]] if at > 0 else None


def beside(rs: list[Run], draws: DrawSet, before: DrawSet) -> list[str]:
    """This set's fit and the set before's, each scored on the draws of the
    set before and on each draw added since: what the refit changes."""
    old = {d for d, _ in before.draws}
    added = [d for d, _ in draws.draws if d not in old]
    parts = [(f"draws {before.name}", [r for r in rs if r.draw in old])]
    parts += [(d, [r for r in rs if r.draw == d]) for d in added]
    theirs, mine = fit(parts[0][1]), fit(rs)
    product = [s.name for s, t in ((before, theirs), (draws, mine)) if t == SPREAD]
    read = "; ".join(_read(d, [r for r in rs if r.draw == d]) for d, _ in draws.draws)
    out = [f"### The fit on draws {draws.name} beside the fit on draws {before.name}", "",
           f"Read: {read}.", "",
           "estimate/spread.py's SPREAD is "
           + (f"the fit on draws {product[0]}." if product else "neither fit.")
           + f" The fit on {before.name} scored on {', '.join(added)} is held out (not fitted "
           "on it); every other cell is in-sample.", "",
           f"| scored on | class | scorings | s ({before.name}) | holds | median high/low | "
           f"s ({draws.name}) | holds | median high/low |", "|---|---|---|---|---|---|---|---|---|"]
    for name, part in parts:
        for key in (*KEYS, None):
            mine_runs = [r for r in part if key is None or r.key == key]
            n = sum(len(r.bests) for r in mine_runs)
            s_then = "" if key is None else f"{theirs[key]:.3f}"
            s_now = "" if key is None else f"{mine[key]:.3f}"
            out.append(f"| {name} | {'all' if key is None else _class_name(key)} | {n} | "
                       f"{s_then} | " + _held(list(scorings(mine_runs, theirs)))
                       + f" {s_now} | " + _held(list(scorings(mine_runs, mine))))
    for d in added:
        got = list(recorded_scorings([r for r in rs if r.draw == d]))
        held = sum(h for h, _ in got)
        out += ["", f"{d}'s ranges as its own advisor recorded them, on the same scorings: "
                + (f"{held}/{len(got)} ({held / len(got):.0%}) hold, median high/low "
                   f"{statistics.median(x for _, x in got):.2f}" if got else "none recorded")
                + "."]
    out += ["", f"The fit on draws {draws.name} as estimate/spread.py's table:", "",
            "```python", *spread_literal(mine), "```"]
    return out


def _read(draw: str, mine: list[Run]) -> str:
    left = sum(r.rounds - len(r.bests) for r in mine)
    return (f"{draw} {len(mine)} runs, {sum(len(r.bests) for r in mine)} scorings"
            + (f" ({left} rounds with no best count left out)" if left else ""))


def spread_literal(table: dict[Key, float]) -> list[str]:
    """The lines of estimate/spread.py's SPREAD holding `table`."""
    return ["SPREAD: dict[tuple[bool, bool], float] = {",
            *(f"    {k}: {table[k]:.3f}," for k in KEYS), "}"]


def _fmt(table: dict[Key, float]) -> str:
    return ", ".join(f"{table[k]:.3f}" for k in sorted(table))


def report(results: str, draws: DrawSet) -> str:
    start, end = f"<!-- {SECTION}:start -->", f"<!-- {SECTION}:end -->"
    rs = runs(results, draws.name)
    by_class = [(_class_name(k), SPREAD[k], [r for r in rs if r.key == k]) for k in KEYS]
    before = _before(draws)
    old = set() if before is None else {d for d, _ in before.draws}
    # The draws added since the set before, alone (in-sample all the same).
    added = [(f"{d} alone", None, [r for r in rs if r.draw == d]) for d, _ in draws.draws
             if d not in old]
    return "\n".join([
        start, f"## The count range on draws {draws.name}, one draw held out at a time "
        f"(make eval PRESET={draws.preset})", "",
        "Targets: the range holds the best nondisruptive count of a truth round in >= 85% of "
        "(run, round) scorings, median high/low <= 2.", "", *rows(rs, draws),
        # The impact range's score is in-sample on the draws the product's
        # table was fitted on, and made with that table: only for that set.
        *(["", *impact_rows([*by_class, ("all", None, rs), *added], GRID)]
          if draws.name == PRODUCT_DRAWS else []), end, ""])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--draws", choices=list(DRAW_SETS), default=PRODUCT_DRAWS,
                    help="the draws to fit on (default %(default)s: estimate/spread.py's)")
    ap.add_argument("--results", default=os.path.join("docs", "results"),
                    help="where the records are (default %(default)s)")
    ap.add_argument("--write", metavar="FILE", help="write the section into this Markdown file")
    args = ap.parse_args(argv)
    text = report(args.results, DRAW_SETS[args.draws])
    sys.stdout.write(text)
    if args.write:
        write_section(args.write, SECTION, text, TITLE)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The count range against the stored draws' truth rounds (tamebpf_eval/
range_design.py): the product's spread must hold the best count of a truth
round in most scorings, as docs/results/range-design.md reports. A range as
narrow as the probes' own samples make it (i.i.d.) fails this. The draws
are those the product's table was fitted on (range_design.PRODUCT_DRAWS).

The impact range at the advised count, widened by the product's spread
(impact_range_design.py), must hold the measured impact in most runs of
each class whose spread is a grid value the fit reached; the probes' own
noise alone (the delta method, the range made i.i.d.-narrow again) fails
this. In-sample, as the count range's check is."""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tamebpf.estimate.advice import build
from tamebpf.estimate.record import AdviseResult
from tamebpf.estimate.spread import SPREAD
from tamebpf.model import Settings
from tamebpf_eval import impact_range_design, range_design
from tests.unit.advise.test_advise_report import TARGET, probe

RESULTS = str(Path(__file__).resolve().parents[3] / "docs" / "results")


def test_the_products_spread_holds_the_rounds_best_count(runs: list[range_design.Run]) -> None:
    assert len({r.draw for r in runs}) >= 4 and len(runs) >= 100, "the fitted draws are read"
    for key in SPREAD:
        if SPREAD[key] == range_design.GRID[-1]:
            continue  # no s of the grid reached the target here: the fit took the widest
        mine = [r for r in runs if r.key == key]
        held = [h for h, _ in range_design.scorings(mine, SPREAD)]
        # Each class at its own fitting target, less one scoring's worth of
        # slack for the rounding of the grid.
        assert sum(held) >= range_design.TARGET_COVERAGE * len(held) - 1, (key, len(held))


def test_the_iid_range_does_not(runs: list[range_design.Run]) -> None:
    held = [h for h, _ in range_design.scorings(runs, None)]
    assert sum(held) < 0.7 * len(held)


def test_the_fit_picks_the_narrowest_spread_that_reaches_the_target(
        runs: list[range_design.Run]) -> None:
    fitted = range_design.fit(runs)
    assert fitted == SPREAD, "the product's constants are the study's (make eval-range-design)"
    for key, s in fitted.items():
        if s == 0.0:
            continue
        smaller = round(s - 0.025, 3)
        mine = [r for r in runs if r.key == key]
        held = [h for h, _ in range_design.scorings(mine, {key: smaller})]
        assert sum(held) < range_design.TARGET_COVERAGE * len(held)


def test_a_report_on_no_records_does_not_crash(tmp_path: Path) -> None:
    os.makedirs(tmp_path / "history")
    first, second = list(range_design.DRAW_SETS.values())[:2]
    text = range_design.report(str(tmp_path), first)
    assert "0 runs" in text and "beside" not in text, "the first set has none before it"
    text = range_design.report(str(tmp_path), second)
    assert f"beside the fit on draws {first.name}" in text and "SPREAD: dict" in text


def _point(mbit: float, cross: float) -> dict[str, Any]:
    return {"mbit": [mbit], "cross_with": [cross]}


def test_each_truth_round_is_scored_on_its_own() -> None:
    """Three rounds whose best nondisruptive counts differ (the cross
    traffic beside 1 stream: 100 Mbit/s; limit 0.3): 4, 16 and 1."""
    rounds = [{1: _point(10, 100), 4: _point(30, 80), 16: _point(40, 50)},
              {1: _point(10, 100), 4: _point(30, 80), 16: _point(50, 75)},
              {1: _point(10, 100), 4: _point(30, 60), 16: _point(50, 40)}]
    truth = {str(n): {"mbit": [r[n]["mbit"][0] for r in rounds],
                      "cross_with": [r[n]["cross_with"][0] for r in rounds]} for n in (1, 4, 16)}
    assert range_design.round_bests(truth, 0.3) == [4, 16, 1]
    assert range_design.round_bests(truth, 0.1) == [1, 1, 1]


def test_draw_8_is_read_with_its_3_rounds(runs: list[range_design.Run]) -> None:
    # The product's draws hold draw 8: read from the fixture, not rebuilt
    # again (rebuilding every run from its probes takes seconds).
    assert "fresh8" in dict(range_design.DRAW_SETS[range_design.PRODUCT_DRAWS].draws)
    rs = [r for r in runs if r.draw == "fresh8"]
    assert rs, f"no draw 8 runs rebuilt from {RESULTS}"
    assert {r.rounds for r in rs} == {3}, "draw 8 measured 3 truth rounds a case"
    assert all(len(r.bests) <= 3 for r in rs)


def test_the_table_to_paste_is_the_fit() -> None:
    table = {(False, False): 0.15, (False, True): 0.275, (True, False): 0.325,
             (True, True): 1.0}
    lines = range_design.spread_literal(table)
    assert lines[0].startswith("SPREAD: dict[tuple[bool, bool], float] = {")
    assert ast.literal_eval("{" + "".join(lines[1:])) == table


def test_the_widened_range_holds_the_measured_impact(runs: list[range_design.Run]) -> None:
    measured = [r for r in runs if r.impact is not None]
    assert len(measured) >= 100, "the runs' measured impact at their advised count is read"
    for key, s in SPREAD.items():
        if s == range_design.GRID[-1]:
            continue  # no s of the grid reached the count range's target here
        got = impact_range_design.scored([r for r in runs if r.key == key], None)
        held = sum(h for h, _ in got)
        assert held >= 0.85 * len(got), (key, held, len(got))


def test_the_delta_method_alone_does_not(runs: list[range_design.Run]) -> None:
    got = impact_range_design.scored(runs, 0.0)
    wide = impact_range_design.scored(runs, None)
    assert sum(h for h, _ in got) < 0.6 * len(got), "the probes' noise alone is too narrow"
    assert sum(h for h, _ in wide) > sum(h for h, _ in got)


@dataclass
class Stub:
    result: AdviseResult
    limit: float
    impact: float | None


def test_rows_score_each_class_and_name_an_s_where_it_holds_under_the_target() -> None:
    settings = Settings(max_impact=0.26)
    r = build(TARGET, [replace(probe(1, 50.0), stopped="settled"),
                       replace(probe(10, 200.0), stopped="settled")], settings)
    at = impact_range_design.advised_range(Stub(r, 0.26, None), None)
    inside, outside = Stub(r, 0.26, at.impact), Stub(r, 0.26, min(1.0, at.high + 0.2))
    lines = impact_range_design.rows(
        [("holds", 0.2, [inside, inside]), ("misses", 0.2, [outside, inside]),
         ("all", None, [inside, outside, Stub(r, 0.26, None)])], range_design.GRID)
    text = "\n".join(lines)
    assert "| holds | 0.200 | 2 |" in text and "2/2 (100%)" in text, text
    assert "| misses | 0.200 | 2 |" in text and "1/2 (50%)" in text, text
    assert "Left out: 0 runs" in text, "a mixed group's runs are counted in their classes"
    named = [ln for ln in lines if ln.startswith("| misses | ")]
    assert len(named) == 2, "the class under the target gets a row of the grid"
    assert named[1].split(" | ")[1] != "none on the grid", named[1]


def test_the_rounds_own_range_spans_their_best_counts(runs: list[range_design.Run]) -> None:
    """Built from the rounds alone, it holds every scoring, and is as wide
    as the most and fewest best counts of a case's rounds."""
    one = replace(runs[0], bests=[2, 6, 3])
    assert list(range_design.truth_scorings([one])) == [(True, 3.0)] * 3
    got = list(range_design.truth_scorings(runs))
    assert len(got) == sum(len(r.bests) for r in runs) and all(h for h, _ in got)

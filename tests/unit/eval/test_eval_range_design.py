"""The study that fitted the count range's table (tamebpf_eval/
range_design.py, impact_range_design.py): its page's parts. The table
itself is checked against the runs it was fitted on in
test_eval_count_range.py."""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass, replace
from pathlib import Path

from tamebpf.estimate.advice import build
from tamebpf.estimate.record import AdviseResult
from tamebpf.model import Settings
from tamebpf_eval import impact_range_design, range_design
from tests.unit.advise.test_advise_report import TARGET, probe


def test_a_report_on_no_records_does_not_crash(tmp_path: Path) -> None:
    os.makedirs(tmp_path / "history")
    first, second = list(range_design.DRAW_SETS.values())[:2]
    text = range_design.report(str(tmp_path), first)
    assert "0 runs" in text and "beside" not in text, "the first set has none before it"
    text = range_design.report(str(tmp_path), second)
    assert f"beside the fit on draws {first.name}" in text and "SPREAD: dict" in text





def test_the_table_to_paste_is_the_fit() -> None:
    table = {(False, False): 0.15, (False, True): 0.275, (True, False): 0.325,
             (True, True): 1.0}
    lines = range_design.spread_literal(table)
    assert lines[0].startswith("SPREAD: dict[tuple[bool, bool], float] = {")
    assert ast.literal_eval("{" + "".join(lines[1:])) == table




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

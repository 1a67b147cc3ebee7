"""The count range against the stored draws' truth rounds (tamebpf_eval/
range_design.py): the product's spread must hold the best count of a truth
round in most scorings, as docs/results/range-design.md reports. A range as
narrow as the probes' own samples make it (i.i.d.) fails this."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tamebpf.estimate.spread import SPREAD
from tamebpf_eval import range_design

RESULTS = str(Path(__file__).resolve().parents[3] / "docs" / "results")


@pytest.fixture(scope="module")
def runs() -> list[range_design.Run]:
    rs = range_design.runs(RESULTS)
    if not rs:
        pytest.skip(f"no stored draws under {RESULTS}")
    return rs


def test_the_products_spread_holds_the_rounds_best_count(runs: list[range_design.Run]) -> None:
    assert len({r.draw for r in runs}) >= 4 and len(runs) >= 100, "the draws 3-7 are read"
    for key in SPREAD:
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
    text = range_design.report(str(tmp_path))
    assert "0 runs" in text

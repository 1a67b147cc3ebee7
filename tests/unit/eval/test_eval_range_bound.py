"""How narrow a count range around the advised count can be
(tamebpf_eval/range_bound.py): its window arithmetic on offsets whose
answer is known, and docs/results/range-bound.md against what the stored
draws give today."""

from __future__ import annotations

import math
from pathlib import Path

from tamebpf_eval import range_bound, range_design

PAGE = Path(__file__).resolve().parents[3] / "docs" / "results" / "range-bound.md"


def test_a_window_holds_the_offsets_within_its_ratio() -> None:
    xs = [math.log(v) for v in (0.5, 1, 1, 1, 2, 4)]
    assert range_bound.best_cover(xs, 1.0) == 3      # the three exact ones
    assert range_bound.best_cover(xs, 2.0) == 4      # 1..2 or 0.5..1
    assert range_bound.best_cover(xs, 8.0) == 6
    assert range_bound.best_cover(xs, 1.9) == 3


def test_the_least_ratio_is_that_of_the_narrowest_window_holding_the_share() -> None:
    xs = [math.log(v) for v in (0.25, 1, 1, 1, 1, 1, 1, 2, 2, 8)]
    # 85% of 10 needs 9: from 0.25 to 2 (ratio 8) or from 1 to 8 (ratio 8).
    assert math.isclose(range_bound.least_ratio(xs), 8.0)
    # 70% needs 7: 1..1 holds 6, 1..2 holds 8.
    assert math.isclose(range_bound.least_ratio(xs, 0.7), 2.0)
    assert range_bound.window(xs, 0.7) == (0.0, math.log(2))


def test_a_proportional_range_takes_the_whole_counts_inside_its_window() -> None:
    assert range_bound.proportional(4, math.log(0.5), math.log(2)) == (2, 8)
    assert range_bound.proportional(3, math.log(0.5), math.log(1.2)) == (2, 3)
    # No whole count inside 3 x [1.1, 1.2] = [3.3, 3.6]: the lowest alone.
    assert range_bound.proportional(3, math.log(1.1), math.log(1.2)) == (4, 4)
    assert range_bound.proportional(1, math.log(0.25), 0.0) == (1, 1)


def test_the_least_ratio_holds_the_share_and_a_narrower_one_does_not() -> None:
    xs = [math.log(v) for v in (0.3, 0.5, 0.7, 1, 1, 1, 1.5, 2, 3, 5, 9, 1, 1, 2, 0.5)]
    least = range_bound.least_ratio(xs)
    assert range_bound.best_cover(xs, least) >= 0.85 * len(xs)
    assert range_bound.best_cover(xs, least * 0.99) < 0.85 * len(xs)


def test_the_page_is_what_the_stored_draws_give(runs: list[range_design.Run]) -> None:
    text = PAGE.read_text()
    start = text.index(f"<!-- {range_bound.SECTION}:start -->")
    end = text.index(f"<!-- {range_bound.SECTION}:end -->")
    assert text[start:end] + f"<!-- {range_bound.SECTION}:end -->\n" == \
        range_bound.render(runs), "rerun: make eval PRESET=range-bound"

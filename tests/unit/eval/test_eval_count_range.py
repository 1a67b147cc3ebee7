"""The count range and the impact range against the truth rounds of the
draws estimate/spread.py's table was fitted on (count_range.py): the
product's spread must hold the best count of a truth round in most
scorings; a range as narrow as the probes' own samples make it (i.i.d.)
fails this. The impact range at the advised count, widened by the same
spread, must hold the measured impact in most runs of each class whose
spread is a grid value the fit reached; the probes' own noise alone (the
delta method) fails this. In-sample: these are the runs the table was
fitted on."""

from __future__ import annotations

from dataclasses import replace

from tamebpf.estimate.spread import SPREAD
from tests.unit.eval import count_range
from tests.unit.eval.count_range import GRID, TARGET_COVERAGE, Run


def test_the_products_spread_holds_the_rounds_best_count(fitted: list[Run]) -> None:
    assert len({r.draw for r in fitted}) >= 4 and len(fitted) >= 100, "the fitted draws are read"
    for key in SPREAD:
        if SPREAD[key] == GRID[-1]:
            continue  # no s of the grid reached the target here: the fit took the widest
        mine = [r for r in fitted if r.key == key]
        held = [h for h, _ in count_range.scorings(mine, SPREAD)]
        # Each class at its own fitting target, less one scoring's worth of
        # slack for the rounding of the grid.
        assert sum(held) >= TARGET_COVERAGE * len(held) - 1, (key, len(held))


def test_the_iid_range_does_not(fitted: list[Run]) -> None:
    held = [h for h, _ in count_range.scorings(fitted, None)]
    assert sum(held) < 0.7 * len(held)


def test_the_fit_picks_the_narrowest_spread_that_reaches_the_target(fitted: list[Run]) -> None:
    table = count_range.fit(fitted)
    assert table == SPREAD, "the product's constants are the fit's on these runs"
    for key, s in table.items():
        if s == 0.0:
            continue
        smaller = round(s - 0.025, 3)
        mine = [r for r in fitted if r.key == key]
        held = [h for h, _ in count_range.scorings(mine, {key: smaller})]
        assert sum(held) < TARGET_COVERAGE * len(held)


def _point(mbit: float, cross: float) -> dict[str, list[float]]:
    return {"mbit": [mbit], "cross_with": [cross]}


def test_each_truth_round_is_scored_on_its_own() -> None:
    """Three rounds whose best nondisruptive counts differ (the cross
    traffic beside 1 stream: 100 Mbit/s; limit 0.3): 4, 16 and 1."""
    rounds = [{1: _point(10, 100), 4: _point(30, 80), 16: _point(40, 50)},
              {1: _point(10, 100), 4: _point(30, 80), 16: _point(50, 75)},
              {1: _point(10, 100), 4: _point(30, 60), 16: _point(50, 40)}]
    truth = {str(n): {"mbit": [r[n]["mbit"][0] for r in rounds],
                      "cross_with": [r[n]["cross_with"][0] for r in rounds]} for n in (1, 4, 16)}
    assert count_range.round_bests(truth, 0.3) == [4, 16, 1]
    assert count_range.round_bests(truth, 0.1) == [1, 1, 1]


def test_draw_8_is_read_with_its_3_rounds(fitted: list[Run]) -> None:
    rs = [r for r in fitted if r.draw == "fresh8"]
    assert rs, f"no draw 8 runs rebuilt from {count_range.RECORD}"
    assert {r.rounds for r in rs} == {3}, "draw 8 measured 3 truth rounds a case"
    assert all(len(r.bests) <= 3 for r in rs)


def test_a_range_holds_a_round_inside_it_only(fitted: list[Run]) -> None:
    one = replace(fitted[0], bests=[2, 6, 3], ranges={0.5: (2, 4)})
    assert list(count_range.scorings([one], dict.fromkeys(SPREAD, 0.5))) == [
        (True, 2.0), (False, 2.0), (True, 2.0)]


def test_the_widened_range_holds_the_measured_impact(fitted: list[Run]) -> None:
    measured = [r for r in fitted if r.impact is not None]
    assert len(measured) >= 100, "the runs' measured impact at their advised count is read"
    for key, s in SPREAD.items():
        if s == GRID[-1]:
            continue  # no s of the grid reached the count range's target here
        got = count_range.impact_scorings([r for r in fitted if r.key == key], None)
        held = sum(h for h, _ in got)
        assert held >= 0.85 * len(got), (key, held, len(got))


def test_the_delta_method_alone_does_not(fitted: list[Run]) -> None:
    got = count_range.impact_scorings(fitted, 0.0)
    wide = count_range.impact_scorings(fitted, None)
    assert sum(h for h, _ in got) < 0.6 * len(got), "the probes' noise alone is too narrow"
    assert sum(h for h, _ in wide) > sum(h for h, _ in got)

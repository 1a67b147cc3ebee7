"""Issue 44's bar by RTT class (tamebpf_eval/by_class.py) on stored records
and on none: the ceiling, the targets against it, the ranges' checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tamebpf_eval import by_class
from tamebpf_eval.records import load

RESULTS = Path(__file__).resolve().parents[3] / "docs" / "results"


def a_case(rtt: float, ours: list[list[float]], cross: list[list[float]],
           advised: int, streams_range: list[int] | None) -> dict[str, Any]:
    """A loss-based record with truth at 1, 4 and 16 streams (rounds as
    columns) and one default advice."""
    ns = (1, 4, 16)
    return {
        "case": {"rtt": rtt, "cc": "cubic"}, "max_impact": 0.3,
        "truth": {str(n): {"mbit": ours[i], "cross_with": cross[i]} for i, n in enumerate(ns)},
        "advice": {"default": {"n": advised, "refused": None, "streams_range": streams_range,
                               "impact_range": [0.0, 0.5], "probes": [{"duration_s": 10.0}],
                               "curve": [[n, ours[i][0], 0.0] for i, n in enumerate(ns)]}}}


def test_a_round_that_parts_from_the_others_is_held_by_a_wide_range_only() -> None:
    # Rounds 1 and 2: 4 streams is the best within the limit; round 3: 16.
    rec = a_case(120.0, [[10, 10, 10], [30, 30, 20], [40, 40, 50]],
                 [[100, 100, 100], [80, 80, 80], [60, 60, 75]], 4, [4, 4])
    assert [by_class.best_count(by_class.some_rounds(rec, (k,)), 0.3) for k in range(3)] \
        == [4, 4, 16]
    narrow = by_class.range_checks([rec], "default")
    assert (narrow["held"], narrow["scorings"], narrow["ratio"]) == (2, 3, 1.0)
    rec["advice"]["default"]["streams_range"] = [2, 16]
    wide = by_class.range_checks([rec], "default")
    assert (wide["held"], wide["ratio"]) == (3, 8.0)
    # The perfect rounds: round 3 as the advice (16) is over the others' limit.
    scores = by_class.perfect_rounds(rec)
    assert [s["advised"] for s in scores] == [4, 4, 16]
    assert scores[2]["exceeds"]


def test_the_targets_are_the_ceilings_plus_the_issues_slack() -> None:
    ceiling = {"n": 18, "good": 0.7, "over": 0.0, "err": 0.10, "p90": 0.12}
    at_bar = {"n": 6, "good": 0.6, "over": 1 / 6, "err": 0.135, "p90": 0.165}
    assert by_class.meets(at_bar, ceiling, 6) == []
    worse = {"n": 6, "good": 0.5, "over": 2 / 6, "err": 0.15, "p90": 0.18}
    assert by_class.meets(worse, ceiling, 6) == [
        ">= 95% of best", "over by > 0.05", "thru err median", "impact err p90"]


def test_the_report_reads_a_stored_draw_and_no_draw() -> None:
    records = load(str(RESULTS / "eval-fresh11.json.gz"))
    assert records, "fresh draw 11's records are stored"
    text = "\n".join(by_class.report(records, ("default", "quick")))
    assert "| < 80 ms (9 cases) | ceiling" in text and "| >= 80 ms (9 cases) | ceiling" in text
    assert by_class.report([], ("default",)) == ["No case measured yet: nothing to score by class."]

"""The repeat run (tamebpf_eval/repeat.py) on synthetic records: every run,
the draw's own first, scored against the stored truth, and a case counted
as moved when its advised counts differ by the SPREAD factor."""

from __future__ import annotations

from typing import Any

from tamebpf_eval.fresh_draw import DRAWS
from tamebpf_eval.repeat import report, run_scores

TRUTH = {"1": {"mbit": [10, 10], "cross_with": [90, 90]},
         "4": {"mbit": [30, 30], "cross_with": [70, 70]},
         "16": {"mbit": [60, 60], "cross_with": [40, 40]}}  # 16 take 0.56: over 0.3


def advice(n: int, refused: str | None = None) -> dict[str, Any]:
    curve = [[1, 10.0, 0.0], [4, 30.0, 0.22], [16, 60.0, 0.56]]
    return {"n": n, "refused": refused, "curve": curve, "probes": [{"duration_s": 10.0}],
            "rtt_check": None}


def record(key: str, draw_n: int, runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {"key": key, "case": {"cc": "cubic", "rtt": 100.0}, "max_impact": 0.3,
            "truth": TRUTH, "cross_alone": 95.0, "draw": advice(draw_n), "runs": runs}


def test_every_run_is_scored_the_draws_first_and_refusals_left_out() -> None:
    rec = record("k", 4, [advice(16), advice(4, refused="no capacity")])
    scores = run_scores(rec)
    assert [s["advised"] for s in scores] == [4, 16]
    assert scores[0]["quality"] == 1.0
    assert scores[1]["exceeds_by"] > 0.05


def test_the_summary_counts_runs_and_cases_that_moved() -> None:
    steady = record("steady", 4, [advice(4), advice(4)])
    moved = record("moved", 4, [advice(16), advice(4)])  # 16 is 4x 4
    text = report([steady, moved], DRAWS["fresh7"], "repeat_fresh7")
    row = next(ln for ln in text.splitlines() if ln.startswith("| 2 |"))
    # 6 runs, each at >= 95% of the best as the draws count it (quality
    # 2.0 at 16 streams counts too); 1 over the limit, by 0.26.
    assert row.startswith("| 2 | 6 | 6/6 | 1/6 | "), row
    assert row.endswith(" | 1/2 | 0.000 |"), row
    assert "| moved | 4, 16, 4 | 1.00, 2.00, 1.00 |" in text, text

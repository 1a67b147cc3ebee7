"""The truth-rounds replay (tamebpf_eval/truth_rounds.py) on synthetic
records: the added rounds join the stored ones, a perfect round is scored
against every choice of other rounds, and the default's runs against both
the stored truth and the steadier one."""

from __future__ import annotations

from typing import Any

from tamebpf_eval.truth_noise import round_scores
from tamebpf_eval.truth_rounds import default_runs, merged, round_pairs, rows

# Round by round (two stored, two added): our goodput and the cross traffic's.
# In round 3 the cross traffic gives way at 4 streams (impact 0.1, not 0.3),
# so round 3 alone would allow more than the others.
STORED = {"1": {"mbit": [10, 10], "cross_with": [90, 90]},
          "4": {"mbit": [30, 30], "cross_with": [64, 64]},     # impact 0.29: allowed
          "16": {"mbit": [60, 60], "cross_with": [40, 40]}}    # 0.56: over 0.3
ADDED = {"1": {"mbit": [10, 10], "cross_with": [90, 90]},
         "4": {"mbit": [30, 30], "cross_with": [64, 81]},
         "16": {"mbit": [60, 60], "cross_with": [40, 70]}}     # round 3: 0.22, allowed


def advice(n: int) -> dict[str, Any]:
    curve = [[1, 10.0, 0.0], [4, 30.0, 0.29], [16, 60.0, 0.56]]
    return {"n": n, "refused": None, "curve": curve, "probes": [{"duration_s": 10.0}],
            "rtt_check": None}


def record(added: dict[str, Any] = ADDED) -> dict[str, Any]:
    return {"key": "k", "case": {"cc": "cubic", "rtt": 100.0}, "max_impact": 0.3,
            "truth": STORED, "cross_alone": [95.0, 95.0], "added": added,
            "added_cross_alone": [95.0, 95.0], "draw": advice(4)}


def test_merged_puts_the_added_rounds_after_the_stored_ones() -> None:
    m = merged(record())
    assert m["truth"]["4"]["cross_with"] == [64, 64, 64, 81]
    assert m["truth"]["16"]["mbit"] == [60, 60, 60, 60]


def test_a_perfect_round_is_scored_against_every_choice_of_other_rounds() -> None:
    m = merged(record())
    # 4 rounds: against 1 other, 4 x 3; against 2, 4 x 3; against 3, 4 x 1.
    assert [len(list(round_scores(m, k))) for k in (1, 2, 3)] == [12, 12, 4]
    # Round 3 as the advice picks 16 streams; against the median of the
    # other three (all 0.56 at 16) that is over the limit by 0.26.
    last = list(round_scores(m, 3))[-1]
    assert last["advised"] == 16 and abs(last["exceeds_by"] - (1 - 40 / 90 - 0.3)) < 1e-9
    assert all(s["advised"] == 4 for s in list(round_scores(m, 3))[:3])


def test_round_pairs_split_by_testbed_build() -> None:
    m = merged(record())
    # Same build: (0, 1), (1, 0), (2, 3), (3, 2); across: 8 ordered pairs.
    same, other = round_pairs(m, True), round_pairs(m, False)
    assert len(same) == 4 and len(other) == 8
    # Only round 3 (added) allows 16 streams: over the limit against every
    # other round: once within its build, twice across.
    assert sum(s["advised"] == 16 for s in same) == 1
    assert sum(s["advised"] == 16 for s in other) == 2


def test_the_default_is_scored_against_stored_and_steadier_truth() -> None:
    rec = record()
    repeat = {"runs": [advice(16)]}
    stored = default_runs(repeat, rec)
    steadier = default_runs(repeat, merged(rec))
    assert [s["advised"] for s in stored] == [4, 16]
    assert stored[1]["exceeds_by"] > 0.25
    # With round 3 in, the median impact at 16 falls (0.56, 0.56, 0.56, 0.22
    # -> cross 40, 40, 40, 70: median 40): still over; at 4 the median
    # cross is 64, impact 0.29: allowed either way.
    assert steadier[0]["quality"] == 1.0 and steadier[1]["exceeds_by"] > 0.25


def test_rows_give_one_line_per_comparison_with_its_counts() -> None:
    text = "\n".join(rows([record()], {"k": {"runs": [advice(4)]}}))
    line = next(ln for ln in text.splitlines() if "the median of the other 3" in ln)
    # 4 scorings; only round 3's advice (16 streams) is over the limit.
    assert "| 4 | 1/4 | " in line, line
    assert "| the default's runs | all 4 rounds | 2 | 0/2 | 2/2 |" in text, text

"""The truth-noise replay (tamebpf_eval/truth_noise.py) on synthetic
records: each truth round scored as the advice against the other, beside
the default's advice against the median of both (draw 5 ran today's
default as its plan "both")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tamebpf_eval.truth_noise import report


def record(truth: dict[int, tuple[list[float], list[float]]], cc: str = "cubic",
           advised: int = 4) -> dict[str, Any]:
    """truth: n -> (our Mbit/s per round, the cross traffic's per round)."""
    med = {n: (sum(m) / 2, sum(c) / 2) for n, (m, c) in truth.items()}
    curve = [[n, m, max(0.0, 1 - c / med[1][1])] for n, (m, c) in sorted(med.items())]
    return {"key": "k", "case": {"cc": cc, "rtt": 50.0}, "max_impact": 0.3,
            "truth": {str(n): {"mbit": m, "cross_with": c} for n, (m, c) in truth.items()},
            "advice": {"both": {"n": advised, "refused": None, "curve": curve,
                                   "probes": [{"duration_s": 5.0}]}}}


def test_each_round_is_scored_against_the_other(tmp_path: Path) -> None:
    same = record({1: ([10, 10], [90, 90]), 4: ([30, 30], [70, 70]), 16: ([60, 60], [40, 40])})
    # Round 0 allows 4 streams only (16 take 1 - 60/90 = 0.33 of the cross
    # traffic); round 1 allows 16 (1 - 70/90 = 0.22) and gets 20 at 4.
    moved = record({1: ([10, 10], [90, 90]), 4: ([30, 20], [70, 80]),
                    16: ([50, 50], [60, 70])})
    bbr = record({1: ([10, 10], [90, 90]), 4: ([30, 1], [70, 89])}, cc="bbr")  # not read
    (tmp_path / "eval-fresh5.json").write_text(json.dumps({"records": [same, moved, bbr]}))
    text = report(str(tmp_path))
    rows = [ln for ln in text.splitlines() if ln.startswith("| fresh5")]
    # 0 -> 1: advised 4, got 20 of round 1's best 50 (0.40); 1 -> 0: advised
    # 16, 50 against round 0's best nondisruptive 30, over the limit by 0.03.
    assert rows[0].startswith("| fresh5 | one round against the other (each case both ways) | "
                              "4 | 0/4 | 3/4 | "), text
    # The default at 4 streams: the best on `same`, and 25 of 50 on `moved`.
    assert rows[1].startswith("| fresh5 | the default's advice against the median of both | "
                              "2 | 0/2 | 1/2 | "), text
    assert "| all | one round against the other | 4 | 0/4 | 3/4 |" in text, text


def test_a_missing_draw_reads_as_none(tmp_path: Path) -> None:
    text = report(str(tmp_path))
    assert "| fresh" not in text and "| all" not in text, text

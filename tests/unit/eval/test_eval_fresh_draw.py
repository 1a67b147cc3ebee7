"""The fresh draws (tamebpf_eval.fresh_draw): what was drawn, and
how a plan's advice is scored against the truth."""

from __future__ import annotations

from typing import Any

import pytest

from tamebpf_eval.fresh_draw import (
    BBR_BBR,
    BBR_CUBIC,
    DRAWS,
    LOSS_BASED,
    RATES,
    RTTS,
    at_limit,
    draw,
    plan_score,
    report,
)


@pytest.mark.parametrize("name", sorted(n for n, d in DRAWS.items() if d.directions == ("upload",)))
def test_the_draw_has_the_issues_mix_and_ranges(name: str) -> None:
    cases = draw(DRAWS[name])
    assert cases == draw(DRAWS[name]), "the same seed draws the same cases"
    assert all(c.name.startswith(f"{name}-") for c in cases)
    loss = [c for c in cases if c.cc != "bbr"]
    assert len(loss) == LOSS_BASED >= 18
    assert {c.cc for c in loss} <= {"cubic", "reno"} and all(c.cross_cc == c.cc for c in loss)
    bbr = [c for c in cases if c.cc == "bbr"]
    assert sorted(c.cross_cc for c in bbr) == ["bbr"] * BBR_BBR + ["cubic"] * BBR_CUBIC
    assert BBR_BBR >= 3 and BBR_CUBIC >= 3
    assert sum(c.cross_rtt is not None for c in loss) == LOSS_BASED // 3
    for c in cases:
        assert c.direction == "upload" and c.rate_back is None
        assert min(RATES) == 20 <= c.rate <= 200 == max(RATES)
        assert min(RTTS) == 10 <= c.rtt <= 150 == max(RTTS)
        assert 1 <= c.cross <= 30 and c.aqm in ("droptail", "red") and c.queue >= 2
    assert len({c.key for c in cases}) == len(cases)


def test_draws_do_not_share_a_seed_or_a_case() -> None:
    assert len({d.seed for d in DRAWS.values()}) == len(DRAWS)
    # A draw's path is one case in each of its directions; the counts alone
    # are compared (a draw's cases are not shown before it runs).
    paths = [{(c.rate, c.rate_back, c.rtt, c.queue, c.aqm, c.cc, c.cross, c.cross_rtt)
              for c in draw(d)} for d in DRAWS.values()]
    distinct, drawn = len(set().union(*paths)), sum(len(p) for p in paths)
    assert distinct > 0.9 * drawn


def _rec(advised: int, refused: str | None = None) -> dict[str, object]:
    # truth: 1 stream 10 Mbit/s (cross 80), 4: 30 (cross 60), 16: 60 (cross 30)
    truth = {"1": {"mbit": [10.0, 10.0], "cross_with": [80.0, 80.0]},
             "4": {"mbit": [30.0, 30.0], "cross_with": [60.0, 60.0]},
             "16": {"mbit": [60.0, 60.0], "cross_with": [30.0, 30.0]}}
    curve = [[n, 10.0 * n ** 0.6, 1 - 80 / (80 + 5 * (n - 1))] for n in range(1, 33)]
    advice = {"n": advised, "refused": refused, "curve": curve,
              "probes": [{"streams": 1, "duration_s": 6.0}, {"streams": 10, "duration_s": 9.0}]}
    return {"key": "k", "case": {"rtt": 20.0, "cc": "cubic"}, "truth": truth,
            "max_impact": 0.3, "advice": {"default": advice, "quick": advice}}


def test_plan_score_against_the_truth() -> None:
    s = plan_score(_rec(4), "default")  # type: ignore[arg-type]
    assert s is not None
    assert s["quality"] == 1.0 and not s["exceeds"]  # 4 streams: impact 0.25 <= 0.3
    assert s["probing_s"] == 15.0
    over = plan_score(_rec(16), "default")  # type: ignore[arg-type]
    assert over is not None and over["exceeds_by"] > 0.05  # impact 0.625
    assert plan_score(_rec(1, refused="no capacity"), "default") is None  # type: ignore[arg-type]


def test_report_counts_targets_per_group() -> None:
    text = report([_rec(4), _rec(16)], DRAWS["fresh11"])  # type: ignore[list-item]
    assert "make eval-fresh11" in text
    row = next(ln for ln in text.splitlines() if ln.startswith("| loss-based | default"))
    assert "| 1/2 |" in row  # one of two over the limit by more than 0.05


def test_probes_at_their_limit_are_counted_per_probe_size() -> None:
    def probe(n: int, stopped: str | None) -> dict[str, Any]:
        return {"streams": n, "stopped": stopped}
    recs = [{"advice": {"default": {"probes": [probe(1, "time limit"), probe(10, "settled")]}}},
            {"advice": {"default": {"probes": [probe(1, "time limit"), probe(10, "time limit")]},
                        "quick": {"probes": [probe(1, None), probe(10, None)]}}}]
    assert at_limit(recs, "default") == "default: 1-stream 2 of 2, 10-stream 1 of 2"
    assert at_limit(recs, "quick") == "quick: 1-stream 0 of 1, 10-stream 0 of 1"

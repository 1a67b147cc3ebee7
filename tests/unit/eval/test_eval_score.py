"""make eval's scoring (tamebpf_eval.score): the numbers in docs/accuracy.md
and docs/results/ come from here, so its definitions are checked by hand."""

from __future__ import annotations

import pytest

from tamebpf.estimate.record import ProbeResult
from tamebpf.estimate.steady import FlowSteady, Steady
from tamebpf_eval.score import probe_from_dict, probe_to_dict, score, truth_table


def _probe(n: int, mbps: float) -> ProbeResult:
    s = Steady(start_s=0.5, end_s=2.0, goodput_mbps=mbps, loss_rate=0.001, retrans=5,
               data_segs=5000, srtt_ms=20.0, noise=0.02, rwnd_limited=0.0,
               flows=tuple(FlowSteady(i, mbps / n, 0.001, 20.0) for i in range(n)),
               congestion_control=("cubic",), series=((0.0, 0), (1.0, 1000)))
    return ProbeResult(n, 2.3, s, mbps)


def test_probe_survives_the_json_round_trip() -> None:
    import json
    p = _probe(10, 80.0)
    assert probe_from_dict(json.loads(json.dumps(probe_to_dict(p)))) == p


def test_impact_with_cross_traffic_is_relative_to_one_stream() -> None:
    rec = {"truth": {"1": {"mbit": [10, 12, 11], "cross_with": [40, 50, 45]},
                     "4": {"mbit": [30, 30, 30], "cross_with": [22.5, 30, 20]}}}
    t = truth_table(rec)
    assert t[1]["mbit"] == 11 and t[1]["impact"] == 0
    assert t[4]["impact"] == pytest.approx(1 - 22.5 / 45)
    assert t[1]["spread"] == pytest.approx(2 / 11)


def test_impact_without_cross_traffic_is_the_fall_in_per_flow_goodput() -> None:
    rec = {"truth": {"1": {"mbit": [50], "cross_with": []},
                     "4": {"mbit": [100], "cross_with": []}}}
    assert truth_table(rec)[4]["impact"] == pytest.approx(1 - (100 / 4) / 50)


def test_score_errors_quality_and_limit() -> None:
    truth = {1: {"mbit": 10.0, "impact": 0.0, "spread": 0.0},
             4: {"mbit": 20.0, "impact": 0.3, "spread": 0.0},
             8: {"mbit": 30.0, "impact": 0.6, "spread": 0.0}}
    s = score({1: 11.0, 4: 20.0, 8: 24.0}, {1: 0.0, 4: 0.4, 8: 0.6}, 6, truth, limit=0.5)
    assert s["thru_err_mean"] == pytest.approx((0.1 + 0 + 0.2) / 3)
    assert s["impact_err_p90"] == pytest.approx(0.1, abs=0.02)
    # n=6 was not measured: interpolated halfway, 25 Mbit/s at impact 0.45;
    # the best within the limit is n=4's 20 Mbit/s.
    assert s["quality"] == pytest.approx(25 / 20) and not s["exceeds"]
    assert score({}, {}, 8, truth, limit=0.5)["exceeds"]


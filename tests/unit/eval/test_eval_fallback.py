"""The "probe again where the default ended in start-up" policy the eval
report scores (tamebpf_eval.competing.fallback): which plan's advice each
case gets, and what probing it costs."""

from __future__ import annotations

from tamebpf.estimate.record import ProbeResult
from tamebpf.estimate.steady import FlowSteady, Steady
from tamebpf_eval.competing import advice_by_plan, fallback, fallback_lines
from tamebpf_eval.score import OURS, estimators, probe_to_dict


def _probe(n: int, mbps: float, past: bool, seconds: float) -> dict:
    s = Steady(start_s=0.5, end_s=2.0, goodput_mbps=mbps, loss_rate=0.001, retrans=5,
               data_segs=5000, srtt_ms=20.0, noise=0.02, rwnd_limited=0.0,
               flows=tuple(FlowSteady(i, mbps / n, 0.001, 20.0) for i in range(n)),
               congestion_control=("cubic",), series=((0.0, 0), (1.0, 1000)),
               after_slow_start=past)
    return probe_to_dict(ProbeResult(n, seconds, s, mbps))


def _record(name: str, past: bool) -> dict:
    truth = {str(n): {"mbit": [v], "cross_with": []}
             for n, v in ((1, 40.0), (4, 75.0), (16, 90.0))}
    return {"key": name, "case": {"cross": 0, "rate": 100.0, "name": name, "cc": "cubic"},
            "default_plan": "2:2", "truth": truth,
            "probes": {"2:2": [_probe(1, 20.0, past, 2.0), _probe(10, 60.0, past, 2.0)],
                       "15:15": [_probe(1, 40.0, True, 15.0), _probe(10, 88.0, True, 15.0)]}}


def test_only_cases_whose_default_ended_in_start_up_probe_again() -> None:
    settled, short = _record("settled", True), _record("short", False)
    rows = fallback([settled, short], "15:15", limit=0.5)
    assert rows[0] == (estimators(settled, 0.5, "2:2")[OURS], 4.0)
    assert rows[1] == (estimators(short, 0.5, "15:15")[OURS], 34.0)
    # The two plans advise differently here, so the choice is visible.
    assert rows[0][0]["thru_err_mean"] != estimators(settled, 0.5, "15:15")[OURS]["thru_err_mean"]


def test_the_line_counts_the_cases_probed_again() -> None:
    lines = fallback_lines([_record("a", True), _record("b", False), _record("c", False)],
                           ["15:15", "2:2"], 0.5, 0.95, 0.05)
    assert len(lines) == 1
    assert "then 15:15 where its probes ended in start-up (2 of 3 cases)" in lines[0]
    assert "median 34.0 s, worst 34.0 s" in lines[0]


def test_each_plans_advice_is_tabled_per_case() -> None:
    recs = [_record("a", True), _record("b", False)]
    lines = advice_by_plan(recs, ["15:15", "2:2"], 0.5)
    rows = [x for x in lines if x.startswith("| a ") or x.startswith("| b ")]
    assert len(rows) == 2
    want = estimators(recs[1], 0.5, "15:15")[OURS]
    assert f"| {want['advised']}, {want['quality']:.2f}, {want['thru_err_mean']:.3f} |" in rows[1]
    assert advice_by_plan(recs, ["2:2"], 0.5) == []  # one plan: nothing to set beside it

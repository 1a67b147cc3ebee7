"""`make eval PRESET=fresh2-long`'s starting point (tamebpf_eval.advise.truth_only):
the ground truth of another run, none of its probes."""

from __future__ import annotations

from tamebpf_eval.advise import truth_only


def test_truth_is_kept_and_earlier_probes_are_not() -> None:
    truth = {"1": {"mbit": [10.0, 11.0, 9.0], "cross_with": [40.0, 41.0, 39.0]}}
    rec = {"key": "fresh2-05/cubic/m=8", "truth": truth, "rounds": 3,
           "probes": {"2:2": [{"streams": 1}], "2:10": [{"streams": 10}]},
           "default_plan": "2:2"}
    out = truth_only([rec])
    assert list(out) == ["fresh2-05/cubic/m=8"]
    assert out["fresh2-05/cubic/m=8"]["probes"] == {}
    assert out["fresh2-05/cubic/m=8"]["truth"] == truth
    assert out["fresh2-05/cubic/m=8"]["rounds"] == 3
    assert rec["probes"]  # the source record is left as it was

"""Presentation of a Prediction: exact table text and the JSON shape."""

from __future__ import annotations

import json
import math

from tamebpf.model import Probe, Settings, fit_throughput, predict
from tamebpf.present.prediction import prediction_to_json, render_prediction_table

SMALL = predict(fit_throughput([Probe(1, 50.0), Probe(3, 120.0)]), Settings(max_streams=4))

SMALL_TABLE = """\
model partial-order-2 (throughput fit): a' = 2.813e-05  b' = 0.0003719
asymptote 188.56 Mbit/s; impact relative to a 1-stream transfer

streams      Mbit/s   impact  marks
      1       50.00    0.00%  probe
      2       90.87    9.13%  <- advice
      3      120.00   20.00%  probe
      4      139.53   30.24%

advice: 2 streams, 90.87 Mbit/s, cross-traffic impact 9.13%
  (the next stream would exceed the max impact of 10%)
"""


def test_table_exact_text() -> None:
    got = render_prediction_table(SMALL)
    assert got == SMALL_TABLE, f"expected:\n{SMALL_TABLE}\ngot:\n{got}"


def test_table_fits_80_columns_with_warnings() -> None:
    pred = predict(fit_throughput([Probe(1, 50.0), Probe(10, 40.0)]), Settings(max_streams=1024))
    text = render_prediction_table(pred)
    widest = max(len(line) for line in text.splitlines())
    assert widest <= 80, f"expected <= 80 columns, widest line has {widest}"
    assert "warning: aggregate throughput did not grow" in text, f"warning missing:\n{text}"


def test_table_marks_probe_that_is_also_advice() -> None:
    pred = predict(fit_throughput([Probe(1, 50.0), Probe(3, 150.0)]), Settings(max_streams=4))
    row = render_prediction_table(pred).splitlines()[6]
    assert row.endswith("probe <- advice") and row.lstrip().startswith("3 "), f"got {row!r}"


def test_json_core_shape() -> None:
    out = prediction_to_json(SMALL)
    for key in ("model", "probes", "params", "curve", "advice", "warnings"):
        assert key in out, f"missing key {key!r} in {sorted(out)}"
    assert out["model"] == "partial-order-2", f"got {out['model']}"
    assert out["probes"] == [
        {"streams": 1, "throughput_mbps": 50.0},
        {"streams": 3, "throughput_mbps": 120.0},
    ], f"got {out['probes']}"
    assert set(out["params"]) == {"a", "b"}, f"got {out['params']}"
    assert [c["streams"] for c in out["curve"]] == [1, 2, 3, 4], f"got {out['curve']}"
    assert set(out["curve"][0]) >= {"streams", "throughput_mbps", "impact"}, out["curve"][0]
    adv = out["advice"]
    assert set(adv) >= {"num_flows", "max_nondisruptive_thru_mbps", "cross_traffic_impact"}, adv
    assert adv["num_flows"] == 2, f"expected 2, got {adv['num_flows']}"
    assert out["warnings"] == [], f"got {out['warnings']}"
    json.dumps(out, allow_nan=False)  # serialisable, nothing non-finite


def test_json_worked_example_values() -> None:
    pred = predict(fit_throughput([Probe(1, 50.0), Probe(10, 200.0)]), Settings(max_impact=0.1))
    out = prediction_to_json(pred)
    assert len(out["curve"]) == 32, f"expected 32 curve points, got {len(out['curve'])}"
    adv = out["advice"]
    got = (adv["num_flows"], adv["max_nondisruptive_thru_mbps"], adv["cross_traffic_impact"])
    assert got[0] == 2 and math.isclose(got[1], 92.88, rel_tol=5e-4), f"got {got}"
    assert round(got[2], 4) == 0.0712, f"expected impact 0.0712, got {got}"
    assert math.isclose(out["params"]["a"], 2.121212e-05, rel_tol=5e-5), f"got {out['params']}"
    assert math.isclose(out["params"]["b"], 3.787879e-04, rel_tol=5e-5), f"got {out['params']}"

"""The (m+n)^2 model: sqrt(p'(n)) = alpha n + beta (docs/model.md)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tamebpf.model import LossSample, Probe, Settings, fit_loss_rtt, fit_throughput, predict


@given(cap=st.floats(1.0, 1e4), m=st.floats(0.1, 50.0), n2=st.integers(2, 64))
def test_fair_share_is_recovered_exactly(cap: float, m: float, n2: int) -> None:
    """n streams among m equal cross flows get cap * n / (n + m); two probes
    of that curve give back the whole curve, m = beta / alpha and the impact
    on a cross flow, 1 - (1 + m) / (n + m)."""
    share = [Probe(n, cap * n / (n + m)) for n in (1, n2)]
    fit = fit_throughput(share, "square")
    assert not fit.warnings
    assert fit.params["beta"] / fit.params["alpha"] == pytest.approx(m, rel=1e-6)
    for n in (1, 2, 5, 30, 100):
        assert fit.throughput(n) == pytest.approx(cap * n / (n + m), rel=1e-6)
        assert fit.impact(n) == pytest.approx(1 - (1 + m) / (n + m), abs=1e-9)


def test_partial_order_2_misses_what_square_fits() -> None:
    share = [Probe(n, 90.0 * n / (n + 2)) for n in (1, 10)]
    truth = 90.0 * 4 / 6
    assert fit_throughput(share, "square").throughput(4) == pytest.approx(truth)
    assert abs(fit_throughput(share, "partial").throughput(4) - truth) / truth > 0.05


def test_no_congestion_and_saturation_are_projected_with_warnings() -> None:
    flat = fit_throughput([Probe(1, 10.0), Probe(10, 100.0)], "square")
    assert flat.evidence_limit == 10 and "no congestion" in flat.warnings[0]
    assert predict(flat, Settings(max_impact=0.5)).advice.num_flows <= 10
    sat = fit_throughput([Probe(1, 50.0), Probe(10, 45.0)], "square")
    assert "saturated" in sat.warnings[0]
    assert sat.throughput(10) == pytest.approx(45.0)
    assert predict(sat, Settings(max_impact=0.1)).advice.num_flows == 1


def test_loss_rtt_fit_with_square_model() -> None:
    # p RTT^2 proportional to (n + 3)^2 at 20 ms: impact 1 - 4 / (n + 3).
    samples = [LossSample(n, 1e-4 * (n + 3) ** 2, 0.02, 10.0 * n / (n + 3)) for n in (1, 10)]
    fit = fit_loss_rtt(samples, "square")
    assert fit.impact(5) == pytest.approx(1 - 4 / 8)
    assert fit.throughput(5) == pytest.approx(50 / 8, rel=1e-6)

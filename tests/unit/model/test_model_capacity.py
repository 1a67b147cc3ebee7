"""The square-of-m-plus-n fit anchored at a known capacity (model/capacity.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tamebpf.model import (
    ModelInputError,
    Probe,
    Settings,
    competing_flows,
    fit_capacity,
    fit_throughput,
    predict,
)


@given(cap=st.floats(1.0, 1e4), m=st.floats(0.0, 60.0), n2=st.integers(2, 64))
def test_fair_share_is_recovered_from_either_probe(cap: float, m: float, n2: int) -> None:
    """On the fair-share curve cap * n / (n + m) every probe alone gives m back,
    and so does any weighting of them: the whole curve and impact follow."""
    for probes in ([Probe(1, cap / (1 + m))], [Probe(n2, cap * n2 / (n2 + m))],
                   [Probe(n, cap * n / (n + m)) for n in (1, n2)]):
        fit = fit_capacity(probes, cap)
        assert fit.capacity == cap
        assert competing_flows(fit) == pytest.approx(m, rel=1e-6, abs=1e-9)
        assert fit.asymptote == pytest.approx(cap)
        for n in (1, 3, 30):
            assert fit.throughput(n) == pytest.approx(cap * n / (n + m), rel=1e-6)
            assert fit.impact(n) == pytest.approx(1 - (1 + m) / (n + m), abs=1e-9)


def test_an_error_in_the_one_stream_probe_moves_m_far_less_than_the_free_fit() -> None:
    """30 competing flows, the one-stream probe 20% low (a new flow that has
    not reached its share): the free fit doubles m, the anchored fit barely
    moves, because the 10-stream probe weighs ten times as much."""
    cap, m = 95.0, 30.0
    probes = [Probe(1, 0.8 * cap / (1 + m)), Probe(10, cap * 10 / (10 + m))]
    free = competing_flows(fit_throughput(probes, "square"))
    anchored = competing_flows(fit_capacity(probes, cap))
    assert free is not None and anchored is not None
    assert abs(free - m) / m > 0.5
    assert abs(anchored - m) / m < 0.1


def test_weights_are_the_stream_counts() -> None:
    # m estimates: 1 stream 100/20 - 1 = 4; 10 streams 1000/50 - 10 = 10.
    fit = fit_capacity([Probe(1, 20.0), Probe(10, 50.0)], 100.0)
    assert competing_flows(fit) == pytest.approx((4 + 10 * 10) / 11)


def test_probes_at_capacity_mean_no_competing_flows() -> None:
    fit = fit_capacity([Probe(1, 100.0), Probe(10, 102.0)], 100.0)  # within the slack
    assert competing_flows(fit) == 0.0
    assert fit.impact(2) == pytest.approx(0.5)  # 1 - 1/n: each stream halves the others
    pred = predict(fit, Settings(max_impact=0.6))
    assert (pred.advice.num_flows, pred.advice.limited_by) == (1, "gain-threshold")


def test_advice_follows_fair_share() -> None:
    # m = 8 exactly: impact 1 - 9 / (n + 8) <= 0.5 up to n = 10.
    fit = fit_capacity([Probe(1, 10.0), Probe(10, 50.0)], 90.0)
    assert competing_flows(fit) == pytest.approx(8.0)
    assert predict(fit, Settings(max_impact=0.5, gain_threshold=0.0)).advice.num_flows == 10


@pytest.mark.parametrize(("probes", "cap", "needle"), [
    ([Probe(1, 50.0), Probe(10, 200.0)], 100.0, "10-stream probe measured 200"),
    ([Probe(1, 10.0)], 0.0, "capacity must be > 0"),
    ([Probe(1, 10.0)], float("nan"), "capacity must be finite"),
    ([], 10.0, "at least one Probe"),
])
def test_bad_input_names_what_is_wrong(probes: list[Probe], cap: float, needle: str) -> None:
    with pytest.raises(ModelInputError, match=needle):
        fit_capacity(probes, cap)


def test_competing_flows_only_for_the_square_model() -> None:
    partial = fit_throughput([Probe(1, 50.0), Probe(10, 200.0)], "partial")
    assert competing_flows(partial) is None

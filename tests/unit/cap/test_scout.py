"""The scout's reading of a paced transfer's path (cap/scout.py): on a
link shared fairly, it stands for the 1-stream probe advise would take."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tamebpf.cap.scout import MIN_LEFT, ScoutReading, follow_target, one_stream_share
from tamebpf.model import Probe, Settings, fit_capacity, predict


def fair(capacity: float, m: float, paced: float) -> ScoutReading:
    """The scout and m flows share what the paced streams leave."""
    scout = (capacity - paced) / (m + 1)
    return ScoutReading(scout, paced + scout, 20.0)


def test_the_scout_stands_for_a_one_stream_probe() -> None:
    r = fair(100.0, 8, 30.0)
    assert one_stream_share(r, 100.0) == pytest.approx(100.0 / 9)
    got = follow_target(r, 100.0, Settings(max_impact=0.3))
    probe = predict(fit_capacity([Probe(1, 100.0 / 9)], 100.0), Settings(max_impact=0.3))
    assert got.target_mbps == pytest.approx(probe.advice.max_nondisruptive_thru)
    assert got.competing_flows == pytest.approx(8.0)


def test_fewer_competing_flows_give_a_higher_target() -> None:
    s = Settings(max_impact=0.3)
    eight = follow_target(fair(100.0, 8, 35.0), 100.0, s).target_mbps
    two = follow_target(fair(100.0, 2, 35.0), 100.0, s).target_mbps
    assert eight is not None and two is not None and two > 1.2 * eight


def test_a_link_filled_by_the_paced_streams_says_nothing() -> None:
    r = ScoutReading(0.5, 100.0 * (1 - MIN_LEFT / 2) + 0.5, 20.0)
    got = follow_target(r, 100.0, Settings())
    assert got.target_mbps is None and got.why_not and "too little left" in got.why_not
    assert follow_target(ScoutReading(0.0, 30.0, 20.0), 100.0, Settings()).target_mbps is None


@settings(max_examples=300, deadline=None)
@given(capacity=st.floats(10.0, 10_000.0), m=st.integers(1, 30),
       paced_share=st.floats(0.0, 0.9), limit=st.floats(0.05, 0.6))
def test_the_target_is_what_the_probe_would_advise(capacity: float, m: int,
                                                   paced_share: float, limit: float) -> None:
    s = Settings(max_impact=limit)
    got = follow_target(fair(capacity, m, paced_share * capacity), capacity, s)
    assert got.one_stream_mbps == pytest.approx(capacity / (m + 1), rel=1e-9)
    assert got.competing_flows == pytest.approx(m, rel=1e-6)
    # the advice of that probe (computed from the same value: where the
    # limit falls exactly on a stream count, rounding may pick either side)
    want = predict(fit_capacity([Probe(1, got.one_stream_mbps)], capacity), s)
    assert got.target_mbps == pytest.approx(want.advice.max_nondisruptive_thru, rel=1e-9)
    assert got.prediction is not None
    assert got.prediction.advice.cross_traffic_impact <= limit + 1e-9

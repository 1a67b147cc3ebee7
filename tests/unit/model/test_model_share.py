"""The capacity-share advice for BBR senders (model/share.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tamebpf.model import ModelInputError, Probe, Settings
from tamebpf.model.share import competing, share_advice


def test_measured_points_are_conservation_exactly() -> None:
    a = share_advice([Probe(1, 20.0), Probe(10, 80.0)], 100.0, Settings(max_impact=0.5))
    one, ten = a.at(1), a.at(10)
    assert (one.cross, ten.cross) == (pytest.approx(80.0), pytest.approx(20.0))
    assert one.impact == 0.0 and ten.impact == pytest.approx(0.75)
    assert ten.impact_vs_none == pytest.approx(0.8)
    assert one.measured and ten.measured and not a.at(5).measured


def test_interpolated_points_lie_between_the_probes_and_rise() -> None:
    a = share_advice([Probe(1, 10.0), Probe(10, 60.0)], 100.0, Settings(max_impact=0.9))
    goodputs = [p.goodput for p in a.curve[:10]]
    assert goodputs == sorted(goodputs)
    for p in a.curve[1:9]:
        assert 10.0 <= p.goodput <= 60.0
        assert p.impact_low <= p.impact <= p.impact_high


def test_fair_share_is_reproduced_between_probes() -> None:
    # BBR against 4 BBR flows, fair shares n/(n+4): the interpolation in m
    # is exact when m is the same at both probes.
    c = 100.0
    a = share_advice([Probe(1, c / 5), Probe(10, c * 10 / 14)], c, Settings(max_impact=0.9))
    assert a.at(4).goodput == pytest.approx(c * 4 / 8)
    assert competing(4, a.at(4).goodput, c) == pytest.approx(4.0)


def test_advice_is_the_largest_count_within_the_limit() -> None:
    s = Settings(max_impact=0.10)
    a = share_advice([Probe(1, 1.9), Probe(10, 68.0)], 95.0, s)
    n = a.advice.num_flows
    assert a.at(n).impact <= 0.10 < a.at(n + 1).impact
    assert a.advice.limited_by == "max-impact"


def test_one_stream_taking_most_of_the_link_is_warned_about() -> None:
    # Against CUBIC: one BBR stream took 78.4 of 93.1 Mbit/s; two left 2.6.
    a = share_advice([Probe(1, 78.4), Probe(10, 92.0)], 93.1, Settings(max_impact=0.10))
    assert a.advice.num_flows == 1
    assert any("single stream already takes 84%" in w for w in a.advice.warnings)


def test_a_third_probe_is_asked_where_the_range_holds_the_limit() -> None:
    a = share_advice([Probe(1, 5.0), Probe(10, 60.0)], 100.0, Settings(max_impact=0.10))
    n = a.advice.num_flows
    assert a.next_probe in (n, n + 1)
    third = a.next_probe
    assert third is not None
    b = share_advice([Probe(1, 5.0), Probe(10, 60.0), Probe(third, a.at(third).goodput)],
                     100.0, Settings(max_impact=0.10))
    assert b.at(third).measured
    assert b.next_probe != third


def test_needs_a_one_stream_probe() -> None:
    with pytest.raises(ModelInputError):
        share_advice([Probe(2, 5.0), Probe(10, 60.0)], 100.0, Settings())


@given(g1=st.floats(0.1, 150.0), g2=st.floats(0.1, 150.0), c=st.floats(1.0, 120.0),
       limit=st.floats(0.0, 1.0))
def test_any_goodputs_give_a_bounded_monotone_curve(g1: float, g2: float, c: float,
                                                    limit: float) -> None:
    a = share_advice([Probe(1, g1), Probe(10, g2)], c, Settings(max_impact=limit))
    for p in a.curve:
        assert 0.0 <= p.impact_low <= p.impact <= p.impact_high <= 1.0
        assert 0.0 <= p.goodput <= c
    assert [p.impact for p in a.curve] == sorted(p.impact for p in a.curve)
    assert 1 <= a.advice.num_flows <= 32

"""The impact ranges of the advice (model/confidence.py): pure, no kernel."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tamebpf.model import ModelInputError, Probe, fit_throughput
from tamebpf.model.confidence import impact_ranges, relative_standard_error

PROBES = [Probe(1, 20.0), Probe(10, 60.0)]
NS = list(range(1, 17))


def square(probes: object) -> object:
    return fit_throughput(probes, "square")  # type: ignore[arg-type]


def test_exact_probes_give_a_point() -> None:
    for r in impact_ranges(square, PROBES, [0.0, 0.0], NS):  # type: ignore[arg-type]
        assert r.low == r.impact == r.high, r


def test_the_range_holds_the_impact_and_widens_with_noise() -> None:
    narrow = impact_ranges(square, PROBES, [0.01, 0.01], NS)  # type: ignore[arg-type]
    wide = impact_ranges(square, PROBES, [0.05, 0.05], NS)  # type: ignore[arg-type]
    for a, b in zip(narrow, wide, strict=True):
        assert a.low <= a.impact <= a.high, a
        assert b.low <= a.low and a.high <= b.high, (a, b)
    assert any(b.high - b.low > 0.01 for b in wide), wide


def test_refitting_with_the_error_moves_the_impact_inside_the_range() -> None:
    """The range says how far the impact moves when a probe's goodput moves
    by its error: check that against fits made from moved goodputs."""
    se = [0.03, 0.03]
    ranges = {r.streams: r for r in impact_ranges(square, PROBES, se, NS)}  # type: ignore[arg-type]
    for k in range(2):
        for sign in (-1, 1):
            moved = list(PROBES)
            moved[k] = Probe(PROBES[k].streams, PROBES[k].throughput * (1 + sign * se[k]))
            fit = fit_throughput(moved, "square")
            for n in (2, 4, 8):
                assert ranges[n].low - 1e-3 <= fit.impact(n) <= ranges[n].high + 1e-3, (
                    n, fit.impact(n), ranges[n])


def test_straddling_counts_are_those_whose_range_holds_the_limit() -> None:
    ranges = impact_ranges(square, PROBES, [0.05, 0.05], NS)  # type: ignore[arg-type]
    limit = ranges[2].impact  # 3 streams' own prediction: the limit is inside its range
    straddling = [r.streams for r in ranges if r.straddles(limit)]
    assert 3 in straddling, ranges
    assert 1 not in straddling and 16 not in straddling, straddling


@given(st.floats(1.0, 100.0), st.floats(1.5, 20.0), st.floats(0.0, 0.2))
def test_ranges_stay_in_zero_one(t1: float, ratio: float, se: float) -> None:
    probes = [Probe(1, t1), Probe(10, t1 * ratio)]
    try:
        ranges = impact_ranges(square, probes, [se, se], NS)  # type: ignore[arg-type]
    except ModelInputError:
        return
    for r in ranges:
        assert 0.0 <= r.low <= r.impact <= r.high <= 1.0, r


def test_bad_errors_are_refused() -> None:
    with pytest.raises(ModelInputError):
        impact_ranges(square, PROBES, [0.1], NS)  # type: ignore[arg-type]
    with pytest.raises(ModelInputError):
        impact_ranges(square, PROBES, [0.1, -1.0], NS)  # type: ignore[arg-type]


def test_relative_standard_error() -> None:
    assert relative_standard_error(0.2, 16) == pytest.approx(0.05)
    assert relative_standard_error(None, 16) == 0.0
    assert relative_standard_error(0.2, 1) == 0.0

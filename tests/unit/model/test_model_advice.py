"""Choosing num_flows: impact limit, gain threshold, max streams, defaults."""

from __future__ import annotations

import math

from tamebpf.model import (
    DEFAULT_GAIN_THRESHOLD,
    DEFAULT_MAX_IMPACT,
    DEFAULT_MAX_STREAMS,
    Probe,
    advise,
    fit_throughput,
)

WORKED = fit_throughput([Probe(1, 50.0), Probe(10, 200.0)])


def test_defaults_are_documented_values() -> None:
    got = (DEFAULT_MAX_IMPACT, DEFAULT_GAIN_THRESHOLD, DEFAULT_MAX_STREAMS)
    assert got == (0.10, 0.01, 32), f"expected (0.10, 0.01, 32), got {got}"


def test_impact_limit_picks_largest_n_within_it() -> None:
    for limit in (0.0, 0.05, 0.2, 0.5, 0.8):
        adv = advise(WORKED, max_impact=limit, gain_threshold=0.0)
        n = adv.num_flows
        assert WORKED.impact(n) <= limit, f"limit {limit}: impact {WORKED.impact(n)} at n={n}"
        assert n == 32 or WORKED.impact(n + 1) > limit, (
            f"limit {limit}: n={n + 1} also fits (impact {WORKED.impact(n + 1)})"
        )


def test_gain_threshold_stops_early() -> None:
    # Gains on the worked example: 10->11 is +1.34%, 11->12 +1.05%, 12->13 +0.82%.
    adv = advise(WORKED, max_impact=1.0, gain_threshold=0.01)
    assert (adv.num_flows, adv.limited_by) == (12, "gain-threshold"), f"got {adv}"
    adv = advise(WORKED, max_impact=1.0, gain_threshold=0.0)
    assert (adv.num_flows, adv.limited_by) == (32, "max-streams"), f"got {adv}"


def test_max_streams_caps_advice() -> None:
    adv = advise(WORKED, max_impact=1.0, gain_threshold=0.0, max_streams=5)
    assert (adv.num_flows, adv.limited_by) == (5, "max-streams"), f"got {adv}"
    assert math.isclose(adv.max_nondisruptive_thru, 165.831, rel_tol=5e-5), f"got {adv}"


def test_max_streams_one() -> None:
    adv = advise(WORKED, max_streams=1)
    assert (adv.num_flows, adv.cross_traffic_impact) == (1, 0.0), f"got {adv}"


def test_uncongested_path_gain_threshold_does_not_bind() -> None:
    # Linear growth: the n-th stream adds 1/n, above 1% for n <= 100.
    fit = fit_throughput([Probe(1, 10.0), Probe(40, 400.0)])
    adv = advise(fit, max_streams=32)
    assert (adv.num_flows, adv.limited_by) == (32, "max-streams"), f"got {adv}"

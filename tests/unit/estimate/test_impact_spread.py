"""The impact range widened by the path's round-to-round spread
(estimate/advice.impact_confidence, model/confidence.widened): pure, no
kernel. It holds the delta-method range of the probes' own noise and the
impact the advice's own fit gives on every set of moved probes the count
range reruns (estimate/spread.moved_probes)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tamebpf.estimate.advice import build, impact_confidence, path_spread
from tamebpf.estimate.record import AdviseResult
from tamebpf.estimate.spread import moved_probes, rerun_moved
from tamebpf.estimate.steady import window_samples
from tamebpf.model import ModelInputError, Probe, Settings, fit_capacity, fit_throughput
from tamebpf.model.confidence import (
    ImpactRange,
    impact_ranges,
    relative_standard_error,
    widened,
)
from tamebpf.model.share import share_advice
from tests.unit.advise.test_advise_report import TARGET, probe

SETTINGS = Settings(max_impact=0.26)


def advice(noise: float = 0.05, rtt_ms: float = 20.0, stopped: str | None = "settled",
           mbps: tuple[float, float] = (50.0, 200.0)) -> AdviseResult:
    return build(TARGET, [replace(probe(1, mbps[0], rtt_ms=rtt_ms, noise=noise), stopped=stopped),
                          replace(probe(10, mbps[1], rtt_ms=rtt_ms, noise=noise), stopped=stopped)],
                 SETTINGS)


def measured(r: AdviseResult) -> list[Probe]:
    return [Probe(p.streams, p.steady.goodput_mbps) for p in r.probes]


def test_the_moved_probe_sets_are_every_combination_of_up_and_down() -> None:
    ps = [Probe(1, 10.0), Probe(4, 30.0), Probe(10, 50.0)]
    sets = list(moved_probes(ps, 0.25))
    assert len(sets) == 8 and len({tuple(m) for m in sets}) == 8
    for m in sets:
        for p, q in zip(ps, m, strict=True):
            assert q.streams == p.streams
            assert q.throughput / p.throughput in (pytest.approx(1.25), pytest.approx(0.8))
    assert list(moved_probes(ps, 0.0)) == []


def test_spread_zero_gives_the_delta_method_range() -> None:
    r = advice()
    se = [relative_standard_error(p.steady.noise, window_samples(p.steady)) for p in r.probes]
    assert min(se) > 0.0
    own = impact_ranges(lambda ps: fit_throughput(ps, "square"), measured(r), se,
                        [c.streams for c in r.prediction.curve])
    assert impact_confidence(r, SETTINGS, spread=0.0) == tuple(own)


@pytest.mark.parametrize("noise", [0.0, 0.05, 0.3])
def test_the_advised_range_holds_the_delta_range_and_every_moved_fits_impact(
        noise: float) -> None:
    """Fails on the delta method alone: with quiet probes (noise 0) it is a
    point, while a round of the path moved by its spread gives other
    impacts."""
    r = advice(noise)
    s = path_spread(r.probes)
    own = {x.streams: x for x in impact_confidence(r, SETTINGS, spread=0.0)}
    for x in r.confidence:
        assert x.low <= own[x.streams].low and own[x.streams].high <= x.high, (x, own[x.streams])
        assert x.low <= x.impact <= x.high, x
    n = r.prediction.advice.num_flows
    at_n = next(x for x in r.confidence if x.streams == n)
    impacts = [fit_throughput(m, "square").impact(n) for m in moved_probes(measured(r), s)]
    assert len(impacts) == 4
    assert at_n.low == pytest.approx(min(own[n].low, *impacts))
    assert at_n.high == pytest.approx(max(own[n].high, *impacts))
    assert at_n.high - at_n.low > 0.1, at_n


def test_a_wider_class_spread_gives_a_wider_range() -> None:
    short = advice(rtt_ms=20.0, stopped="settled")
    long = advice(rtt_ms=120.0, stopped="time limit")
    assert path_spread(long.probes) > path_spread(short.probes)

    def advised(r: AdviseResult) -> ImpactRange:
        return next(x for x in r.confidence if x.streams == r.prediction.advice.num_flows)
    a, b = advised(short), advised(long)
    assert a.streams == b.streams and b.low <= a.low and a.high < b.high, (a, b)


def test_the_capacity_fit_is_moved_as_the_advice_used_it() -> None:
    r = build(TARGET, [probe(1, 20.0), probe(10, 60.0)], SETTINGS, capacity_mbps=100.0)
    assert r.used == "capacity" and r.capacity is not None
    cap = r.capacity.goodput_mbps
    s = path_spread(r.probes)
    n = r.prediction.advice.num_flows
    impacts = rerun_moved(lambda ps: fit_capacity(ps, cap).impact(n), measured(r), s)
    at_n = next(x for x in r.confidence if x.streams == n)
    assert impacts and at_n.low <= min(impacts) and max(impacts) <= at_n.high, (impacts, at_n)


def test_a_ceiling_stops_the_moves_that_pass_it() -> None:
    ps = [Probe(1, 30.0), Probe(10, 80.0)]
    sets = list(moved_probes(ps, 1.0, ceiling=100.0))
    assert len(sets) == 4
    assert {m[1].throughput for m in sets} == {100.0, 40.0}  # 160 stops at 100
    assert {m[0].throughput for m in sets} == {60.0, 15.0}  # under it: moved as before
    # A probe measured above the ceiling (within the fit's slack) keeps its own value.
    assert max(m[0].throughput for m in moved_probes([Probe(1, 101.0)], 0.5, 100.0)) == 101.0


def test_a_long_unsettled_capacity_fit_reaches_up_to_what_the_capacity_allows() -> None:
    """A long path with a probe at its limit (spread 1: a round may give 2x
    or half): the 10-stream probe moved up passes the capacity. Dropping
    such a move (as before) left the range's top where the other moves put
    it; stopped at the capacity, the move gives the highest impact a round
    could show, and the range holds it (draws 3-8: 10 of the 15 misses of
    that class lay there)."""
    r = build(TARGET, [replace(probe(1, 20.0, rtt_ms=120.0), stopped="time limit"),
                       replace(probe(10, 60.0, rtt_ms=120.0), stopped="time limit")],
              SETTINGS, capacity_mbps=100.0)
    assert r.used == "capacity" and r.capacity is not None and path_spread(r.probes) == 1.0
    cap, n = r.capacity.goodput_mbps, r.prediction.advice.num_flows

    def at_n(ranges: tuple[ImpactRange, ...]) -> ImpactRange:
        return next(x for x in ranges if x.streams == n)
    dropped, stopped = (at_n(impact_confidence(r, SETTINGS, clip=c)) for c in (False, True))
    top = max(fit_capacity(m, cap).impact(n)
              for m in moved_probes(measured(r), 1.0, ceiling=cap))
    assert at_n(r.confidence) == stopped, "the advice's range is the one stopped at the capacity"
    assert stopped.high == pytest.approx(top)
    assert dropped.high < top - 0.05, (dropped, top)
    assert stopped.low == pytest.approx(dropped.low)


def test_bbr_share_ranges_are_widened_but_the_third_probe_is_decided_as_before() -> None:
    """The share advice's own range (between the probed counts) decides
    where a third probe runs; the widened one is what the advice reports."""
    r = build(TARGET, [probe(1, 20.0, cc="bbr"), probe(10, 80.0, cc="bbr")],
              Settings(max_impact=0.10), capacity_mbps=100.0)
    assert r.share is not None and r.capacity is not None
    s = path_spread(r.probes)
    cap = r.capacity.goodput_mbps
    alone = share_advice(measured(r), cap, Settings(max_impact=0.10))
    assert r.share == alone, "the share advice (and its third probe) is the model's own"
    moved = [share_advice(m, cap, Settings(max_impact=0.10)) for m in moved_probes(measured(r), s)]
    for x, p in zip(r.confidence, r.share.curve, strict=True):
        assert x.low <= p.impact_low and p.impact_high <= x.high, (x, p)
        for m in moved:
            assert x.low - 1e-12 <= m.at(x.streams).impact <= x.high + 1e-12
    assert any(x.low < p.impact_low or x.high > p.impact_high
               for x, p in zip(r.confidence, r.share.curve, strict=True))


def test_a_refusal_has_no_range() -> None:
    r = build(TARGET, [probe(1, 50.0, cc="bbr"), probe(10, 200.0, cc="bbr")], SETTINGS)
    assert r.refused is not None and r.confidence == () and r.streams_range is None


def test_widened_adds_only_counts_it_has_and_stays_in_zero_one() -> None:
    base = [ImpactRange(1, 0.0, 0.0, 0.0), ImpactRange(2, 0.2, 0.15, 0.25)]
    got = widened(base, [{2: 0.1, 3: 0.9}, {2: 1.4, 1: -0.2}, {}])
    assert got == [ImpactRange(1, 0.0, 0.0, 0.0), ImpactRange(2, 0.2, 0.1, 1.0)]
    assert widened(base, []) == base


@settings(max_examples=60, deadline=None)
@given(st.floats(1.0, 100.0), st.floats(1.2, 20.0), st.floats(0.0, 0.3), st.floats(0.0, 1.0))
def test_widened_holds_the_delta_range_and_the_moved_fits(t1: float, ratio: float, se: float,
                                                          s: float) -> None:
    probes = [Probe(1, t1), Probe(10, t1 * ratio)]

    def refit(ps: object) -> object:
        return fit_throughput(ps, "square")  # type: ignore[arg-type]
    ns = list(range(1, 17))
    try:
        own = impact_ranges(refit, probes, [se, se], ns)  # type: ignore[arg-type]
    except ModelInputError:
        return
    moved = rerun_moved(lambda ps: {n: fit_throughput(ps, "square").impact(n) for n in ns},
                        probes, s)
    for x, o in zip(widened(own, moved), own, strict=True):
        assert 0.0 <= x.low <= o.low and o.high <= x.high <= 1.0, (x, o)
        for m in moved:
            assert x.low <= min(1.0, max(0.0, m[x.streams])) <= x.high, (x, m[x.streams])

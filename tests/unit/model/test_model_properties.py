"""Property tests: fits recover parameters, curves are monotone, advice keeps
its limits, and nothing depends on the throughput unit."""

from __future__ import annotations

import math

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tamebpf.model import (
    Fit,
    LossSample,
    Probe,
    Settings,
    advise,
    fit_loss_rtt,
    fit_throughput,
    predict,
)

FAST = settings(max_examples=150, deadline=None)

# a' = 1/asymptote^2 for asymptotes from 1 kbit/s to 100 Gbit/s (in Mbit/s);
# b'/a' (roughly (m+1)^2, cross traffic) from 0.01 to 1e4.
asymptotes = st.floats(1e-3, 1e5)
ratios = st.floats(1e-2, 1e4)
levels = st.lists(st.integers(1, 64), min_size=2, max_size=2, unique=True).map(sorted)
positive_mbps = st.floats(1e-3, 1e5)


def curve_probes(a: float, b: float, ns: list[int]) -> list[Probe]:
    return [Probe(n, n / math.sqrt(a * n * n + b)) for n in ns]


@FAST
@given(asymptotes, ratios, levels)
def test_partial_fit_recovers_parameters(asym: float, ratio: float, ns: list[int]) -> None:
    a = 1 / asym**2
    b = ratio * a
    fit = fit_throughput(curve_probes(a, b, ns))
    assert math.isclose(fit.params["a"], a, rel_tol=1e-6), f"a': want {a}, got {fit.params}"
    assert math.isclose(fit.params["b"], b, rel_tol=1e-6), f"b': want {b}, got {fit.params}"
    assert fit.warnings == (), f"clean data gave warnings {fit.warnings}"


@FAST
@given(
    asymptotes,
    ratios,
    st.floats(0.0, 100.0),
    st.sets(st.integers(1, 64), min_size=3, max_size=3).map(sorted),
)
def test_full_fit_reproduces_curve(asym: float, ratio: float, m: float, ns: list[int]) -> None:
    # Eq 5 -> Eq 6: a (m + n)^2 + b1 = a n^2 + 2am n + (a m^2 + b1)
    a = 1 / asym**2
    b2, c2 = 2 * a * m, a * m * m + ratio * a
    probes = [Probe(n, n / math.sqrt(a * n * n + b2 * n + c2)) for n in ns]
    fit = fit_throughput(probes, "full")
    assume(fit.model == "full-order-2")  # rounding may flip a ~0 coefficient's sign
    for n in (1, 2, 10, 32, 64):
        want = n / math.sqrt(a * n * n + b2 * n + c2)
        assert math.isclose(fit.throughput(n), want, rel_tol=1e-6), (
            f"n={n}: want {want}, got {fit.throughput(n)} (params {fit.params})"
        )


@FAST
@given(
    st.floats(1e-4, 1.0), st.floats(1e-4, 1.0), st.floats(1e-6, 1.0), levels, st.floats(1e-3, 0.5)
)
def test_loss_rtt_fit_recovers_impact_curve(
    u: float, v: float, pmax: float, ns: list[int], rtt: float
) -> None:
    # p RTT^2 = a n^2 + b with a, b chosen so that p stays <= pmax up to n = 64.
    a = rtt**2 * pmax * u / (2 * 64**2)
    b = rtt**2 * pmax * v / 2
    samples = [LossSample(n, (a * n * n + b) / rtt**2, rtt, 1.0) for n in ns]
    fit = fit_loss_rtt(samples)
    for n in (1, 3, 16, 64):
        want = 1 - math.sqrt((a + b) / (a * n * n + b))
        assert math.isclose(fit.impact(n), want, rel_tol=1e-6, abs_tol=1e-9), (
            f"n={n}: want impact {want}, got {fit.impact(n)}"
        )


@FAST
@given(asymptotes, ratios)
def test_curves_monotone_for_positive_a(asym: float, ratio: float) -> None:
    a = 1 / asym**2
    fit = Fit("partial-order-2", (a, 0.0, ratio * a), ())
    prev_bw, prev_imp, prev_none = 0.0, -1.0, -1.0
    for n in range(1, 65):
        bw, imp, none = fit.throughput(n), fit.impact(n), fit.impact(n, "none")
        assert bw > prev_bw, f"throughput not increasing at n={n}: {prev_bw} -> {bw}"
        assert imp >= prev_imp and none >= prev_none, f"impact decreasing at n={n}"
        assert 0.0 <= imp <= 1.0 and 0.0 <= none <= 1.0, f"impact outside [0,1] at n={n}"
        prev_bw, prev_imp, prev_none = bw, imp, none


models = st.sampled_from(["partial", "full", "linear", "square"])


@st.composite
def model_and_probes(draw: st.DrawFn) -> tuple[str, list[Probe]]:
    """A model and probes at enough distinct levels for it (one spare at most)."""
    model = draw(models)
    need = 3 if model == "full" else 2
    ns = draw(st.lists(st.integers(1, 64), min_size=need, max_size=need + 1, unique=True))
    return model, [Probe(n, draw(positive_mbps)) for n in ns]


limits = st.builds(
    Settings,
    max_impact=st.floats(0.0, 1.0),
    gain_threshold=st.floats(0.0, 1.0),
    max_streams=st.integers(1, 64),
    baseline=st.sampled_from(["one-stream", "none"]),
)


@FAST
@given(model_and_probes(), limits)
def test_any_probes_give_finite_monotone_curves(mp: tuple[str, list[Probe]], s: Settings) -> None:
    model, probes = mp
    pred = predict(fit_throughput(probes, model), s)  # type: ignore[arg-type]
    prev_bw, prev_imp = 0.0, 0.0
    for c in pred.curve:
        assert math.isfinite(c.throughput) and c.throughput > 0, f"bad throughput {c}"
        assert c.throughput >= prev_bw * (1 - 1e-12), f"throughput fell at {c}"
        assert 0.0 <= c.impact <= 1.0, f"impact outside [0, 1]: {c}"
        assert c.impact >= prev_imp - 1e-12, f"impact fell at {c}"
        prev_bw, prev_imp = c.throughput, c.impact


@FAST
@given(model_and_probes(), limits)
def test_advice_respects_limits(mp: tuple[str, list[Probe]], s: Settings) -> None:
    model, probes = mp
    fit = fit_throughput(probes, model)  # type: ignore[arg-type]
    adv = advise(fit, s.max_impact, s.gain_threshold, s.max_streams, s.baseline)
    n = adv.num_flows
    assert 1 <= n <= s.max_streams, f"num_flows {n} outside [1, {s.max_streams}]"
    if fit.evidence_limit is not None:
        assert n <= fit.evidence_limit, f"{n} beyond the evidence limit {fit.evidence_limit}"
    if n > 1 or s.baseline == "one-stream":
        assert adv.cross_traffic_impact <= s.max_impact, (
            f"impact {adv.cross_traffic_impact} > max {s.max_impact} at n={n}"
        )
    else:
        assert adv.cross_traffic_impact <= s.max_impact or adv.warnings, "missing warning"
    for k in range(1, n):  # every stream added paid its way
        gain = fit.throughput(k + 1) / fit.throughput(k) - 1
        assert gain >= s.gain_threshold and gain > 0, (
            f"stream {k + 1} gained {gain}, threshold {s.gain_threshold}"
        )


def _near_a_decision(fit: Fit, s: Settings) -> bool:
    """True if rounding after a unit change could flip a comparison."""
    for n in range(1, s.max_streams + 1):
        if abs(fit.impact(n, s.baseline) - s.max_impact) < 1e-9:
            return True
        if n > 1:
            gain = fit.throughput(n) / fit.throughput(n - 1) - 1
            if abs(gain - s.gain_threshold) < 1e-9 or abs(gain) < 1e-9:
                return True
    return False


@FAST
@given(model_and_probes(), limits, st.sampled_from([1e3, 1e-3, 8.0, 0.125, 1e6]))
def test_results_do_not_depend_on_unit(
    mp: tuple[str, list[Probe]], s: Settings, scale: float
) -> None:
    model, probes = mp
    fit = fit_throughput(probes, model)  # type: ignore[arg-type]
    assume(not _near_a_decision(fit, s))
    scaled = fit_throughput([Probe(p.streams, p.throughput * scale) for p in probes], model)  # type: ignore[arg-type]
    one, other = predict(fit, s), predict(scaled, s)
    assert one.advice.num_flows == other.advice.num_flows, (
        f"num_flows {one.advice.num_flows} in one unit, {other.advice.num_flows} in another"
    )
    assert one.model == other.model and len(one.warnings) == len(other.warnings)
    for c1, c2 in zip(one.curve, other.curve, strict=True):
        assert math.isclose(c1.throughput * scale, c2.throughput, rel_tol=1e-9), (
            f"n={c1.streams}: {c1.throughput} x {scale} != {c2.throughput}"
        )
        assert math.isclose(c1.impact, c2.impact, rel_tol=1e-9, abs_tol=1e-12), (
            f"n={c1.streams}: impact {c1.impact} != {c2.impact}"
        )


@FAST
@given(
    st.lists(
        st.tuples(st.integers(1, 1024), st.floats(min_value=1e-320, max_value=1e308)),
        min_size=2,
        max_size=3,
    ),
    models,
    limits,
)
def test_any_magnitude_gives_error_or_finite_result(
    raw: list[tuple[int, float]], model: str, s: Settings
) -> None:
    from tamebpf.model import ModelInputError

    try:
        pred = predict(fit_throughput([Probe(n, bw) for n, bw in raw], model), s)  # type: ignore[arg-type]
    except ModelInputError:
        return
    for c in pred.curve:
        assert math.isfinite(c.throughput) and 0.0 <= c.impact <= 1.0, f"bad point {c}"
    assert math.isfinite(pred.advice.max_nondisruptive_thru), f"bad advice {pred.advice}"

"""Degenerate input: a clear error or a warned, safe, finite result. Never NaN/inf."""

from __future__ import annotations

import math

import pytest

from tamebpf.model import (
    LossSample,
    ModelInputError,
    Probe,
    Settings,
    advise,
    fit_loss_rtt,
    fit_throughput,
    predict,
)


def assert_all_finite(fit_probes: list[Probe], model: str = "partial") -> None:
    pred = predict(fit_throughput(fit_probes, model), Settings(max_streams=64))  # type: ignore[arg-type]
    for c in pred.curve:
        assert math.isfinite(c.throughput) and c.throughput > 0, f"bad throughput at {c}"
        assert 0.0 <= c.impact <= 1.0, f"impact out of [0, 1] at {c}"
    adv = pred.advice
    assert math.isfinite(adv.max_nondisruptive_thru), f"non-finite advice {adv}"


# --- a' <= 0: no congestion seen -------------------------------------------


def test_negative_a_advises_largest_probe_with_warning() -> None:
    probes = [Probe(1, 50.0), Probe(10, 600.0)]  # per-stream rate went up
    fit = fit_throughput(probes)
    assert fit.params["a"] == 0.0, f"expected a' clamped to 0, got {fit.params}"
    assert any("no congestion" in w for w in fit.warnings), f"no warning: {fit.warnings}"
    adv = advise(fit, max_impact=0.05, max_streams=32)
    assert (adv.num_flows, adv.limited_by) == (10, "evidence"), (
        f"expected 10 streams limited by evidence, got {adv.num_flows} by {adv.limited_by}"
    )
    assert math.isclose(adv.max_nondisruptive_thru, 600.0), (
        f"curve must pass through the largest probe, got {adv.max_nondisruptive_thru}"
    )
    assert adv.cross_traffic_impact == 0.0, f"expected impact 0, got {adv.cross_traffic_impact}"
    assert_all_finite(probes)


def test_exactly_linear_growth_is_no_congestion() -> None:
    fit = fit_throughput([Probe(2, 100.0), Probe(4, 200.0)])  # a' = 0 exactly
    assert fit.evidence_limit == 4, f"expected evidence limit 4, got {fit.evidence_limit}"
    assert advise(fit).num_flows == 4, f"expected 4, got {advise(fit).num_flows}"


def test_evidence_limit_respects_smaller_max_streams() -> None:
    fit = fit_throughput([Probe(1, 50.0), Probe(10, 600.0)])
    adv = advise(fit, max_streams=6)
    assert (adv.num_flows, adv.limited_by) == (6, "max-streams"), f"got {adv}"


# --- BW2 <= BW1: more streams, no more throughput ----------------------------


@pytest.mark.parametrize("bw2", [50.0, 40.0, 1.0])
def test_throughput_not_growing_advises_one_stream(bw2: float) -> None:
    probes = [Probe(1, 50.0), Probe(10, bw2)]
    fit = fit_throughput(probes)
    assert any("did not grow" in w for w in fit.warnings), f"no warning: {fit.warnings}"
    assert fit.params["b"] == 0.0, f"expected b' = 0, got {fit.params}"
    assert math.isclose(fit.throughput(10), bw2), "curve must pass the 10-stream probe"
    adv = advise(fit, max_impact=1.0, gain_threshold=0.0)
    assert adv.num_flows == 1, f"expected 1 stream, got {adv.num_flows}"
    assert_all_finite(probes)


def test_saturated_with_smallest_probe_above_one() -> None:
    # b' < 0 makes p'(1) negative in the raw fit: impact vs 1 stream must still work.
    probes = [Probe(4, 100.0), Probe(8, 90.0)]
    fit = fit_throughput(probes)
    assert math.isclose(fit.impact(2), 0.5), f"b'=0 gives impact 1-1/n, got {fit.impact(2)}"
    assert fit.impact(1, "none") == 1.0, f"b'=0: impact vs none is 1, got {fit.impact(1, 'none')}"
    assert_all_finite(probes)


def test_linear_model_negative_b_is_clamped() -> None:
    probes = [Probe(1, 50.0), Probe(10, 120.0)]  # BW2 < sqrt(10) BW1 -> linear b < 0
    fit = fit_throughput(probes, "linear")
    assert fit.params["b"] == 0.0, f"expected b' = 0, got {fit.params}"
    assert fit.warnings, "expected a warning"
    assert_all_finite(probes, "linear")


def test_full_model_negative_coefficient_falls_back_to_partial() -> None:
    probes = [Probe(1, 50.0), Probe(5, 190.0), Probe(10, 200.0)]
    fit = fit_throughput(probes, "full")
    assert fit.model == "partial-order-2", f"expected fallback to partial, got {fit.model}"
    assert any("full order 2" in w for w in fit.warnings), f"no warning: {fit.warnings}"
    assert_all_finite(probes, "full")


# --- equal levels, bad numbers -------------------------------------------------


@pytest.mark.parametrize(
    ("probes", "model"),
    [
        ([Probe(5, 50.0), Probe(5, 80.0)], "partial"),
        ([Probe(5, 50.0)], "partial"),
        ([], "linear"),
        ([Probe(1, 50.0), Probe(1, 60.0), Probe(10, 200.0)], "full"),
    ],
)
def test_too_few_distinct_levels_is_an_error(probes: list[Probe], model: str) -> None:
    with pytest.raises(ModelInputError, match="different stream counts"):
        fit_throughput(probes, model)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("streams", "mbps"),
    [
        (0, 50.0),
        (-1, 50.0),
        (1.5, 50.0),
        (True, 50.0),
        (1, 0.0),
        (1, -5.0),
        (1, math.nan),
        (1, math.inf),
        (1, "50"),
    ],
)
def test_bad_probe_numbers_are_errors(streams: object, mbps: object) -> None:
    with pytest.raises(ModelInputError):
        Probe(streams, mbps)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("loss", "rtt", "bw"),
    [
        (-0.1, 0.05, None),
        (1.5, 0.05, None),
        (math.nan, 0.05, None),
        (0.01, 0.0, None),
        (0.01, math.inf, None),
        (0.01, 0.05, 0.0),
        (0.01, 0.05, math.nan),
    ],
)
def test_bad_sample_numbers_are_errors(loss: float, rtt: float, bw: float | None) -> None:
    with pytest.raises(ModelInputError):
        LossSample(1, loss, rtt, bw)


def test_unknown_model_is_an_error() -> None:
    with pytest.raises(ModelInputError, match="unknown model"):
        fit_throughput([Probe(1, 50.0), Probe(10, 200.0)], "cubic")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_impact": -0.1},
        {"max_impact": 1.5},
        {"max_impact": math.nan},
        {"gain_threshold": -0.01},
        {"gain_threshold": math.inf},
        {"max_streams": 0},
        {"max_streams": 5000},
        {"max_streams": 2.5},
        {"baseline": "two-streams"},
    ],
)
def test_bad_settings_are_errors(kwargs: dict[str, object]) -> None:
    with pytest.raises(ModelInputError):
        Settings(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("n", [0, -1, math.nan, math.inf])
def test_bad_stream_count_for_prediction_is_an_error(n: float) -> None:
    fit = fit_throughput([Probe(1, 50.0), Probe(10, 200.0)])
    with pytest.raises(ModelInputError):
        fit.throughput(n)
    with pytest.raises(ModelInputError):
        fit.impact(n)


# --- zero loss in kernel samples -----------------------------------------------


def test_zero_loss_everywhere_is_no_congestion() -> None:
    samples = [LossSample(1, 0.0, 0.05, 40.0), LossSample(10, 0.0, 0.05, 380.0)]
    fit = fit_loss_rtt(samples)
    assert any("no loss" in w for w in fit.warnings), f"no warning: {fit.warnings}"
    assert math.isclose(fit.throughput(10), 380.0), f"expected 380 at 10, got {fit.throughput(10)}"
    adv = advise(fit)
    assert (adv.num_flows, adv.cross_traffic_impact) == (10, 0.0), f"got {adv}"


def test_zero_loss_at_one_stream_only() -> None:
    samples = [LossSample(1, 0.0, 0.05, 50.0), LossSample(10, 0.002, 0.06, 200.0)]
    fit = fit_loss_rtt(samples)
    assert fit.params["b"] == 0.0, f"expected b' = 0, got {fit.params}"
    assert fit.warnings, "expected a warning for b' < 0"
    for n in range(1, 33):
        assert math.isfinite(fit.throughput(n)) and 0 <= fit.impact(n) <= 1, f"bad at n={n}"


def test_zero_loss_without_throughput_is_an_error() -> None:
    samples = [LossSample(1, 0.0, 0.05), LossSample(10, 0.0, 0.05)]
    with pytest.raises(ModelInputError, match="no loss"):
        fit_loss_rtt(samples, mss_bytes=1448)


def test_loss_fit_without_scale_is_an_error() -> None:
    samples = [LossSample(1, 0.001, 0.05), LossSample(10, 0.01, 0.05)]
    with pytest.raises(ModelInputError, match="cannot scale"):
        fit_loss_rtt(samples)


# --- impact relative to no transfer --------------------------------------------


def test_one_stream_already_over_limit_vs_no_transfer() -> None:
    fit = fit_throughput([Probe(1, 50.0), Probe(10, 200.0)])
    adv = advise(fit, max_impact=0.01, baseline="none")
    assert adv.num_flows == 1, f"expected 1 stream, got {adv.num_flows}"
    assert adv.warnings and "even 1 stream" in adv.warnings[0], f"got {adv.warnings}"


def test_zero_gain_threshold_still_refuses_useless_streams() -> None:
    fit = fit_throughput([Probe(1, 50.0), Probe(10, 50.0)])  # flat curve
    adv = advise(fit, max_impact=1.0, gain_threshold=0.0, max_streams=32)
    assert (adv.num_flows, adv.limited_by) == (1, "gain-threshold"), f"got {adv}"


@pytest.mark.parametrize(
    "probes",
    [
        [Probe(1, 1e300), Probe(10, 1e300)],
        [Probe(1, 1e-300), Probe(10, 1e-300)],
        [Probe(1, 1e-200), Probe(10, 5e-200)],
    ],
)
def test_absurd_magnitudes_are_errors_not_crashes(probes: list[Probe]) -> None:
    with pytest.raises(ModelInputError, match="too extreme"):
        fit_throughput(probes)


def test_absurd_kernel_values_are_errors_not_crashes() -> None:
    samples = [LossSample(1, 0.01, 1e200, 50.0), LossSample(10, 0.02, 1e200, 200.0)]
    with pytest.raises(ModelInputError, match="too extreme"):
        fit_loss_rtt(samples)
    lossless = [LossSample(1, 0.0, 0.05, 1e300), LossSample(10, 0.0, 0.05, 1e300)]
    with pytest.raises(ModelInputError, match="too extreme"):
        fit_loss_rtt(lossless)

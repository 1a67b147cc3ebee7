"""Fits of the loss curve: the worked example of model.md and each model."""

from __future__ import annotations

import math

import pytest

from tamebpf.model import (
    Fit,
    LossSample,
    ModelInputError,
    Probe,
    Settings,
    advise,
    fit_loss_rtt,
    fit_throughput,
    predict,
)

WORKED = [Probe(1, 50.0), Probe(10, 200.0)]


def close(got: float, want: float, rel: float = 5e-5) -> bool:
    """4 significant digits: relative difference below half a unit in the 4th."""
    return math.isclose(got, want, rel_tol=rel)


def test_worked_example_params() -> None:
    fit = fit_throughput(WORKED)
    assert fit.model == "partial-order-2", f"expected partial-order-2, got {fit.model}"
    a, b = fit.params["a"], fit.params["b"]
    assert close(a, 2.121212e-05), f"a' expected 2.121212e-05, got {a}"
    assert close(b, 3.787879e-04), f"b' expected 3.787879e-04, got {b}"
    assert fit.asymptote is not None and close(fit.asymptote, 217.12), (
        f"asymptote expected 217.12, got {fit.asymptote}"
    )
    assert fit.warnings == (), f"expected no warnings, got {fit.warnings}"


@pytest.mark.parametrize(
    ("n", "mbps", "impact"),
    [(2, 92.884, 0.07116), (5, 165.831, 0.3367), (30, 215.002, 0.8567), (1, 50.0, 0.0)],
)
def test_worked_example_curve(n: int, mbps: float, impact: float) -> None:
    fit = fit_throughput(WORKED)
    got_bw, got_imp = fit.throughput(n), fit.impact(n)
    assert close(got_bw, mbps), f"n={n}: throughput expected {mbps}, got {got_bw}"
    assert math.isclose(got_imp, impact, rel_tol=5e-4, abs_tol=1e-12), (
        f"n={n}: impact expected {impact}, got {got_imp}"
    )


def test_worked_example_advice() -> None:
    adv = advise(fit_throughput(WORKED), max_impact=0.10)
    got = (adv.num_flows, round(adv.max_nondisruptive_thru, 2), round(adv.cross_traffic_impact, 4))
    assert got == (2, 92.88, 0.0712), f"expected (2, 92.88, 0.0712), got {got}"
    assert adv.limited_by == "max-impact", f"expected max-impact, got {adv.limited_by}"


def test_impact_equals_fall_in_per_flow_throughput() -> None:
    # model.md: impact(n) = 1 - (BW_n / n) / BW_1
    fit = fit_throughput(WORKED)
    for n in range(1, 33):
        want = 1 - fit.throughput(n) / n / fit.throughput(1)
        assert math.isclose(fit.impact(n), want, abs_tol=1e-12), (
            f"n={n}: impact {fit.impact(n)} != 1 - per-flow ratio {want}"
        )


def test_impact_relative_to_no_transfer() -> None:
    fit = fit_throughput(WORKED)
    a, b = fit.params["a"], fit.params["b"]
    want = 1 - math.sqrt(b / (a * 4 + b))
    got = fit.impact(2, baseline="none")
    assert math.isclose(got, want, rel_tol=1e-12), f"expected {want}, got {got}"
    assert got > fit.impact(2), "impact vs no transfer must exceed impact vs 1 stream"


def test_full_order_2_solves_three_probes_exactly() -> None:
    a, b, c = 2e-5, 3e-5, 3e-4
    probes = [Probe(n, n / math.sqrt(a * n * n + b * n + c)) for n in (1, 5, 12)]
    fit = fit_throughput(probes, "full")
    got = (fit.params["a"], fit.params["b"], fit.params["c"])
    for g, w in zip(got, (a, b, c), strict=True):
        assert math.isclose(g, w, rel_tol=1e-9), f"expected {(a, b, c)}, got {got}"
    for p in probes:
        assert math.isclose(fit.throughput(p.streams), p.throughput, rel_tol=1e-12), (
            f"fit misses probe {p}: {fit.throughput(p.streams)}"
        )


def test_linear_fit_through_two_probes() -> None:
    fit = fit_throughput(WORKED, "linear")
    assert fit.model == "linear", f"expected linear, got {fit.model}"
    # y = n^2/BW^2 = a n + b through (1, 4e-4) and (10, 2.5e-3)
    a = (2.5e-3 - 4e-4) / 9
    assert math.isclose(fit.params["a"], a, rel_tol=1e-12), f"a {fit.params['a']} != {a}"
    assert math.isclose(fit.params["b"], 4e-4 - a, rel_tol=1e-12), f"b {fit.params['b']}"
    assert math.isclose(fit.throughput(10), 200.0, rel_tol=1e-12), f"{fit.throughput(10)}"


def test_partial_with_three_probes_is_least_squares() -> None:
    # Three consistent probes: least squares reproduces the two-probe fit.
    fit2 = fit_throughput(WORKED)
    probes = [*WORKED, Probe(5, fit2.throughput(5))]
    fit3 = fit_throughput(probes)
    for k in ("a", "b"):
        assert math.isclose(fit3.params[k], fit2.params[k], rel_tol=1e-9), (
            f"{k}: 3-probe {fit3.params[k]} != 2-probe {fit2.params[k]}"
        )


def _kernel_samples(a: float, b: float, scale: float, rtt: float = 0.05) -> list[LossSample]:
    """Samples consistent with p RTT^2 = a n^2 + b and BW = scale n / sqrt(.)."""
    out = []
    for n in (1, 10):
        y = a * n * n + b
        out.append(LossSample(n, y / rtt**2, rtt, scale * n / math.sqrt(y)))
    return out


def test_loss_rtt_fit_matches_throughput_fit_on_consistent_data() -> None:
    a, b, scale = 3e-8, 5e-7, 1.7
    samples = _kernel_samples(a, b, scale)
    kfit = fit_loss_rtt(samples)
    tfit = fit_throughput([Probe(s.streams, s.throughput or 0.0) for s in samples])
    assert kfit.source == "loss-rtt", f"expected loss-rtt, got {kfit.source}"
    assert kfit.calibration is not None and math.isclose(kfit.calibration, scale, rel_tol=1e-9), (
        f"calibration expected {scale}, got {kfit.calibration}"
    )
    for n in (1, 2, 7, 30):
        assert math.isclose(kfit.throughput(n), tfit.throughput(n), rel_tol=1e-9), (
            f"n={n}: kernel {kfit.throughput(n)} != throughput fit {tfit.throughput(n)}"
        )
        assert math.isclose(kfit.impact(n), tfit.impact(n), rel_tol=1e-9, abs_tol=1e-12), (
            f"n={n}: kernel impact {kfit.impact(n)} != {tfit.impact(n)}"
        )
    assert kfit.warnings == (), f"expected no warnings, got {kfit.warnings}"


def test_loss_rtt_impact_needs_no_throughput() -> None:
    # Impact comes from p*RTT^2 alone (Eq 17); the MSS only scales throughput.
    a, b = 3e-8, 5e-7
    samples = [LossSample(s.streams, s.loss_rate, s.rtt_s) for s in _kernel_samples(a, b, 1.0)]
    fit = fit_loss_rtt(samples, mss_bytes=1448)
    want = 1 - math.sqrt((a + b) / (a * 25 + b))
    assert math.isclose(fit.impact(5), want, rel_tol=1e-9), f"expected {want}, got {fit.impact(5)}"
    # Mathis: BW_1 = sqrt(3/2) * MSS / sqrt(p RTT^2), bytes/s -> Mbit/s
    bw1 = math.sqrt(1.5) * 1448 / math.sqrt(a + b) * 8 / 1e6
    assert math.isclose(fit.throughput(1), bw1, rel_tol=1e-9), f"{fit.throughput(1)} != {bw1}"


def test_loss_rtt_disagreement_is_flagged() -> None:
    samples = _kernel_samples(3e-8, 5e-7, 1.0)
    # Throughput at 10 streams far above what loss x RTT^2 allows (e.g. BBR).
    bad = [samples[0], LossSample(10, samples[1].loss_rate, samples[1].rtt_s, 40.0)]
    fit = fit_loss_rtt(bad)
    assert any("disagree" in w for w in fit.warnings), f"expected a warning, got {fit.warnings}"


def test_prediction_collects_fit_and_advice() -> None:
    pred = predict(fit_throughput(WORKED), Settings(max_impact=0.10, max_streams=32))
    assert len(pred.curve) == 32, f"expected 32 curve points, got {len(pred.curve)}"
    assert [c.streams for c in pred.curve] == list(range(1, 33)), "curve must be n = 1..32"
    assert pred.advice.num_flows == 2, f"expected 2 flows, got {pred.advice.num_flows}"
    assert pred.model == "partial-order-2" and pred.probes == tuple(WORKED)


def test_fit_rejects_bad_coefficients() -> None:
    for coeffs in [(-1.0, 0.0, 1.0), (0.0, 0.0, 0.0), (math.nan, 0.0, 1.0), (math.inf, 0, 1)]:
        with pytest.raises(ModelInputError):
            Fit("partial-order-2", coeffs, ())

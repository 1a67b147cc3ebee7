"""Comparison models: Mathis, Padhye, Hacker, Altman et al., DualPats."""

from __future__ import annotations

import math

import pytest

from tamebpf.model import (
    ModelInputError,
    Probe,
    altman_share,
    fit_altman,
    fit_dualpats,
    hacker_from_probe,
    hacker_upper_bound,
    mathis_throughput,
    padhye_throughput,
)


def test_mathis_formula() -> None:
    got = mathis_throughput(1460, 0.1, 0.01)
    want = 1460 / (0.1 * math.sqrt(2 * 0.01 / 3))
    assert math.isclose(got, want, rel_tol=1e-12), f"expected {want}, got {got}"


def test_padhye_below_mathis_and_close_at_low_loss() -> None:
    lo = padhye_throughput(1460, 0.1, 1e-4, 1.0) / mathis_throughput(1460, 0.1, 1e-4)
    hi = padhye_throughput(1460, 0.1, 0.05, 1.0) / mathis_throughput(1460, 0.1, 0.05)
    assert 0.9 < lo < 1.0, f"at p=1e-4 Padhye/Mathis expected just below 1, got {lo}"
    assert hi < lo, f"timeouts must matter more at high loss: {hi} vs {lo}"


def test_hacker_bound_sums_flows() -> None:
    got = hacker_upper_bound(1000, 0.05, [0.01, 0.04])
    want = 1000 / 0.05 * (10 + 5)
    assert math.isclose(got, want, rel_tol=1e-12), f"expected {want}, got {got}"
    assert hacker_from_probe(Probe(2, 60.0), 10) == 300.0, "per-stream rate held constant"


@pytest.mark.parametrize(("n", "share"), [(1, 0.75), (3, 0.9), (6, 1 - 1 / 19)])
def test_altman_share(n: int, share: float) -> None:
    assert math.isclose(altman_share(n), share, rel_tol=1e-12), f"N={n}: got {altman_share(n)}"


def test_altman_capacity_fit_recovers_capacity() -> None:
    probes = [Probe(n, 400.0 * altman_share(n)) for n in (1, 10)]
    fit = fit_altman(probes)
    assert math.isclose(fit.capacity, 400.0, rel_tol=1e-12), f"got {fit.capacity}"
    assert math.isclose(fit.throughput(3), 360.0, rel_tol=1e-12), f"got {fit.throughput(3)}"


def test_dualpats_fit_and_prediction() -> None:
    # 1/A = 10 MB/s steady, B = 0.3 s start-up
    a, b = 1e-7, 0.3
    fit = fit_dualpats([(400e3, a * 400e3 + b), (800e3, a * 800e3 + b)])
    assert math.isclose(fit.steady_throughput, 1e7, rel_tol=1e-9), f"{fit.steady_throughput}"
    assert math.isclose(fit.b, b, rel_tol=1e-9), f"expected B={b}, got {fit.b}"
    assert math.isclose(fit.time(1e9), 100.3, rel_tol=1e-9), f"got {fit.time(1e9)}"
    assert math.isclose(fit.throughput(1e6), 1e6 / 0.4, rel_tol=1e-9), f"{fit.throughput(1e6)}"


def test_dualpats_negative_startup_is_clamped_with_warning() -> None:
    fit = fit_dualpats([(400e3, 0.03), (800e3, 0.07)])
    assert fit.b == 0.0 and fit.warnings, f"expected B=0 with a warning, got {fit}"
    assert math.isclose(fit.time(800e3), 0.07), f"line must pass the larger probe: {fit}"


@pytest.mark.parametrize(
    "call",
    [
        lambda: mathis_throughput(1460, 0.1, 0.0),
        lambda: mathis_throughput(1460, 0.0, 0.01),
        lambda: mathis_throughput(math.nan, 0.1, 0.01),
        lambda: padhye_throughput(1460, 0.1, 0.01, -1.0),
        lambda: hacker_upper_bound(1460, 0.1, []),
        lambda: hacker_upper_bound(1460, 0.1, [0.01, 0.0]),
        lambda: altman_share(3, beta=1.0),
        lambda: altman_share(0),
        lambda: fit_altman([]),
        lambda: fit_dualpats([(400e3, 0.1), (400e3, 0.2)]),
        lambda: fit_dualpats([(400e3, 0.2), (800e3, 0.1)]),
        lambda: fit_dualpats([(400e3, 0.2), (-1, 0.1)]),
        lambda: fit_dualpats([(400e3, 0.2), (800e3, math.inf)]),
    ],
)
def test_degenerate_inputs_are_errors(call: object) -> None:
    with pytest.raises(ModelInputError):
        call()  # type: ignore[operator]

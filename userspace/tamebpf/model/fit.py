"""Fitting the loss curve p'_n of Lu et al. (IPDPS 2005, Eq 6-14) from probes.

Every model is held as one quadratic in the number of streams n,

    p'(n) = q2 * n^2 + q1 * n + q0          (units: 1 / throughput^2)

    partial order 2 (Eq 7, default): q1 = 0        -> params a' = q2, b' = q0
    full order 2    (Eq 6):          all three     -> a = q2, b = q1, c = q0
    linear          (Eq 8):          q2 = 0        -> a' = q1, b' = q0
    square of m+n:  (alpha n + beta)^2             -> a' = alpha, b' = beta

The last is Eq 6 restricted to a perfect square, the (m+n)^2 growth of loss
that section 2 of docs/model.md starts from (m cross flows, so beta/alpha
estimates m): two parameters, fitted from two probes like Eq 7, but it keeps
the cross term 2 m n that Eq 7 drops.  n / BW_n = alpha n + beta is linear.

so that throughput(n) = n / sqrt(p'(n)) (Eq 10) and the impact on cross
traffic (Eq 18) are the same code for all of them.  A fit is only ever built
with q2, q1, q0 >= 0 and not all zero: p'(0) is the loss index the cross traffic
sees without us, and adding flows cannot lower loss.  Fits that break this
(noise, uncongested or saturated paths) are projected back with a warning; see
docs/model.md, "Degenerate input".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from tamebpf.common.defaults import MODELS
from tamebpf.model._checks import (
    ModelInputError,
    finite,
    fraction,
    positive,
    stream_count,
)
from tamebpf.model.linalg import least_squares

ModelName = Literal["partial", "full", "linear", "square"]
Baseline = Literal["one-stream", "none"]
Source = Literal["throughput", "loss-rtt"]

MODEL_LABELS: dict[ModelName, str] = {
    "partial": "partial-order-2",
    "full": "full-order-2",
    "linear": "linear",
    "square": "square-of-m-plus-n",
}
BASELINES: tuple[Baseline, ...] = ("one-stream", "none")

# Coefficient terms smaller than this fraction of the largest p' probed are
# rounding noise (e.g. b' from two probes with equal throughput): counted as 0,
# so that a decision never depends on the unit the throughput is given in.
REL_EPS = 1e-9
# Range of y = n^2/BW^2 (or p RTT^2) the fit accepts: far beyond any real unit,
# but it keeps every product in the fit and the curve inside double precision.
Y_MIN, Y_MAX = 1e-250, 1e250


@dataclass(frozen=True)
class Probe:
    """Aggregate throughput measured with `streams` parallel flows (any unit)."""

    streams: int
    throughput: float

    def __post_init__(self) -> None:
        stream_count(self.streams, "probe streams")
        positive(self.throughput, f"throughput of the {self.streams}-stream probe")


@dataclass(frozen=True)
class LossSample:
    """Kernel measurement during a probe: loss rate p, smoothed RTT, and
    optionally the aggregate throughput seen (used to scale the curve)."""

    streams: int
    loss_rate: float
    rtt_s: float
    throughput: float | None = None

    def __post_init__(self) -> None:
        stream_count(self.streams, "sample streams")
        fraction(self.loss_rate, f"loss rate of the {self.streams}-stream sample")
        positive(self.rtt_s, f"RTT of the {self.streams}-stream sample")
        if self.throughput is not None:
            positive(self.throughput, f"throughput of the {self.streams}-stream sample")


@dataclass(frozen=True)
class Fit:
    """A fitted loss curve p'(n) = q2 n^2 + q1 n + q0, in 1/throughput^2 units."""

    model: str  # one of MODEL_LABELS' values
    coeffs: tuple[float, float, float]  # (q2, q1, q0)
    probes: tuple[Probe, ...]
    source: Source = "throughput"
    samples: tuple[LossSample, ...] = ()
    warnings: tuple[str, ...] = ()
    # Largest stream count the advice may use; set when the probes show no
    # congestion, so that we do not extrapolate beyond the evidence.
    evidence_limit: int | None = None
    # For loss/RTT fits: the constant C*MSS (throughput units) that maps
    # p*RTT^2 onto p'(n); coefficients in seconds^2 are coeffs * calibration^2.
    calibration: float | None = None
    # The bottleneck's capacity the fit was anchored to (model/capacity.py),
    # None when both parameters came from the probes.
    capacity: float | None = None

    def __post_init__(self) -> None:
        if self.model not in MODEL_LABELS.values():
            raise ModelInputError(f"unknown model {self.model!r}")
        for c in self.coeffs:
            finite(c, "fit coefficient")
        if min(self.coeffs) < 0.0 or max(self.coeffs) <= 0.0:
            raise ModelInputError(f"fit coefficients must be >= 0, not all 0: {self.coeffs}")

    @property
    def params(self) -> dict[str, float]:
        """The paper's parameters: a', b' (and c for full order 2)."""
        q2, q1, q0 = self.coeffs
        if self.model == "full-order-2":
            return {"a": q2, "b": q1, "c": q0}
        if self.model == "linear":
            return {"a": q1, "b": q0}
        if self.model == "square-of-m-plus-n":
            return {"alpha": math.sqrt(q2), "beta": math.sqrt(q0)}
        return {"a": q2, "b": q0}

    @property
    def asymptote(self) -> float | None:
        """Limit of throughput(n) as n grows (1/sqrt(a')), None if unbounded."""
        q2 = self.coeffs[0]
        return 1.0 / math.sqrt(q2) if q2 > 0.0 else None

    def loss_index(self, n: float) -> float:
        """p'(n): loss rate times RTT^2, scaled by 1/(C MSS)^2 (Eq 9)."""
        q2, q1, q0 = self.coeffs
        return (q2 * n + q1) * n + q0

    def _positive_index(self, n: float) -> float:
        # Only reachable with hand-made coefficients near the float limits.
        y = self.loss_index(n)
        if not 0.0 < y < math.inf:
            raise ModelInputError(f"p'({n:g}) = {y!r} is out of range for this fit")
        return y

    def throughput(self, n: float) -> float:
        """Predicted aggregate throughput with n streams (Eq 10)."""
        n = positive(n, "number of streams")
        return n / math.sqrt(self._positive_index(n))

    def impact(self, n: float, baseline: Baseline = "one-stream") -> float:
        """Relative throughput loss of a cross-traffic flow (Eq 18), in [0, 1].

        baseline "one-stream" compares n streams with a 1-stream transfer (the
        paper's n1 = 1); "none" compares with no transfer at all (n1 = 0).
        """
        n = positive(n, "number of streams")
        if baseline not in BASELINES:
            raise ModelInputError(f"unknown impact baseline {baseline!r}")
        ref = self.loss_index(1.0 if baseline == "one-stream" else 0.0)
        value = 1.0 - math.sqrt(ref / self._positive_index(n))
        # n below the reference would be a gain for cross traffic; the model
        # reports impact, so it is floored at 0 (and ratios keep it < 1).
        return min(max(value, 0.0), 1.0)


def fit_throughput(probes: Iterable[Probe], model: ModelName = "partial") -> Fit:
    """Fit from (streams, aggregate throughput) probes: y = n^2 / BW^2 (Eq 11-14).

    Two probes at distinct levels give the paper's exact Eq 13/14 (three for
    "full", solved exactly); more probes give a least-squares fit in y.
    """
    probes = tuple(probes)
    check_model(model)
    if not all(isinstance(p, Probe) for p in probes):
        raise ModelInputError("probes must be Probe(streams, throughput) values")
    levels = [p.streams for p in probes]
    ys = [point(p.streams / p.throughput, 1.0, f"{p.streams}-stream probe") for p in probes]
    label, coeffs, warnings, limit = fit_curve(levels, ys, model, "throughput")
    return Fit(label, coeffs, probes, "throughput", (), warnings, limit)


def point(root: float, weight: float, what: str) -> float:
    """y = weight * root^2 (n^2/BW^2 or p RTT^2), refused outside [Y_MIN, Y_MAX]
    so that no later step can overflow, underflow to 0 or divide by zero."""
    if weight == 0.0:
        return 0.0  # zero loss: handled by the callers
    y = weight * root * root  # floats: overflow gives inf, not an exception
    if not Y_MIN <= y <= Y_MAX:
        raise ModelInputError(
            f"the {what} is too extreme to fit (n^2/BW^2 or p*RTT^2 = {y:.3g}, "
            f"outside [{Y_MIN:g}, {Y_MAX:g}]): use a more sensible unit"
        )
    return y


def check_model(model: str) -> None:
    if model not in MODELS:
        raise ModelInputError(f"unknown model {model!r}: use one of {', '.join(MODELS)}")


def _unknowns(model: ModelName) -> int:
    return 3 if model == "full" else 2


def check_levels(levels: Sequence[int], model: ModelName) -> None:
    need = _unknowns(model)
    distinct = sorted(set(levels))
    if len(distinct) < need:
        got = ", ".join(map(str, distinct)) or "none"
        raise ModelInputError(
            f"the {MODEL_LABELS[model]} model needs probes at {need} different "
            f"stream counts, got {got}"
        )


def mean_at(levels: Sequence[int], ys: Sequence[float], level: int) -> float:
    at = [y for n, y in zip(levels, ys, strict=True) if n == level]
    return sum(at) / len(at)


def _solve(levels: Sequence[int], ys: Sequence[float], model: ModelName) -> tuple[float, ...]:
    """Unconstrained (q2, q1, q0) through or nearest to the points."""
    coef = least_squares([_basis(model, float(n)) for n in levels], ys)
    if model == "partial":
        return (coef[0], 0.0, coef[1])
    if model == "linear":
        return (0.0, coef[0], coef[1])
    return (coef[0], coef[1], coef[2])


def _basis(model: ModelName, n: float) -> list[float]:
    """The terms of p'(n) that each model fits."""
    if model == "partial":
        return [n * n, 1.0]
    if model == "linear":
        return [n, 1.0]
    return [n * n, n, 1.0]


def fit_curve(
    levels: Sequence[int], ys: Sequence[float], model: ModelName, source: Source
) -> tuple[str, tuple[float, float, float], tuple[str, ...], int | None]:
    """Fit, then project onto non-negative coefficients with warnings."""
    check_levels(levels, model)
    if model == "square":
        return _fit_square(levels, ys, source)
    warnings: list[str] = []
    low, top = min(levels), max(levels)
    y_top = mean_at(levels, ys, top)
    y_scale = max(ys)  # rounding in the solve is relative to the largest y
    q = _denoise(_solve(levels, ys, model), top, y_scale)
    if not all(math.isfinite(c) for c in q):
        raise ModelInputError("probe values too far apart to fit in floating point")
    if model == "full" and min(q) < 0.0:
        warnings.append(
            f"full order 2 fit has a negative coefficient (a={q[0]:.4g}, b={q[1]:.4g}, "
            f"c={q[2]:.4g}); it is sensitive to probe noise (paper, section IV): "
            "using partial order 2 on the same probes"
        )
        model = "partial"
        q = _denoise(_solve(levels, ys, model), top, y_scale)
    limit: int | None = None
    if q[0] + q[1] <= 0.0:
        # Loss index flat or falling with more streams: no congestion seen.
        # Hold it at its value at the largest probe (curve through that probe,
        # per-stream throughput constant, impact 0) and do not advise more
        # streams than were probed: nothing supports extrapolating further.
        warnings.append(_no_congestion_message(source, low, top, model, q))
        q = (0.0, 0.0, y_top)
        limit = top
    elif model != "full" and q[2] <= 0.0:
        # Loss without our flows (b') cannot be negative.  b' = 0 with the
        # curve through the largest probe overstates impact: the safe side.
        warnings.append(_saturated_message(source, low, top, model, q[2]))
        q = (0.0, y_top / top, 0.0) if model == "linear" else (y_top / top**2, 0.0, 0.0)
    coeffs = (max(q[0], 0.0), max(q[1], 0.0), max(q[2], 0.0))
    return MODEL_LABELS[model], coeffs, tuple(warnings), limit


def _fit_square(
    levels: Sequence[int], ys: Sequence[float], source: Source
) -> tuple[str, tuple[float, float, float], tuple[str, ...], int | None]:
    """sqrt(p'(n)) = alpha n + beta, fitted as a line; projected like Eq 7."""
    low, top = min(levels), max(levels)
    y_top = mean_at(levels, ys, top)
    roots = [math.sqrt(y) for y in ys]
    alpha, beta = least_squares([[float(n), 1.0] for n in levels], roots)
    scale = max(roots)
    alpha = 0.0 if abs(alpha * top) <= REL_EPS * scale else alpha
    beta = 0.0 if abs(beta) <= REL_EPS * scale else beta
    if not (math.isfinite(alpha) and math.isfinite(beta)):
        raise ModelInputError("probe values too far apart to fit in floating point")
    if alpha <= 0.0:
        q = (0.0, alpha, beta * beta)  # for the message only: the slope
        msg = _no_congestion_message(source, low, top, "linear", q)
        return MODEL_LABELS["square"], (0.0, 0.0, y_top), (msg,), top
    if beta <= 0.0:
        msg = _saturated_message(source, low, top, "square", beta)
        return MODEL_LABELS["square"], (y_top / top**2, 0.0, 0.0), (msg,), None
    return MODEL_LABELS["square"], (alpha * alpha, 2 * alpha * beta, beta * beta), (), None


def _denoise(q: Sequence[float], top: int, y_scale: float) -> tuple[float, float, float]:
    """Zero the coefficients whose term at the largest probe is rounding noise."""
    terms = (q[0] * top * top, q[1] * top, q[2])
    return (
        0.0 if abs(terms[0]) <= REL_EPS * y_scale else q[0],
        0.0 if abs(terms[1]) <= REL_EPS * y_scale else q[1],
        0.0 if abs(terms[2]) <= REL_EPS * y_scale else q[2],
    )


def _no_congestion_message(
    source: Source, low: int, top: int, model: ModelName, q: Sequence[float]
) -> str:
    what = (
        "per-stream throughput did not fall"
        if source == "throughput"
        else ("loss x RTT^2 did not rise")
    )
    grow = q[1] if model == "linear" else q[0]
    return (
        f"no congestion seen: {what} from {low} to {top} streams (a' = {grow:.4g} <= 0); "
        f"predictions hold per-stream throughput at the {top}-stream probe and the "
        f"advice stops at {top} streams, the largest level probed"
    )


def _saturated_message(source: Source, low: int, top: int, model: ModelName, b: float) -> str:
    if source == "throughput" and model in ("partial", "square"):
        cause = (
            f"aggregate throughput did not grow from {low} to {top} streams "
            f"(b' = {b:.4g} <= 0): the path looks saturated"
        )
    else:
        cause = f"the fit implies negative loss without our flows (b' = {b:.4g} <= 0)"
    return (
        f"{cause}; using b' = 0 through the {top}-stream probe, which overstates "
        "impact (the safe side)"
    )


def poly(q: Sequence[float], n: float) -> float:
    return (q[0] * n + q[1]) * n + q[2]

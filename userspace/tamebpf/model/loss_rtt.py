"""The loss/RTT fit (docs/model.md, section 3): p*RTT^2 = a n^2 + b from
kernel samples, its throughput curve scaled by the Mathis constant or
calibrated against the throughput the samples measured.

The curve itself is fit.py's (the same quadratic in n for every model);
here are the samples' side of it: lossless input, the scale and its warning.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from tamebpf.common.units import mbps
from tamebpf.model._checks import ModelInputError, stream_count
from tamebpf.model.fit import (
    MODEL_LABELS,
    Fit,
    LossSample,
    ModelName,
    Probe,
    check_levels,
    check_model,
    fit_curve,
    mean_at,
    point,
    poly,
)

# Mathis et al. constant sqrt(3/2) (one segment acknowledged per ACK, c1 = 1):
# C in Eq 4 when the throughput curve of a loss/RTT fit is scaled from the MSS.
MATHIS_C = math.sqrt(1.5)
# A loss/RTT fit whose calibrated curve misses a measured throughput by more
# than this (relative) gets a warning: the paper's own errors are ~0.2.
CALIBRATION_TOLERANCE = 0.25


def fit_loss_rtt(
    samples: Iterable[LossSample],
    model: ModelName = "partial",
    *,
    mss_bytes: int | None = None,
) -> Fit:
    """Fit p*RTT^2 = a n^2 + b from kernel samples (model.md section 3).

    The impact curve needs only ratios of p*RTT^2, so it comes straight from
    the samples.  The throughput curve needs the constant C*MSS of Eq 4: if
    every sample carries its measured throughput, C*MSS is the geometric mean of
    throughput_i * sqrt(fit(n_i)) / n_i (a least-squares fit in log space, so
    the curve lands in the samples' own unit); otherwise mss_bytes gives the
    Mathis constant sqrt(3/2)*MSS and the curve is in Mbit/s.
    """
    samples = tuple(samples)
    check_model(model)
    if not all(isinstance(s, LossSample) for s in samples):
        raise ModelInputError("samples must be LossSample(streams, loss_rate, rtt_s) values")
    measured = all(s.throughput is not None for s in samples)
    if not measured and mss_bytes is None:
        raise ModelInputError(
            "cannot scale the throughput curve: give every sample its measured "
            "throughput, or the MSS"
        )
    mss = None if mss_bytes is None else stream_count(mss_bytes, "MSS in bytes")
    probes = tuple(Probe(s.streams, s.throughput) for s in samples if s.throughput is not None)
    levels = [s.streams for s in samples]
    check_levels(levels, model)
    ys = [point(s.rtt_s, s.loss_rate, f"{s.streams}-stream sample") for s in samples]
    top = max(levels)
    if mean_at(levels, ys, top) <= 0.0:
        return _lossless_fit(samples, probes, model, top)
    label, raw, warnings, limit = fit_curve(levels, ys, model, "loss-rtt")
    if mss is not None and not measured:
        scale = mbps(MATHIS_C * mss)  # bytes/s -> Mbit/s
    else:
        scale = _calibrate(raw, probes)
        warnings += _calibration_warnings(raw, scale, probes)
    # Products, not **: an absurd scale becomes inf/0 and Fit refuses it cleanly.
    coeffs = (raw[0] / (scale * scale), raw[1] / (scale * scale), raw[2] / (scale * scale))
    return Fit(label, coeffs, probes, "loss-rtt", samples, warnings, limit, scale)


def _lossless_fit(
    samples: tuple[LossSample, ...], probes: tuple[Probe, ...], model: ModelName, top: int
) -> Fit:
    """No loss at the largest level: the square-root law has nothing to work with."""
    at_top = [p.throughput for p in probes if p.streams == top]
    if not at_top:
        raise ModelInputError(
            f"no loss measured at {top} streams and no measured throughput to fall "
            "back on: give the samples' throughput"
        )
    y_top = point(top / (sum(at_top) / len(at_top)), 1.0, f"{top}-stream sample")
    warning = (
        f"no loss measured at {top} streams: no congestion seen; predictions hold "
        f"per-stream throughput at the {top}-stream measurement and the advice "
        f"stops at {top} streams, the largest level probed"
    )
    coeffs = (0.0, 0.0, y_top)
    return Fit(MODEL_LABELS[model], coeffs, probes, "loss-rtt", samples, (warning,), top, None)


def _calibrate(raw: Sequence[float], probes: Sequence[Probe]) -> float:
    """C*MSS: geometric mean of measured / (n / sqrt(raw fit at n))."""
    logs = [math.log(p.throughput * math.sqrt(poly(raw, p.streams)) / p.streams) for p in probes]
    return math.exp(sum(logs) / len(logs))


def _calibration_warnings(
    raw: Sequence[float], scale: float, probes: Sequence[Probe]
) -> tuple[str, ...]:
    worst: tuple[float, Probe] | None = None
    for p in probes:
        predicted = scale * p.streams / math.sqrt(poly(raw, p.streams))
        err = abs(predicted - p.throughput) / p.throughput
        if worst is None or err > worst[0]:
            worst = (err, p)
    if worst is None or worst[0] <= CALIBRATION_TOLERANCE:
        return ()
    return (
        f"loss x RTT^2 and measured throughput disagree by {worst[0]:.0%} at "
        f"{worst[1].streams} streams: the square-root law may not hold (receiver "
        "window limit, BBR or other non-loss-based congestion control, "
        "synchronised losses)",
    )

"""From two measured probes to advice: both estimators, warnings, output.

Estimators (docs/model.md section 3):
- throughput fit: Eq 13/14 on the probes' steady kernel goodput. The advice
  uses this one: it is the estimator the paper validated, and it needs only
  goodput, which a short probe measures well.
- loss-RTT fit: p*RTT^2 = a n^2 + b on the kernel's retransmission rate and
  smoothed RTT. Reported beside it as a check; short probes see few loss
  events, so its inputs are coarser.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tamebpf.advise.capacity import tcp_goodput_mbps
from tamebpf.advise.probe import ProbeResult, Target
from tamebpf.advise.steady import Steady
from tamebpf.model import (
    Fit,
    LossSample,
    ModelInputError,
    ModelName,
    Prediction,
    Probe,
    Settings,
    competing_flows,
    fit_capacity,
    fit_loss_rtt,
    fit_throughput,
    predict,
)
from tamebpf.model.confidence import Z_90, ImpactRange, impact_ranges, relative_standard_error
from tamebpf.present.prediction import prediction_to_json, render_prediction_table
from tamebpf.present.words import count

NOISY_CV = 0.30  # per-interval goodput varying more than this: probe too noisy
RWND_LIMITED = 0.5  # fraction of samples bounded by the receive window
DISAGREE_IMPACT = 0.10  # estimators' impact at the advised n differ by more
# ... or their stream counts differ by a factor of two or more (and by >= 2).


@dataclass(frozen=True)
class Capacity:
    """--capacity: the link rate given, the TCP goodput it carries, and the
    competing flows the anchored fit puts on it (None: not used)."""

    link_mbps: float
    goodput_mbps: float
    competing_flows: float | None


@dataclass(frozen=True)
class AdviseResult:
    target: Target
    probes: tuple[ProbeResult, ...]
    prediction: Prediction  # what the advice uses: capacity fit if given, else throughput
    loss_prediction: Prediction | None  # the kernel p*RTT^2 estimator
    loss_error: str | None  # why there is no loss-RTT prediction
    warnings: tuple[str, ...]
    # The free two-parameter throughput fit; the same object as `prediction`
    # unless the capacity fit is used.
    throughput_prediction: Prediction | None = None
    capacity: Capacity | None = None
    # The impact at each stream count of the curve with its 90% range from
    # the probes' measurement noise (model/confidence.py).
    confidence: tuple[ImpactRange, ...] = ()

    @property
    def used(self) -> str:
        """Which estimator the advice uses: "capacity" or "throughput"."""
        return "capacity" if self.capacity and self.capacity.competing_flows is not None \
            else "throughput"


def build(target: Target, probes: Sequence[ProbeResult], settings: Settings,
          model: ModelName = "square", capacity_mbps: float | None = None) -> AdviseResult:
    """`capacity_mbps`: the bottleneck's link rate, if the user knows it."""
    measured = [Probe(p.streams, p.steady.goodput_mbps) for p in probes]
    free = predict(fit_throughput(measured, model), settings)
    prediction = free

    def refit(ps: Sequence[Probe]) -> Fit:
        return fit_throughput(ps, model)

    warnings: list[str] = []
    capacity: Capacity | None = None
    if capacity_mbps is not None:
        s = probes[-1].steady
        goodput = tcp_goodput_mbps(capacity_mbps, s.mss, s.ipv6)
        try:
            prediction = predict(fit_capacity(measured, goodput), settings)
            capacity = Capacity(capacity_mbps, goodput, competing_flows(prediction.fit))

            def refit(ps: Sequence[Probe]) -> Fit:
                return fit_capacity(ps, goodput)
        except ModelInputError as err:
            capacity = Capacity(capacity_mbps, goodput, None)
            warnings.append(
                f"--capacity {capacity_mbps:g} Mbit/s ({goodput:.2f} Mbit/s of TCP goodput) "
                f"not used: {err}; the advice comes from the throughput fit alone. Give the "
                "bottleneck's real rate, or leave --capacity out")
    loss_pred: Prediction | None = None
    loss_error: str | None = None
    samples = [LossSample(p.streams, p.steady.loss_rate, p.steady.srtt_ms / 1000,
                          p.steady.goodput_mbps)
               for p in probes if p.steady.loss_rate is not None and p.steady.srtt_ms]
    if len(samples) == len(probes):
        try:
            loss_pred = predict(fit_loss_rtt(samples, model), settings)
        except ModelInputError as err:
            loss_error = str(err)
    else:
        loss_error = "a probe has no RTT or segment counts to fit"
    warnings += _assumption_warnings(probes)
    if loss_pred is not None:
        used = "capacity" if prediction is not free else "throughput"
        a, b = prediction.advice, loss_pred.advice
        n = a.num_flows
        other = loss_pred.fit.impact(n, settings.baseline)
        lo, hi = sorted((a.num_flows, b.num_flows))
        far_apart = hi >= 2 * lo and hi - lo >= 2
        if far_apart or (lo != hi and abs(a.cross_traffic_impact - other) > DISAGREE_IMPACT):
            warnings.append(
                f"the estimators disagree: the {used} fit advises {count(a.num_flows, 'stream')} "
                f"(impact {a.cross_traffic_impact:.1%}), the loss-RTT fit {b.num_flows} "
                f"(it puts the impact at {n} streams at {other:.1%}); an assumption of the "
                "model does not hold on this path (see the other warnings)")
    confidence = impact_ranges(
        refit, measured, [relative_standard_error(p.steady.noise, _window_samples(p.steady))
                          for p in probes],
        [c.streams for c in prediction.curve], baseline=settings.baseline)
    return AdviseResult(target, tuple(probes), prediction, loss_pred, loss_error,
                        tuple(warnings), free, capacity, tuple(confidence))


def _window_samples(s: Steady) -> int:
    """Goodput samples inside the probe's steady window (intervals: one less)."""
    inside = sum(1 for t, _ in s.series if s.start_s <= t <= s.end_s)
    return max(0, inside - 1)


def _assumption_warnings(probes: Sequence[ProbeResult]) -> list[str]:
    out = []
    ccs = sorted({cc for p in probes for cc in p.steady.congestion_control})
    if "bbr" in ccs:
        out.append("the probes used BBR, which does not back off on loss: the square-root "
                   "law behind the model does not describe it (use --congestion cubic or "
                   "reno to advise for loss-based transfers)")
    if all(not p.steady.retrans for p in probes):
        out.append("no retransmissions in any probe: the path showed no congestion up to "
                   f"{max(p.streams for p in probes)} streams, so the loss-RTT fit has "
                   "nothing to fit and the impact estimate rests on throughput alone")
    for p in probes:
        if p.steady.rwnd_limited > RWND_LIMITED:
            out.append(f"the {p.streams}-stream probe was limited by the receiver's window "
                       f"{p.steady.rwnd_limited:.0%} of the time, not by the network: "
                       "raise the receiver's buffers (net.ipv4.tcp_rmem)")
        if p.steady.noise is not None and p.steady.noise > NOISY_CV:
            out.append(f"the {p.streams}-stream probe was noisy (goodput varied by "
                       f"{p.steady.noise:.0%} between samples): try a longer --duration")
    return out


def _measurement(p: ProbeResult) -> dict[str, Any]:
    s = p.steady
    return {
        "streams": p.streams,
        "goodput_mbps": s.goodput_mbps,
        "iperf3_mbps": p.iperf3_mbps,
        "loss_rate": s.loss_rate,
        "srtt_ms": s.srtt_ms,
        "congestion_control": ",".join(s.congestion_control) or None,
        "duration_s": p.duration_s,
        # Of duration_s: connecting until the server ran the test, and
        # ending it (losses at a full queue make these grow, not the traffic).
        "setup_s": p.setup_s,
        "finish_s": p.finish_s,
        "steady_window_s": [s.start_s, s.end_s],
        "retransmits": s.retrans,
        "data_segments": s.data_segs,
        "goodput_cv": s.noise,
        "rwnd_limited_fraction": s.rwnd_limited,
        "flows": [{"cookie": f.cookie, "goodput_mbps": f.goodput_mbps,
                   "loss_rate": f.loss_rate, "srtt_ms": f.srtt_ms} for f in s.flows],
    }


def to_json(result: AdviseResult) -> dict[str, Any]:
    out = prediction_to_json(result.prediction)
    out["warnings"] = list(result.prediction.warnings) + list(result.warnings)
    out["measurements"] = [_measurement(p) for p in result.probes]
    free = result.throughput_prediction or result.prediction
    anchored = result.used == "capacity"
    out["estimators"] = {
        "used": result.used,
        "throughput": {k: v for k, v in prediction_to_json(free).items()
                       if k in ("params", "advice")},
        "capacity": {k: v for k, v in out.items() if k in ("params", "advice")}
        if anchored else None,
        "loss_rtt": None if result.loss_prediction is None else {
            k: v for k, v in prediction_to_json(result.loss_prediction).items()
            if k in ("params", "advice", "warnings", "calibration")},
        "loss_rtt_error": result.loss_error,
    }
    c = result.capacity
    out["capacity"] = None if c is None else {
        "link_mbps": c.link_mbps, "goodput_mbps": c.goodput_mbps,
        "competing_flows": c.competing_flows, "used": anchored}
    out["confidence"] = _confidence_json(result)
    t = result.target
    out["target"] = {"host": t.host, "port": t.port, "netns": t.netns,
                     "congestion": t.congestion}
    return out


def _advised_range(result: AdviseResult) -> ImpactRange | None:
    n = result.prediction.advice.num_flows
    return next((r for r in result.confidence if r.streams == n), None)


def _straddling(result: AdviseResult) -> list[int]:
    limit = result.prediction.settings.max_impact
    return [r.streams for r in result.confidence if r.straddles(limit)]


def _confidence_json(result: AdviseResult) -> dict[str, Any] | None:
    if not result.confidence:
        return None
    adv = _advised_range(result)
    return {
        "level": 0.90, "z": Z_90, "source": "probe goodput noise (delta method)",
        "advised": None if adv is None else {"streams": adv.streams, "impact": adv.impact,
                                             "low": adv.low, "high": adv.high},
        "straddling_limit": _straddling(result),
        "impact_ranges": [{"streams": r.streams, "low": r.low, "high": r.high}
                          for r in result.confidence],
    }


def _opt(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def render(result: AdviseResult) -> str:
    t = result.target
    lines = [f"advice for {t.host}:{t.port}"
             + (f" (from netns {t.netns})" if t.netns else ""), "",
             "probe  streams  kernel Mbit/s  iperf3 Mbit/s   loss    srtt ms  cc",
             ]
    for i, p in enumerate(result.probes, 1):
        s = p.steady
        lines.append(
            f"{i:>5}  {p.streams:>7}  {s.goodput_mbps:>13.2f}  {_opt(p.iperf3_mbps, '13.2f'):>13}"
            f"  {_opt(None if s.loss_rate is None else s.loss_rate * 100, '.3f'):>6}%"
            f"  {_opt(s.srtt_ms, '8.2f'):>8}  {','.join(s.congestion_control) or '-'}")
    lines += ["", render_prediction_table(result.prediction).rstrip("\n"), ""]
    a = result.prediction.advice
    if result.loss_prediction is not None:
        b = result.loss_prediction.advice
        lines.append(f"loss-RTT estimator (check): {count(b.num_flows, 'stream')}, "
                     f"{b.max_nondisruptive_thru:.2f} Mbit/s, impact {b.cross_traffic_impact:.1%}")
    else:
        lines.append(f"loss-RTT estimator (check): none ({result.loss_error})")
    c = result.capacity
    if result.used == "capacity" and c is not None and result.throughput_prediction:
        f = result.throughput_prediction.advice
        lines.append("throughput fit without the capacity (check): "
                     f"{count(f.num_flows, 'stream')}, "
                     f"{f.max_nondisruptive_thru:.2f} Mbit/s, impact {f.cross_traffic_impact:.1%}")
        lines.append(f"capacity: {c.link_mbps:g} Mbit/s link = {c.goodput_mbps:.2f} Mbit/s of "
                     f"TCP goodput; the probes put {c.competing_flows:.1f} competing flows on it")
    how = "capacity fit" if result.used == "capacity" else "throughput fit"
    adv = _advised_range(result)
    if adv is not None:
        straddle = _straddling(result)
        limit = result.prediction.settings.max_impact
        lines.append(
            f"confidence: impact at {count(adv.streams, 'stream')} {adv.impact:.1%}, 90% range "
            f"{adv.low:.1%}-{adv.high:.1%} from the probes' noise; "
            + (f"stream counts whose range holds the {limit:.0%} limit: "
               f"{', '.join(map(str, straddle))}" if straddle
               else f"no stream count's range holds the {limit:.0%} limit"))
    lines.append(f"ADVICE: {count(a.num_flows, 'stream')}, {a.max_nondisruptive_thru:.2f} Mbit/s, "
                 f"impact on cross traffic {a.cross_traffic_impact:.1%} ({how})")
    for w in result.warnings:
        lines.append(f"warning: {w}")
    return "\n".join(lines) + "\n"

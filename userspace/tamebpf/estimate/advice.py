"""From measured probes to advice: both estimators, warnings, confidence.

Pure: the probes are run by advise/probes.py, the records are
estimate/record.py's, and the result is shown by present/advice.py.

Estimators (docs/model.md section 3):
- throughput fit: Eq 13/14 on the probes' steady kernel goodput. The advice
  uses this one: it is the estimator the paper validated, and it needs only
  goodput, which a short probe measures well.
- loss-RTT fit: p*RTT^2 = a n^2 + b on the kernel's retransmission rate and
  smoothed RTT. Reported beside it as a check; short probes see few loss
  events, so its inputs are coarser.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from tamebpf.estimate.acktrain import estimate_capacity
from tamebpf.estimate.adaptive import past_start_up
from tamebpf.estimate.capacity import tcp_goodput_mbps
from tamebpf.estimate.record import (
    TIME_LIMIT,
    AdviceRefusal,
    AdviceWarning,
    AdviseResult,
    Capacity,
    ProbeResult,
    Target,
)
from tamebpf.estimate.spread import count_range, path_class, rerun_moved, spread_for
from tamebpf.estimate.steady import window_samples
from tamebpf.model import (
    Advice,
    CurvePoint,
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
from tamebpf.model.confidence import (
    ImpactRange,
    impact_ranges,
    relative_standard_error,
    widened,
)
from tamebpf.model.share import as_curve, share_advice

NOISY_CV = 0.30  # per-interval goodput varying more than this: probe too noisy
RWND_LIMITED = 0.5  # fraction of samples bounded by the receive window
# --capacity and the ACK-spacing estimate differ by more than this: say so.
CAPACITY_DISAGREE = 0.10
DISAGREE = "estimators_disagree"  # the loss-law fits' check, not for BBR's share advice
# The impact range's moved probes stop at the path's capacity (where the
# advice has one): a probe moved above it is the capacity, the most a round
# could give, rather than a set with no fit.
CLIP_AT_CAPACITY = True
DISAGREE_IMPACT = 0.10  # estimators' impact at the advised n differ by more
# ... or their stream counts differ by a factor of two or more (and by >= 2).


def build(target: Target, probes: Sequence[ProbeResult], settings: Settings,
          model: ModelName = "square", capacity_mbps: float | None = None) -> AdviseResult:
    """`capacity_mbps`: the bottleneck's link rate, if the user knows it.
    Without it, the capacity the probes' ACK spacing shows anchors the fit
    when that estimate can be trusted."""
    measured = [Probe(p.streams, p.steady.goodput_mbps) for p in probes]
    rates = [r for p in probes for r in p.ack_pair_mbps]
    estimate = estimate_capacity(rates, max(m.throughput for m in measured)) if rates else None
    if estimate is not None and target.direction == "receive":
        # A download's pairs are its data segments as they arrived.
        estimate = replace(estimate, method="data-spacing", reason=None if estimate.reason
                           is None else received_words(estimate.reason))
    free: Prediction | None = None
    if len(measured) > 1:
        free = predict(fit_throughput(measured, model), settings)
    prediction = free
    warnings: list[AdviceWarning] = []
    capacity: Capacity | None = None
    goodput: float | None = None
    if capacity_mbps is not None:
        s = probes[-1].steady
        goodput = tcp_goodput_mbps(capacity_mbps, s.mss, s.ipv6)
        source = "given"
        if estimate is not None and estimate.goodput_mbps is not None and \
                abs(estimate.goodput_mbps / goodput - 1) > CAPACITY_DISAGREE:
            warnings.append(AdviceWarning("capacity_disagrees", {
                "link_mbps": capacity_mbps, "goodput_mbps": goodput,
                "estimated_mbps": estimate.goodput_mbps}))
    elif estimate is not None and estimate.trusted and estimate.goodput_mbps is not None:
        goodput, source = estimate.goodput_mbps, estimate.method
    elif estimate is not None:
        warnings.append(AdviceWarning("capacity_not_trusted", {"reason": estimate.reason}))
    if goodput is not None:
        anchor = goodput
        try:
            prediction = predict(fit_capacity(measured, anchor), settings)
            capacity = Capacity(capacity_mbps, anchor, competing_flows(prediction.fit), source)
        except ModelInputError as err:
            if free is None:
                raise
            capacity = Capacity(capacity_mbps, anchor, None, source)
            warnings.append(AdviceWarning("capacity_not_used", {
                "link_mbps": capacity_mbps, "goodput_mbps": anchor, "error": str(err)}))
    if prediction is None:
        # One probe fixes a fit only with a capacity.
        raise ModelInputError(f"one probe ({measured[0].streams} streams) and no trusted "
                              "capacity: a second probe is needed")
    loss_pred: Prediction | None = None
    loss_error: str | None = None
    samples = [LossSample(p.streams, p.steady.loss_rate, p.steady.srtt_ms / 1000,
                          p.steady.goodput_mbps)
               for p in probes if p.steady.loss_rate is not None and p.steady.srtt_ms]
    if len(probes) < 2:
        loss_error = "one probe: the loss-RTT fit needs two"
    elif len(samples) == len(probes):
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
            warnings.append(AdviceWarning(DISAGREE, {
                "used": used, "streams": a.num_flows, "impact": a.cross_traffic_impact,
                "loss_rtt_streams": b.num_flows, "loss_rtt_impact": other,
                # Point at the other warnings only when there are some.
                "others": bool(warnings)}))
    result = AdviseResult(target, tuple(probes), prediction, loss_pred, loss_error,
                          tuple(warnings), free, capacity, estimate, (), None)
    if probes_run_bbr(probes):
        result = _by_share(result, settings, goodput)
    return replace(result, confidence=impact_confidence(result, settings, model),
                   streams_range=streams_range(result, settings, model))


def streams_range(result: AdviseResult, settings: Settings, model: ModelName = "square",
                  spread: float | None = None) -> tuple[int, int] | None:
    """The advised count's range: the advice's own fit and rules rerun with
    the probes' goodputs moved by the path's round-to-round spread
    (estimate/spread.py; `spread` overrides it). None without advice."""
    if result.refused is not None:
        return None
    rerun = _rerun(result, settings, model)
    return count_range(lambda ps: rerun(ps)[0].num_flows, _measured(result),
                       result.prediction.advice.num_flows,
                       path_spread(result.probes) if spread is None else spread)


def impact_confidence(result: AdviseResult, settings: Settings, model: ModelName = "square",
                      spread: float | None = None, clip: bool = CLIP_AT_CAPACITY
                      ) -> tuple[ImpactRange, ...]:
    """The impact at each count of the curve with its range: the probes'
    own noise (the delta method; for BBR's share, the range between the
    probed counts), widened to hold the impact the advice's own fit gives
    on the probes moved as streams_range moves them (`spread` overrides
    the path's; 0: the probes' own noise alone). Empty without advice."""
    if result.refused is not None:
        return ()
    measured = _measured(result)
    if result.share is not None:
        own = [ImpactRange(p.streams, p.impact, p.impact_low, p.impact_high)
               for p in result.share.curve]
    else:
        own = impact_ranges(
            _refit(result, model), measured,
            [relative_standard_error(p.steady.noise, window_samples(p.steady))
             for p in result.probes],
            [c.streams for c in result.prediction.curve], baseline=settings.baseline)
    rerun = _rerun(result, settings, model)
    cap = result.capacity
    ceiling = cap.goodput_mbps if clip and cap is not None and result.used in (
        "capacity", "share") else None
    moved = rerun_moved(lambda ps: {c.streams: c.impact for c in rerun(ps)[1]}, measured,
                        path_spread(result.probes) if spread is None else spread, ceiling)
    return tuple(widened(own, moved))


def path_spread(probes: Sequence[ProbeResult]) -> float:
    """The round-to-round spread of the probes' path class (estimate/spread.py)."""
    return spread_for(path_class(
        [p.path_srtt_us / 1000 or p.steady.srtt_ms or 0.0 for p in probes],
        [p.stopped for p in probes]))


def _measured(result: AdviseResult) -> list[Probe]:
    return [Probe(p.streams, p.steady.goodput_mbps) for p in result.probes]


def _refit(result: AdviseResult, model: ModelName) -> Callable[[Sequence[Probe]], Fit]:
    """The loss-law fit the advice used, from probes."""
    cap = result.capacity
    if result.used == "capacity" and cap is not None:
        return lambda ps: fit_capacity(ps, cap.goodput_mbps)
    return lambda ps: fit_throughput(ps, model)


def _rerun(result: AdviseResult, settings: Settings, model: ModelName
           ) -> Callable[[Sequence[Probe]], tuple[Advice, Sequence[CurvePoint]]]:
    """The advice's own fit and rules, from probes: the advice and its curve."""
    cap = result.capacity
    if result.used == "share" and cap is not None:
        def share(ps: Sequence[Probe]) -> tuple[Advice, Sequence[CurvePoint]]:
            got = share_advice(ps, cap.goodput_mbps, settings)
            return got.advice, as_curve(got)
        return share
    refit = _refit(result, model)

    def fitted(ps: Sequence[Probe]) -> tuple[Advice, Sequence[CurvePoint]]:
        pred = predict(refit(ps), settings)
        return pred.advice, pred.curve
    return fitted


def probes_run_bbr(probes: Sequence[ProbeResult]) -> bool:
    """The kernel saw BBR on the probes' sockets: the loss law does not hold."""
    return any("bbr" in p.steady.congestion_control for p in probes)


def _by_share(result: AdviseResult, settings: Settings, goodput: float | None) -> AdviseResult:
    """BBR probes: the advice from the capacity share (model/share.py), the
    loss-law fits kept only as checks; no advice without a capacity."""
    probes = result.probes
    if goodput is None:
        e = result.capacity_estimate
        return replace(result, refused=AdviceRefusal("bbr_no_capacity", {
            "estimated_mbps": None if e is None else e.goodput_mbps,
            "reason": None if e is None else e.reason}))
    measured = [Probe(p.streams, p.steady.goodput_mbps) for p in probes]
    try:
        share = share_advice(measured, goodput, settings)
    except ModelInputError as err:
        return replace(result, refused=AdviceRefusal("bbr_share_failed", {"error": str(err)}))
    pred = replace(result.prediction, curve=as_curve(share), advice=share.advice)
    warnings = [w for w in result.warnings if w.code != DISAGREE]
    return replace(result, prediction=pred, share=share, warnings=tuple(warnings))


def _assumption_warnings(probes: Sequence[ProbeResult]) -> list[AdviceWarning]:
    out = []
    if all(not p.steady.retrans for p in probes):
        out.append(AdviceWarning("no_retransmissions", {"streams": max(p.streams for p in probes)}))
    start_up = None  # where the last start-up warning is, to say once what to do
    fixed = False
    for p in probes:
        # BBR leaves ssthresh unset: the kernel never marks it out of slow
        # start, and its share does not move by loss epochs.
        bbr = "bbr" in p.steady.congestion_control
        if not bbr and not past_start_up(p.steady):
            start_up = len(out)
            fixed = fixed or p.stopped is None
            out.append(AdviceWarning("start_up", {
                "streams": p.streams, "after_slow_start": p.steady.after_slow_start,
                "window_rtts": p.steady.window_rtts, "then": None}))
        elif not bbr and p.stopped == TIME_LIMIT and p.steady.retrans:
            out.append(AdviceWarning("time_limit", {"streams": p.streams,
                                              "epochs": p.steady.median_epochs}))
        if p.steady.rwnd_limited > RWND_LIMITED:
            out.append(AdviceWarning("rwnd_limited", {"streams": p.streams,
                                                "fraction": p.steady.rwnd_limited}))
        if p.steady.noise is not None and p.steady.noise > NOISY_CV:
            out.append(AdviceWarning("noisy", {"streams": p.streams, "cv": p.steady.noise}))
    if start_up is not None:
        # What to do, said once, with the last of them: probe until settled
        # (some probes had fixed lengths), or longer.
        w = out[start_up]
        out[start_up] = AdviceWarning(w.code, {**w.data,
                                         "then": "settle" if fixed else "longer"})
    return out


def received_words(reason: str) -> str:
    """An ACK estimate's reason, said of the data segments a download's
    estimate read instead."""
    return (reason.replace("ACK spacing", "data spacing").replace("ACK pairs", "data pairs")
            .replace("the ACKs ran", "the data arrived"))

"""Scores for make eval, computed from the raw records alone.

A record (one case) holds the probes' kernel measurements and the ground
truth's raw rounds; every estimator, baseline and score is recomputed from
them here, so a change to an estimator is re-scored with
`make eval PRESET=NAME EVAL_ARGS=--report` without measuring again.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict
from typing import Any, cast

from tamebpf.estimate.acktrain import estimate_capacity
from tamebpf.estimate.advice import build
from tamebpf.estimate.capacity import tcp_goodput_mbps
from tamebpf.estimate.record import ProbeResult, Target
from tamebpf.estimate.steady import FlowSteady, Steady
from tamebpf.model import (
    ModelInputError,
    Probe,
    Settings,
    fit_altman,
    fit_capacity,
    fit_throughput,
    predict,
)
from tamebpf.present.advice import warning_texts

OURS = "tamebpf default (estimated capacity, else throughput fit)"
# The same probes with `advise --capacity` given the bottleneck's configured rate.
CAPACITY = "tamebpf --capacity (the bottleneck's rate given)"
EQ7 = "Eq 7, partial order 2 (the paper's)"
# References, not estimators: what the advisor would score with inputs no
# probe can give it. They bound what better probes alone could achieve.
PERFECT_PROBES = "ref: our model on the truth at 1 and 10 streams (perfect probes)"
ONE_PROBE = "10-stream probe alone + its estimated capacity (no 1-stream probe)"
FAIR_SHARE = "ref: fair share with the true m and capacity (not measurable by probes)"


def probe_to_dict(p: ProbeResult) -> dict[str, Any]:
    d = asdict(p)
    # Thousands of ACK pair rates per probe: 0.01 Mbit/s is finer than the
    # estimate's histogram and keeps the records small.
    d["ack_pair_mbps"] = [round(r, 2) for r in p.ack_pair_mbps]
    return d


def probe_from_dict(d: dict[str, Any]) -> ProbeResult:
    s = dict(d["steady"])
    s["flows"] = tuple(FlowSteady(**f) for f in s["flows"])
    s["congestion_control"] = tuple(s["congestion_control"])
    s["series"] = tuple(tuple(x) for x in s.get("series", ()))
    s["rtt_series"] = tuple(tuple(x) for x in s.get("rtt_series", ()))
    s["epochs"] = tuple(s.get("epochs", ()))
    return ProbeResult(d["streams"], d["duration_s"], Steady(**s), d["iperf3_mbps"],
                       ack_pair_mbps=tuple(d.get("ack_pair_mbps") or ()),
                       stopped=d.get("stopped"))


def capacity_estimate_score(rec: dict[str, Any], plan: str | None = None) -> dict[str, Any]:
    """The ACK-spacing capacity estimate of the advisor's probes against the
    bottleneck's TCP goodput (its configured rate x the payload share)."""
    probes = [p for p in map(probe_from_dict, rec["probes"][plan or rec["default_plan"]])
              if p.streams in (1, 10)]
    rates = [r for p in probes for r in p.ack_pair_mbps]
    s = probes[-1].steady
    truth = tcp_goodput_mbps(rec["case"]["rate"], s.mss, s.ipv6)
    if not rates:
        return {"estimate": None, "truth": truth, "err": None, "trusted": False}
    e = estimate_capacity(rates, max(p.steady.goodput_mbps for p in probes))
    err = None if e.goodput_mbps is None else e.goodput_mbps / truth - 1
    return {"estimate": e.goodput_mbps, "truth": truth, "err": err, "trusted": e.trusted,
            "low": e.low_mbps, "high": e.high_mbps, "reason": e.reason,
            "pairs": e.pairs, "considered": e.considered}


def probing_s(rec: dict[str, Any], plan: str) -> float:
    """Wall time of a plan's two probes (1 and 10 streams) in a record."""
    total: float = sum(p["duration_s"] for p in rec["probes"][plan] if p["streams"] in (1, 10))
    return total


def truth_table(rec: dict[str, Any]) -> dict[int, dict[str, float | None]]:
    """Median goodput per n and the measured impact: with cross traffic, the
    fall of its goodput against one of our streams (the paper's definition);
    without, the fall of our own per-flow goodput, 1 - (T_n / n) / T_1
    (docs/model.md section 4: impact is the fall in per-flow throughput)."""
    pts = {int(n): v for n, v in rec["truth"].items()}
    out: dict[int, dict[str, float | None]] = {}
    one = pts[1]
    for n, v in sorted(pts.items()):
        mbit = statistics.median(v["mbit"])
        if v["cross_with"]:
            ref = statistics.median(one["cross_with"])
            impact = max(0.0, 1 - statistics.median(v["cross_with"]) / ref) if ref else None
        else:
            t1 = statistics.median(one["mbit"])
            impact = max(0.0, 1 - (mbit / n) / t1) if t1 else None
        spread = (max(v["mbit"]) - min(v["mbit"])) / mbit if mbit else None
        out[n] = {"mbit": mbit, "impact": impact, "spread": spread}
    return out


def _at(truth: dict[int, dict[str, float | None]], n: int, key: str) -> float | None:
    """Truth at n; between two measured n, linearly interpolated."""
    if n in truth:
        return truth[n][key]
    ns = sorted(truth)
    if n > ns[-1]:
        return truth[ns[-1]][key]
    hi = next(x for x in ns if x > n)
    lo = max(x for x in ns if x < n)
    a, b = truth[lo][key], truth[hi][key]
    if a is None or b is None:
        return None
    return a + (b - a) * (n - lo) / (hi - lo)


def p90(xs: list[float]) -> float | None:
    if not xs:
        return None
    return statistics.quantiles(xs, n=10, method="inclusive")[-1] if len(xs) > 1 else xs[0]


def score(pred_thru: dict[int, float], pred_impact: dict[int, float], advised: int,
          truth: dict[int, dict[str, float | None]], limit: float) -> dict[str, Any]:
    errs = [abs(pred_thru[n] - t["mbit"]) / t["mbit"] for n, t in truth.items()
            if n in pred_thru and t["mbit"]]
    imp_errs = [abs(pred_impact[n] - t["impact"]) for n, t in truth.items()
                if n in pred_impact and t["impact"] is not None]
    allowed = [cast(float, t["mbit"]) for t in truth.values() if (t["impact"] or 0.0) <= limit]
    best = max(allowed) if allowed else None
    got = _at(truth, advised, "mbit")
    impact = _at(truth, advised, "impact")
    return {
        "advised": advised,
        "measured_at_advice": advised in truth,
        "thru_errs": errs,
        "impact_errs": imp_errs,
        "thru_err_mean": statistics.fmean(errs) if errs else None,
        "thru_err_p90": p90(errs),
        "impact_err_p90": p90(imp_errs),
        "quality": got / best if got is not None and best else None,
        "exceeds": impact is not None and impact > limit + 1e-9,
        "exceeds_by": None if impact is None else impact - limit,
    }


def _curve(pred: Any) -> tuple[dict[int, float], dict[int, float]]:
    return ({c.streams: c.throughput for c in pred.curve},
            {c.streams: c.impact for c in pred.curve})


def estimators(rec: dict[str, Any], limit: float, plan: str | None = None
               ) -> dict[str, dict[str, Any]]:
    """Every estimator's and baseline's scores on one case, from the probes of
    one plan (probe lengths; the record's default when None)."""
    probes, truth, settings = _inputs(rec, limit, plan)
    result = build(Target("eval", 0), [probes[1], probes[10]], settings)
    out: dict[str, dict[str, Any]] = {}
    preds = {OURS: result.prediction}
    if result.loss_prediction is not None:
        preds["tamebpf (loss-RTT fit)"] = result.loss_prediction
    p = {n: Probe(n, pr.steady.goodput_mbps) for n, pr in probes.items()}
    preds[EQ7] = predict(
        fit_throughput([p[1], p[10]], "partial"), settings)
    preds["linear fit"] = predict(fit_throughput([p[1], p[10]], "linear"), settings)
    if 5 in p:
        preds["full order 2 (3 probes)"] = predict(fit_throughput([p[1], p[5], p[10]], "full"),
                                                   settings)
    t1, t10 = _at(truth, 1, "mbit"), _at(truth, 10, "mbit")
    if t1 and t10:
        preds[PERFECT_PROBES] = predict(fit_throughput([Probe(1, t1), Probe(10, t10)],
                                                       "square"), settings)
    for label, pred in preds.items():
        thru, imp = _curve(pred)
        out[label] = score(thru, imp, pred.advice.num_flows, truth, limit)
    out[CAPACITY] = capacity_score(rec, limit, 1.0, plan)
    # Issue 15: with the capacity estimated, is the 1-stream probe needed?
    # The 10-stream probe alone: its ACKs give the capacity, its goodput m.
    ten = probes[10]
    if ten.ack_pair_mbps:
        est = estimate_capacity(ten.ack_pair_mbps, ten.steady.goodput_mbps)
        if est.trusted and est.goodput_mbps:
            try:
                pred = predict(fit_capacity([p[10]], est.goodput_mbps), settings)
                thru, imp = _curve(pred)
                out[ONE_PROBE] = score(thru, imp, pred.advice.num_flows, truth, limit)
            except ModelInputError:
                pass
    hacker = {n: n * p[1].throughput for n in truth}
    out["Hacker bound"] = score(hacker, {}, max(truth), truth, limit)
    altman = fit_altman([p[1], p[10]])
    out["Altman formula"] = score({n: altman.throughput(n) for n in truth}, {}, max(truth),
                                  truth, limit)
    out[FAIR_SHARE] = _fair_share(rec, truth, limit)
    for fixed in (4, 8):
        out[f"fixed {fixed} streams"] = score({}, {}, fixed, truth, limit)
    out[OURS]["warnings"] = warning_texts(result)
    return out


def _inputs(rec: dict[str, Any], limit: float, plan: str | None
            ) -> tuple[dict[int, ProbeResult], dict[int, dict[str, float | None]], Settings]:
    """The probes of one plan (the record's default when None), the truth, and
    the advisor's settings for scoring them."""
    probes = {p.streams: p for p in
              map(probe_from_dict, rec["probes"][plan or rec["default_plan"]])}
    truth = truth_table(rec)
    return probes, truth, Settings(max_impact=limit, max_streams=max(32, max(truth)))


def capacity_score(rec: dict[str, Any], limit: float, scale: float = 1.0,
                   plan: str | None = None) -> dict[str, Any]:
    """`advise --capacity` given the bottleneck's rate times `scale` (1: the
    configured rate; else a user who knows it only roughly)."""
    probes, truth, settings = _inputs(rec, limit, plan)
    result = build(Target("eval", 0), [probes[1], probes[10]], settings,
                   capacity_mbps=rec["case"]["rate"] * scale)
    thru, imp = _curve(result.prediction)
    out = score(thru, imp, result.prediction.advice.num_flows, truth, limit)
    out["warnings"] = warning_texts(result)
    out["competing_flows"] = result.capacity.competing_flows if result.capacity else None
    return out


def _fair_share(rec: dict[str, Any], truth: dict[int, dict[str, float | None]],
                limit: float) -> dict[str, Any]:
    """n of our streams among m cross flows of the same kind each get C/(n+m):
    T(n) = C n/(n+m), impact 1 - (1+m)/(n+m). C: the cross traffic's rate
    alone (without cross traffic: our goodput at the most streams)."""
    m = rec["case"]["cross"]
    alone = [x for x in rec.get("cross_alone") or [] if x]
    cap = statistics.median(alone) if m and alone else truth[max(truth)]["mbit"] or 0.0
    ns = range(1, max(truth) + 1)
    thru = {n: cap * n / (n + m) for n in ns}
    imp = {n: 1 - (1 + m) / (n + m) for n in ns}
    advised = max(n for n in ns if imp[n] <= limit + 1e-9)
    return score(thru, imp, advised, truth, limit)


def advised_n(rec: dict[str, Any], limit: float, plan: str) -> int:
    probes = {p.streams: p for p in map(probe_from_dict, rec["probes"][plan])}
    result = build(Target("eval", 0), [probes[1], probes[10]],
                   Settings(max_impact=limit, max_streams=32))
    return result.prediction.advice.num_flows

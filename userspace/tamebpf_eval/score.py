"""Scores for make eval, computed from the raw records alone.

A record (one case) holds the probes' kernel measurements and the ground
truth's raw rounds; every score is recomputed from them here, so a change
to the scoring is re-scored with `make eval PRESET=NAME EVAL_ARGS=--report`
without measuring again.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict
from typing import Any, cast

from tamebpf.estimate.record import ProbeResult
from tamebpf.estimate.steady import FlowSteady, Steady

# Advice quality: the goodput at the advised count over the best within the
# limit reaches this; measured impact over the limit by more than OVER_BY.
TARGET_QUALITY, OVER_BY = 0.95, 0.05


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

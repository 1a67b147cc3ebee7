"""A Prediction as JSON-ready data and as a table for people.

Shared by `tamebpf predict` and `tamebpf advise`.  Throughputs are labelled
Mbit/s: the model is unit-free, and both commands feed it Mbit/s.
"""

from __future__ import annotations

import math
import textwrap
from typing import Any

from tamebpf.common.units import percent
from tamebpf.model import Fit, Prediction

WIDTH = 78

_LIMIT_TEXT = {
    "max-impact": "the next stream would exceed the max impact of {max_impact}",
    "gain-threshold": "the next stream would add less than {gain} throughput",
    "max-streams": "max streams ({max_streams}) reached",
    "evidence": "no congestion seen: not beyond the largest level probed",
}


def _num(x: float) -> float:
    # Guard for the promise that no NaN or inf reaches JSON output: a
    # non-finite value here is a bug in the model, so fail loudly.
    if not math.isfinite(x):
        raise ValueError(f"non-finite number {x!r} in a prediction")
    return float(x)


def prediction_to_json(pred: Prediction) -> dict[str, Any]:
    """The documented JSON shape (docs/model.md); extra keys after the core ones."""
    fit, s, adv = pred.fit, pred.settings, pred.advice
    out: dict[str, Any] = {
        "model": fit.model,
        "probes": [
            {"streams": p.streams, "throughput_mbps": _num(p.throughput)} for p in fit.probes
        ],
        "params": {k: _num(v) for k, v in fit.params.items()},
        "curve": [
            {
                "streams": c.streams,
                "throughput_mbps": _num(c.throughput),
                "impact": _num(c.impact),
            }
            for c in pred.curve
        ],
        "advice": {
            "num_flows": adv.num_flows,
            "max_nondisruptive_thru_mbps": _num(adv.max_nondisruptive_thru),
            "cross_traffic_impact": _num(adv.cross_traffic_impact),
            "limited_by": adv.limited_by,
        },
        "warnings": list(pred.warnings),
        "source": fit.source,
        "asymptote_mbps": None if fit.asymptote is None else _num(fit.asymptote),
        "settings": {
            "max_impact": _num(s.max_impact),
            "gain_threshold": _num(s.gain_threshold),
            "max_streams": s.max_streams,
            "impact_baseline": s.baseline,
        },
    }
    if fit.samples:
        out["samples"] = [
            {"streams": x.streams, "loss_rate": _num(x.loss_rate), "rtt_s": _num(x.rtt_s)}
            for x in fit.samples
        ]
        out["calibration"] = None if fit.calibration is None else _num(fit.calibration)
    return out


def _pct(x: float) -> str:
    return f"{percent(x):.2f}%"


def _setting_pct(x: float) -> str:
    return f"{percent(x):g}%"


def _params_text(fit: Fit) -> str:
    prime = "" if fit.model == "full-order-2" else "'"
    return "  ".join(f"{k}{prime} = {v:.4g}" for k, v in fit.params.items())


def render_prediction_table(pred: Prediction) -> str:
    """Plain text, at most 78 columns: header, one row per stream count with
    marks for probed levels and the advice, the advice line, warnings."""
    fit, s, adv = pred.fit, pred.settings, pred.advice
    baseline = "a 1-stream transfer" if s.baseline == "one-stream" else "no transfer"
    lines = [f"model {fit.model} ({fit.source} fit): {_params_text(fit)}"]
    if fit.asymptote is not None:
        lines.append(f"asymptote {fit.asymptote:.2f} Mbit/s; impact relative to {baseline}")
    else:
        lines.append(f"no asymptote; impact relative to {baseline}")
    lines += ["", f"{'streams':>7}  {'Mbit/s':>10}  {'impact':>7}  marks"]
    probed = {p.streams for p in fit.probes}
    for c in pred.curve:
        marks = []
        if c.streams in probed:
            marks.append("probe")
        if c.streams == adv.num_flows:
            marks.append("<- advice")
        row = f"{c.streams:>7}  {c.throughput:>10.2f}  {_pct(c.impact):>7}  {' '.join(marks)}"
        lines.append(row.rstrip())
    why = _LIMIT_TEXT[adv.limited_by].format(
        max_impact=_setting_pct(s.max_impact),
        gain=_setting_pct(s.gain_threshold),
        max_streams=s.max_streams,
    )
    lines += [
        "",
        f"advice: {adv.num_flows} stream{'s' if adv.num_flows != 1 else ''}, "
        f"{adv.max_nondisruptive_thru:.2f} Mbit/s, cross-traffic impact "
        f"{_pct(adv.cross_traffic_impact)}",
    ]
    lines += textwrap.wrap(f"({why})", WIDTH, initial_indent="  ", subsequent_indent="  ")
    for w in pred.warnings:
        lines += textwrap.wrap(w, WIDTH, initial_indent="warning: ", subsequent_indent="  ")
    return "\n".join(lines) + "\n"

"""A group as JSON-ready data: one line of `watch --json`, and each group
record of `export --jsonl` (the same shape, so one reader parses both)."""

from __future__ import annotations

import math
from typing import Any

from tamebpf.groups.group import Group
from tamebpf.present.prediction import prediction_to_json


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else x


def group_to_json(g: Group, time_s: float) -> dict[str, Any]:
    """One line of `watch --json`: the issue's keys first, then details.

    advice is null until a fit exists, else the advice object of
    `tamebpf predict --json`."""
    p = g.passive
    out: dict[str, Any] = {
        "comm": g.comm,
        "cgroup": g.cgroup,
        "remote_addr": g.remote_addr,
        "direction": g.direction,
        "streams": g.streams,
        "goodput_mbps": _finite(g.goodput_mbps),
        "loss_rate": _finite(g.loss_rate),
        "srtt_ms": _finite(g.srtt_ms),
        "congestion_control": g.congestion_control,
        "advice": prediction_to_json(p.prediction)["advice"] if p else None,
        "time": round(time_s, 3),
        "owner": g.key.owner,
        "flows": g.flows,
        "interval_s": g.interval_s,
        "over_advice": g.over_advice,
        "cap": g.cap,
        "over_cap": g.over_cap,
        "paced_mbps": None if g.paced_bps is None else g.paced_bps / 1e6,
        "paced_follows": g.paced_follows,
        "observed": [
            {"streams": o.streams, "goodput_mbps": o.goodput_mbps, "loss_rate": o.loss_rate,
             "srtt_ms": None if o.srtt_s is None else o.srtt_s * 1000, "samples": o.samples}
            for o in g.observed
        ],
        "counters": {**vars(g.counters), "flows_closed": g.flows_closed},
    }
    if p:
        out["fit"] = {
            "model": p.fit.model,
            "params": p.fit.params,
            "loss_rtt_advice": (prediction_to_json(p.loss_rtt)["advice"]
                                if p.loss_rtt else None),
            "warnings": list(p.warnings),
        }
    return out

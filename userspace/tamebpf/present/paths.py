"""Path memory shown: the `tamebpf paths` table and JSON, and the advice
`advise` gives from memory (the same ADVICE line as a probed advice, so
scripts that read it need no change)."""

from __future__ import annotations

from typing import Any

from tamebpf.common.units import percent
from tamebpf.common.words import count, printable
from tamebpf.estimate.record import Target
from tamebpf.paths.entry import PathEntry
from tamebpf.paths.recall import Recalled
from tamebpf.present.advice import range_text

DIRECTION_CELL = {"send": "send", "receive": "recv"}
_ESTIMATOR_TEXT = {"capacity": "capacity fit", "throughput": "throughput fit",
                   "share": "capacity share, BBR"}


def age_text(seconds: float) -> str:
    """3 s, 4 min 5 s, 2 h 10 min, 3 d 4 h: the age of an entry."""
    s = int(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def entry_json(e: PathEntry, now: float) -> dict[str, Any]:
    f = e.fit
    return {
        "dest": e.key.dest, "netns": e.key.netns, "congestion": e.key.congestion,
        "direction": e.key.direction, "host": e.host, "when": e.when,
        "age_s": round(e.age_s(now), 3), "source": e.source,
        "probes": e.probe_kind, "changed": e.changed,
        "capacity": {"goodput_mbps": e.capacity_mbps, "low_mbps": e.capacity_low_mbps,
                     "high_mbps": e.capacity_high_mbps, "method": e.capacity_method,
                     "link_mbps": e.link_mbps},
        "competing_flows": e.competing_flows, "rtt_ms": e.rtt_ms,
        "fit": {"estimator": f.estimator, "model": f.model,
                "coeffs": None if f.coeffs is None else list(f.coeffs),
                "probes": [{"streams": n, "goodput_mbps": g} for n, g in f.probes],
                "evidence_limit": f.evidence_limit, "capacity_mbps": f.capacity},
        "advice": {"num_flows": e.advised_streams, "throughput_mbps": e.advised_mbps,
                   "impact": e.advised_impact, "max_impact": e.max_impact,
                   "impact_low": e.impact_low, "impact_high": e.impact_high,
                   "streams_range": None if e.streams_low is None or e.streams_high is None
                   else [e.streams_low, e.streams_high], "spread": e.spread},
        # The settled windows a passive entry pools (paths/pool.py).
        "pool": {"windows": len(e.windows), "seconds": round(e.pooled_s, 3)}
        if e.windows else None,
    }


def _how(e: PathEntry, taught: tuple[int, float] | None = None) -> str:
    """How the entry was made, in words; `taught`: (transfers, over seconds)."""
    if e.source == "passive":
        if taught is None or taught[0] == 0:
            return "learned from transfers"
        pool = (f" (a pool of {count(len(e.windows), 'settled window')}, "
                f"{minutes(e.pooled_s)})" if e.windows else "")
        return (f"learned from {count(taught[0], 'transfer')} over {minutes(taught[1])}"
                f"{pool}, the last")
    kind = "" if e.probe_kind == "none" else f"{e.probe_kind} probes"
    return ("probed with --capacity" if e.source == "--capacity" else "probed") + (
        f" ({kind})" if kind else "")


def minutes(seconds: float) -> str:
    """'0.3 min', '12 min', '3.5 h'."""
    if seconds < 600:
        return f"{seconds / 60:.1f} min"
    if seconds < 3 * 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _opt(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def render_paths(entries: list[PathEntry], now: float, directory: str) -> str:
    """One row per path (its newest entry)."""
    if not entries:
        return f"no paths remembered in {directory}\n"
    head = (f"{'destination':<20} {'netns':<12} {'cc':<6} {'dir':<4} {'age':>12} {'source':<10} "
            f"{'probes':<8} {'streams':>7} {'Mbit/s':>8} {'for':>5} {'capacity':>8} "
            f"{'m':>5} {'rtt ms':>7}  changed")
    lines = [head]
    for e in entries:
        lines.append(
            f"{printable(e.key.dest):<20} {printable(e.key.netns):<12} "
            f"{printable(e.key.congestion):<6} {DIRECTION_CELL.get(e.key.direction, '?'):<4} "
            f"{age_text(e.age_s(now)):>12} {e.source:<10} {e.probe_kind:<8} "
            f"{e.advised_streams:>7} {e.advised_mbps:>8.2f} {e.max_impact:>5.0%} "
            f"{_opt(e.capacity_mbps, '8.2f'):>8} {_opt(e.competing_flows, '5.1f'):>5} "
            f"{_opt(e.rtt_ms, '7.1f'):>7}  {'yes' if e.changed else 'no'}")
    lines.append(f"({count(len(entries), 'path')} in {directory}; 'for': the --max-impact "
                 "the advice was computed for; advise recomputes it for its own)")
    return "\n".join(lines) + "\n"


def recalled_json(r: Recalled, target: Target, now: float) -> dict[str, Any]:
    """The advise JSON's core keys (advice, curve, settings, target), from
    memory; "memory" holds the entry it came from."""
    a, s = r.advice, r.settings
    return {
        "from_memory": True,
        "memory": {**entry_json(r.entry, now), "node": r.node, **taught_json(r.transfers)},
        "model": r.model,
        "params": r.params,
        "curve": [{"streams": c.streams, "throughput_mbps": c.throughput, "impact": c.impact}
                  for c in r.curve],
        "advice": {"num_flows": a.num_flows, "max_nondisruptive_thru_mbps":
                   a.max_nondisruptive_thru, "cross_traffic_impact": a.cross_traffic_impact,
                   "limited_by": a.limited_by, "streams_range": list(r.streams_range)},
        "warnings": list(a.warnings),
        "settings": {"max_impact": s.max_impact, "gain_threshold": s.gain_threshold,
                     "max_streams": s.max_streams, "impact_baseline": s.baseline},
        "estimators": {"used": r.entry.fit.estimator},
        "congestion": r.entry.key.congestion,
        "direction": r.entry.key.direction,
        "refused": None,
        "measurements": [],
        "target": {"host": target.host, "port": target.port, "netns": target.netns,
                   "congestion": target.congestion, "direction": target.direction},
    }


def taught_json(taught: tuple[int, float] | None) -> dict[str, Any]:
    """How many transfers taught a passive entry, over how long (None: not
    one of ours that transfers taught)."""
    return {"transfers": None if taught is None else taught[0],
            "learned_over_s": None if taught is None else round(taught[1], 3)}


def render_recalled(r: Recalled, target: Target, now: float) -> str:
    e, a = r.entry, r.advice
    # Every label is printed escaped: another node's (--paths-from) or a
    # row's text must not move the cursor or forge a line.
    node = "" if r.node is None else f" of node {printable(r.node)} (--paths-from)"
    what = "advice for downloads from" if target.direction == "receive" else "advice for"
    lines = [f"{what} {printable(target.host)}:{target.port}"
             + (f" (from netns {printable(target.netns)})" if target.netns else ""),
             f"from memory{node}: {_how(e, r.transfers)} {age_text(e.age_s(now))} ago, "
             f"path {printable(e.key.dest)} netns {printable(e.key.netns)}; nothing was "
             "sent (--fresh probes again)",
             "advice for downloads from this path (its senders' congestion control is not "
             "known here)" if e.key.direction == "receive" else
             f"advice for senders running {printable(e.key.congestion)}"]
    if e.capacity_mbps is not None:
        how = printable(e.capacity_method or "-")
        interval = (f", 90% {e.capacity_low_mbps:.2f}-{e.capacity_high_mbps:.2f}"
                    if e.capacity_low_mbps is not None and e.capacity_high_mbps is not None
                    else "")
        lines.append(f"capacity: {e.capacity_mbps:.2f} Mbit/s of TCP goodput ({how}{interval})"
                     + ("" if e.competing_flows is None
                        else f"; {e.competing_flows:.1f} competing flows"))
    if e.rtt_ms is not None:
        lines.append(f"RTT: {e.rtt_ms:.1f} ms")
    probed = {n for n, _ in e.fit.probes}
    lines += ["", f"{'streams':>7}  {'Mbit/s':>10}  {'impact':>7}  marks"]
    for c in r.curve:
        marks = (["probe"] if c.streams in probed else []) + \
            (["<- advice"] if c.streams == a.num_flows else [])
        lines.append(f"{c.streams:>7}  {c.throughput:>10.2f}  {percent(c.impact):>6.2f}%  "
                     f"{' '.join(marks)}".rstrip())
    lines.append("")
    lines.append(f"ADVICE: {count(a.num_flows, 'stream')}{range_text(r.streams_range)}, "
                 f"{a.max_nondisruptive_thru:.2f} "
                 f"Mbit/s, impact on cross traffic {a.cross_traffic_impact:.1%} "
                 f"({_ESTIMATOR_TEXT[e.fit.estimator]}, from memory)")
    for w in a.warnings:
        lines.append(f"warning: {w}")
    return "\n".join(lines) + "\n"

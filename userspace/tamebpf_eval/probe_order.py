"""The order of the settled probes by the path's RTT (issue 29): capacity
first on short paths, 1 stream then 10 beyond, from the stored probes.

Fresh draw 5 measured both orders side by side on the same cases (its
"default", capacity first, and "both", 1 then 10 streams, each until
settled: run-fresh5.md). Capacity first erred as little as the pair in
order where the path was short, and more beyond: after 10 streams had held
the queue, the 1-stream probe that followed read the cross traffic's share
while it was still growing back, and a 10-stream probe alone left the fit
to a capacity a long probe had measured low. This scores, per case:
- each order as measured (draw 5) or replayed (draws 3 and 4, whose probes
  ran in order; capacity first from their 10-stream probe: the replay of
  tamebpf_eval.capacity_first);
- "by-rtt" at several thresholds: capacity first where the handshake RTT
  the probes recorded (`path_srtt_us`, which includes the queue the cross
  traffic keeps) is at most the threshold, the pair in order beyond.
Draw 5's probing times are as measured; by-rtt adds an RTT check of a few
round trips (advise/pathrtt.py), not counted here. The replay of draws 3
and 4 cannot show the 1-stream probe's error after 10 streams (their
1-stream probe ran first): only draw 5 measured it.

    python -m tamebpf_eval.probe_order [--write docs/results/probe-order-design.md]
"""

from __future__ import annotations

import functools
import json
import statistics
from collections.abc import Callable
from typing import Any

from tamebpf.advise.advisor import SHORT_PATH_SRTT_US
from tamebpf_eval.capacity_first import cases, replay, targets_row
from tamebpf_eval.docsection import replay_main
from tamebpf_eval.fresh_draw import plan_score

SECTION = "probe_order"
DRAW5 = "docs/results/eval-fresh5.json"
THRESHOLDS_MS = (25, 30, 35, 40, 50, 60)


def scored_cases() -> list[dict[str, Any]]:
    """Per loss-based case: its draw, base RTT, handshake RTT (ms) and the
    score of each order ("pair", "capacity first") with its probing time "t"."""
    out = []
    for src, rec, (one, ten) in cases():
        if src == "design":  # 15 s + 15 s by construction: no settled times
            continue
        plans, _ = replay(rec, one, ten)
        out.append({"draw": src, "key": rec["key"], "rtt": rec["case"]["rtt"],
                    "srtt_ms": rec["advice"]["default"]["probes"][0]["path_srtt_us"] / 1000,
                    "pair": plans["both probes (before)"],
                    "capacity first": plans["capacity first (after)"]})
    with open(DRAW5) as f:
        records = json.load(f)["records"]
    for rec in records:
        if rec["case"]["cc"] == "bbr" or "both" not in rec["advice"]:
            continue
        pair, first = plan_score(rec, "both"), plan_score(rec, "default")
        if pair is None or first is None:
            continue
        out.append({"draw": "fresh5", "key": rec["key"], "rtt": rec["case"]["rtt"],
                    "srtt_ms": rec["advice"]["both"]["probes"][0]["path_srtt_us"] / 1000,
                    "pair": dict(pair, t=pair["probing_s"]),
                    "capacity first": dict(first, t=first["probing_s"])})
    return out


def by_rtt(case: dict[str, Any], threshold_ms: float) -> dict[str, Any]:
    first = 0 < case["srtt_ms"] <= threshold_ms
    picked: dict[str, Any] = case["capacity first" if first else "pair"]
    return picked


def _row(label: str, group: list[dict[str, Any]],
         pick: Callable[[dict[str, Any]], dict[str, Any]]) -> str:
    return targets_row(label, [(c["rtt"], pick(c)) for c in group])


def report() -> str:
    all_cases = scored_cases()
    lines = [f"<!-- {SECTION}:start -->",
             "## The probes' order by RTT (python -m tamebpf_eval.probe_order)", "",
             "Impact limit 0.3. Draws 3 and 4: capacity first replayed from probes that ran "
             "in order; draw 5: both orders measured. by-rtt <= X: capacity first where the "
             "handshake RTT was at most X ms.", "",
             "| order | cases | over by > 0.05 | >= 95% of best | thru err median / mean | "
             "impact err p90 | probing median / worst s | median s, RTT <= 30 ms |",
             "|---|---|---|---|---|---|---|---|"]
    groups = (("draws 3, 4", ("fresh3", "fresh4")), ("draw 5", ("fresh5",)),
              ("draws 3-5", ("fresh3", "fresh4", "fresh5")))
    for name, draws in groups:
        group = [c for c in all_cases if c["draw"] in draws]
        lines.append(_row(f"**{name}**: 1 then 10", group, lambda c: c["pair"]))
        lines.append(_row("capacity first", group, lambda c: c["capacity first"]))
        for th in THRESHOLDS_MS:
            lines.append(_row(f"by-rtt <= {th} ms", group, functools.partial(by_rtt,
                                                                             threshold_ms=th)))
    long_ms = SHORT_PATH_SRTT_US / 1000
    long_t = [c["pair"]["t"] for c in all_cases if c["srtt_ms"] > long_ms]
    lines += ["", f"Beyond a handshake RTT of {long_ms:g} ms (advisor.SHORT_PATH_SRTT_US) "
              f"by-rtt runs the pair: {len(long_t)} cases, probing {min(long_t):.1f} to "
              f"{max(long_t):.1f} s, median {statistics.median(long_t):.1f} s."]
    lines += ["", "Per case (thru err; probing s):", "",
              "| case | base RTT ms | handshake RTT ms | 1 then 10 | capacity first |",
              "|---|---|---|---|---|"]
    for c in sorted(all_cases, key=lambda c: c["srtt_ms"]):
        p, f = c["pair"], c["capacity first"]
        lines.append(f"| {c['key']} | {c['rtt']:g} | {c['srtt_ms']:.0f} | "
                     f"{p['thru_err_mean']:.3f}; {p['t']:.1f} | "
                     f"{f['thru_err_mean']:.3f}; {f['t']:.1f} |")
    lines.append(f"<!-- {SECTION}:end -->")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(replay_main(__doc__ or "", report, SECTION,
                                 "The probes' order by RTT: the design replay"))

"""Does run's start pace cap keep its first seconds from reading crowded paths?

On fresh draw 12 `tamebpf run`'s first 5 s gave no capacity on 5 of 12
paths (5-30 cross flows), and export's 5-s window on the same 8 streams,
unpaced, gave one on 2 of them (06, 07). run starts under a pace cap of
DEFAULT_RATE_MBPS that the kernel shares out per stream (bpf/cap_pace.bpf.h:
rate / active, 12.5 Mbit/s each for 8 streams), below the link on those
paths: the streams' segments then leave us spaced at our own rate, and
only a queue at the bottleneck closes them up again.

This repeats, on those 5 cases, the first 5 s of 8 CUBIC streams beside
the case's cross traffic, unpaced (as export samples them) and under the
start cap (as run starts), 3 times each in turn (far_capacity.measure,
every ACK logged), and scores each window with today's transfers'
estimator: how often it trusts a capacity within 10% of the link, and
what share of the pairs at or above the streams' own goodput read the
link (within 8%, a band's width). `--report` re-scores the stored record.

    make eval PRESET=paced-start     # about 15 min
"""

from __future__ import annotations

import statistics
from typing import Any

from tamebpf.estimate.acktrain import BAND, FLOOR, capacity_above_own
from tamebpf.estimate.capacity import tcp_goodput_mbps
from tamebpf_eval.advise import Case, load, save
from tamebpf_eval.docsection import markers
from tamebpf_eval.far_capacity import ARMS, measure
from tamebpf_eval.resumable import arguments, measure_missing, publish
from tamebpf_eval.sticky_pacing import DRAW

NEAR = 0.10
SECTION = "paced_start"
PLAN = "run-60s"


def cases(results_dir: str = ".") -> list[Case]:
    """Fresh draw 12's cases where run's 60-s transfer learned no capacity."""
    return [Case(**rec["case"]) for rec in load(f"{results_dir}/{DRAW}")
            if not ((rec["advice"].get(PLAN) or {}).get("memory") or {}).get("capacity")]


def link_share(rates: list[float], own_mbps: float, link_mbps: float) -> float:
    """The share of the pairs at or above FLOOR x the streams' own goodput
    that lie within a band's width (BAND) of the link's rate."""
    above = [r for r in rates if r >= own_mbps * FLOOR and r > 0]
    return sum(1 for r in above if abs(r / link_mbps - 1) <= BAND) / len(above) if above else 0.0


def scored(run: dict[str, Any], link_mbps: float) -> tuple[str, float]:
    """(today's estimate as a multiple of the link, or why none; the link's share)."""
    e = capacity_above_own(run["ack_pair_mbps"], run["goodput_mbps"])
    share = link_share(run["ack_pair_mbps"], run["goodput_mbps"], link_mbps)
    if e.goodput_mbps is None:
        return "none", share
    return f"{e.goodput_mbps / link_mbps:.2f}x" + ("" if e.trusted else " (not trusted)"), share


def report(records: list[dict[str, Any]]) -> str:
    lines = ["| case | arm | its goodput Mbit/s | ACK pairs | pairs at the link's rate | "
             "today's estimate |", "|---|---|---|---|---|---|"]
    near = dict.fromkeys(ARMS, 0)
    off = dict.fromkeys(ARMS, 0)
    shares: dict[str, list[float]] = {a: [] for a in ARMS}
    for rec in records:
        link = tcp_goodput_mbps(rec["case"]["rate"], 1448, False)
        for r in rec["runs"]:
            cell, share = scored(r, link)
            e = capacity_above_own(r["ack_pair_mbps"], r["goodput_mbps"])
            if e.trusted and e.goodput_mbps is not None:
                if abs(e.goodput_mbps / link - 1) <= NEAR:
                    near[r["arm"]] += 1
                else:
                    off[r["arm"]] += 1
            shares[r["arm"]].append(share)
            lines.append(f"| {rec['key']} | {r['arm']} | {r['goodput_mbps']:.1f} | "
                         f"{len(r['ack_pair_mbps'])} | {share:.0%} | {cell} |")
    n = {a: len(shares[a]) for a in ARMS}
    lines += ["", "| windows | " + " | ".join(ARMS) + " |", "|---|" + "---|" * len(ARMS),
              f"| capacity trusted, within {NEAR:.0%} of the link | "
              + " | ".join(f"{near[a]} of {n[a]}" for a in ARMS) + " |",
              "| capacity trusted elsewhere | "
              + " | ".join(f"{off[a]} of {n[a]}" for a in ARMS) + " |",
              "| pairs at the link's rate, median | "
              + " | ".join(f"{statistics.median(shares[a]):.0%}" if shares[a] else "-"
                           for a in ARMS) + " |"]
    start_m, end_m = markers(SECTION)
    return "\n".join([start_m, "## The first 5 s of 8 streams' ACKs, unpaced and under run's "
                      "start cap, where run learned nothing (make eval PRESET=paced-start)", "",
                      *lines, end_m]) + "\n"


def main() -> int:
    ap = arguments(__doc__, "default: docs/results/paced-start.json.gz")
    args = ap.parse_args()
    path = args.results or "docs/results/paced-start.json.gz"
    records = load(path)
    if not args.report:
        measure_missing(records, cases(), args.only, measure, lambda rs: save(path, rs))
    publish(report(records), args.write, SECTION, "run's start cap on crowded paths")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Do a transfer's later seconds read a crowded path its first 5 s did not?

On fresh draw 12's crowded paths (5-30 cross flows) `run`'s first 5 s
gave no trusted capacity (paced-start.md), and neither agreement of the
connections nor of windows in a row helped (pooled-windows.md); yet
export's one 5-s window, later in a 60-s transfer of the same 8 streams,
answered on 2 of them. This logs every ACK of 8 unpaced streams for
SECONDS (export's view: nothing paces them), twice a case, and scores
each WINDOW_S of it with the transfers' estimator as the product runs it
(estimate/acktrain.capacity_above_own, then estimate/reach.py): how
often the first window and the later ones trust a capacity within 10% of
the link, and whether the windows of one transfer agree on it (at least
half of their densest bands within 10% of one of them). A study, not a
candidate: what it shows decides what the next one is.

    make eval PRESET=later-windows    # about 10 min
"""

from __future__ import annotations

import statistics
from dataclasses import asdict
from typing import Any

from tamebpf.estimate.acktrain import (
    MIN_PAIRS,
    acked_bytes,
    capacity_above_own,
    estimate_capacity,
    pair_rates,
)
from tamebpf.estimate.capacity import tcp_goodput_mbps
from tamebpf.estimate.reach import peak_acked_mbps, reach_refused
from tamebpf.records import AckLog
from tamebpf_eval.advise import Case, load, save
from tamebpf_eval.docsection import markers
from tamebpf_eval.far_capacity import ARMS, logged_windows
from tamebpf_eval.paced_start import cases
from tamebpf_eval.pooled_windows import Tally
from tamebpf_eval.resumable import arguments, measure_missing, publish

SECONDS = 40.0  # 8 streams this long stay inside the ACK log (TB_ACKS_MAX)
WINDOW_S = 5.0
REPEATS = 2
AGREE = 0.10
SECTION = "later_windows"


def windows(log: AckLog, mss: int) -> list[dict[str, Any]]:
    """Each WINDOW_S of the log from its first ACK: its pair rates, the
    connections' goodput over it and their most acknowledged in 50 ms."""
    starts = [acks[0][0] for acks in log.flows.values() if acks]
    if not starts:
        return []
    t0, out = min(starts), []
    for k in range(int(SECONDS // WINDOW_S)):
        part = log.between(int(t0 + k * WINDOW_S * 1e9), int(t0 + (k + 1) * WINDOW_S * 1e9))
        out.append({"goodput_mbps": round(acked_bytes(part) * 8e3 / (WINDOW_S * 1e9), 3),
                    "peak_mbps": round(peak_acked_mbps(part), 2),
                    "ack_pair_mbps": [float(f"{r:.4g}") for r in pair_rates(part, mss)]})
    return out


def product(w: dict[str, Any]) -> float | None:
    """The capacity the product trusts from window `w`, or None."""
    e = reach_refused(capacity_above_own(w["ack_pair_mbps"], w["goodput_mbps"]),
                      w["peak_mbps"])
    return e.goodput_mbps if e.trusted else None


def agreed(ws: list[dict[str, Any]]) -> float | None:
    """The median of the largest group of the windows' densest bands that
    lie within AGREE of one of them, when it holds at least half of the
    windows."""
    bands = []
    for w in ws:
        e = estimate_capacity(w["ack_pair_mbps"], w["goodput_mbps"])
        if e.goodput_mbps is not None and e.pairs >= MIN_PAIRS:
            bands.append(e.goodput_mbps)
    groups = [[b for b in bands if abs(b / c - 1) <= AGREE] for c in bands]
    best = max(groups, key=len, default=[])
    return statistics.median(best) if best and 2 * len(best) >= len(ws) else None


def measure(case: Case) -> dict[str, Any]:
    runs = []
    for _, log, status in logged_windows(case, "lw", REPEATS, SECONDS, ARMS[:1]):
        runs.append({"exit": status, "lost": log.lost, "windows": windows(log, 1448)})
    return {"case": asdict(case), "key": case.key, "runs": runs}


def report(records: list[dict[str, Any]]) -> str:
    first, later, any_, agree = Tally(), Tally(), Tally(), Tally()
    rows = ["| case | transfer | each 5-s window's trusted capacity, x the link | "
            "windows agree |", "|---|---|---|---|"]
    for rec in records:
        link = tcp_goodput_mbps(rec["case"]["rate"], 1448, False)
        for i, run in enumerate(rec["runs"]):
            ws = run["windows"]
            caps = [product(w) for w in ws]
            if ws:
                first.add(caps[0], link)
            cells = [later.add(c, link) for c in caps[1:]]
            any_.add(next((c for c in caps if c is not None), None), link)
            a = agree.add(agreed(ws), link)
            rows.append(f"| {rec['key']} | {i + 1} | {caps and first_cell(caps[0], link)} "
                        f"{' '.join(cells)} | {a} |")
    head = ["| what | capacities within 10% of the link | elsewhere | none |",
            "|---|---|---|---|",
            "| the first 5-s window | " + " | ".join(first.cells()) + " |",
            "| the later 5-s windows | " + " | ".join(later.cells()) + " |",
            "| a transfer: its first trusted window | " + " | ".join(any_.cells()) + " |",
            "| a transfer: its windows agree | " + " | ".join(agree.cells()) + " |"]
    start_m, end_m = markers(SECTION)
    head += ["", summary(records)]
    return "\n".join([start_m, f"## 8 unpaced streams for {SECONDS:g} s, each {WINDOW_S:g} s "
                      "scored as the product scores it (make eval PRESET=later-windows)", "",
                      *head, "", *rows, end_m]) + "\n"


def summary(records: list[dict[str, Any]]) -> str:
    """The capacities the later windows trusted more than 10% off, the far
    ones any window trusted with their 50-ms peaks, and what each
    transfer's windows agreed on, to 3 places."""
    off: list[float] = []
    far: list[str] = []
    agree: list[str] = []
    for rec in records:
        link = tcp_goodput_mbps(rec["case"]["rate"], 1448, False)
        n = rec["key"].split("-")[1]
        for run in rec["runs"]:
            for k, w in enumerate(run["windows"]):
                c = product(w)
                if c is None:
                    continue
                if c / link > 1.5:
                    far.append(f"{c / link:.2f}x on {n} ({c / w['peak_mbps']:.2f}x its peak of "
                               f"{w['peak_mbps'] / link:.2f}x the link)")
                elif k and abs(c / link - 1) > 0.10:
                    off.append(c / link)
            a = agreed(run["windows"])
            agree.append(f"{n}: " + ("-" if a is None else f"{a / link:.3f}x"))
    return ("Later windows trusted more than 10% off the link: "
            + (", ".join(f"{x:.3f}x" for x in sorted(off)) or "none")
            + ". Far bands trusted: " + ("; ".join(far) or "none")
            + ". Each transfer's windows agree on: " + ", ".join(agree) + ".")


def first_cell(c: float | None, link: float) -> str:
    return "-" if c is None else f"{c / link:.2f}x"


def main() -> int:
    ap = arguments(__doc__, "default: docs/results/later-windows.json.gz")
    args = ap.parse_args()
    path = args.results or "docs/results/later-windows.json.gz"
    records = load(path)
    if not args.report:
        measure_missing(records, cases(), args.only, measure, lambda rs: save(path, rs))
    publish(report(records), args.write, SECTION, "A transfer's later seconds on crowded paths")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

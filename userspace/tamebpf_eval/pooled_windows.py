"""Do several reads of a crowded path agree on the link where one read is
not trusted?

On crowded paths (5-30 cross flows) a transfer's first 5 s of ACKs put a
median 12-18% of their pairs at the link's rate, under the trust rule's
quarter (paced-start.md), yet the densest band of such a window lay at
the link in most of them; the far bands (far-capacity.md) were the
densest in a few. Two candidates read agreement instead of one window's
share:

- "streams agree" (within one transfer): each connection's own densest
  band, at or above the transfer's goodput, from its own pairs; trusted
  when enough connections' bands lie near their median (STREAMS_*).
- "windows agree" (across transfers, as path memory could pool them): the
  densest band of each of POOL windows in a row; trusted when AGREE_OF of
  them lie near their median.

Both lost on the design run. What that run found instead, the reach
check (estimate/reach.py: a band over REACH x the most the connections
acknowledged together in 50 ms is refused), won the deciding runs and is
in the product; reach_checked scores it.

Each is scored against today's transfers' estimator (estimate/acktrain.
capacity_above_own on the whole window; for a pool, the last window of
it that estimator trusts, as path memory keeps the newest). Measured as
the first-seconds studies are (far_capacity.logged_windows: 8 CUBIC
streams, 7 s, plain and under run's start cap, 3 times each in turn),
keeping each connection's pairs apart and the most they acknowledged
together in stretches of PEAK_MS. `--run design`: fresh draw 12's 12
cases; `--run fresh`: FRESH's cases, drawn for this study, and `--run
far`: fresh draw 12's two far-band cases, 8 times each way (the deciding
runs: docs/results/pooled-windows-rules.md, written before them).

    make eval PRESET=pooled-windows         # about 18 min
    make eval PRESET=pooled-windows-fresh   # the deciding run, about 18 min
    make eval PRESET=pooled-windows-far     # its second part, about 10 min
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from tamebpf.estimate.acktrain import (
    MIN_PAIRS,
    CapacityEstimate,
    acked_bytes,
    capacity_above_own,
    estimate_capacity,
    pair_rates,
)
from tamebpf.estimate.capacity import tcp_goodput_mbps
from tamebpf.estimate.reach import REACH, REACH_WIDTH_MS, peak_acked_mbps, reach_refused
from tamebpf.records import AckLog
from tamebpf_eval.advise import Case, load, save
from tamebpf_eval.docsection import markers
from tamebpf_eval.far_capacity import WINDOW_S, first_seconds, logged_windows
from tamebpf_eval.fresh_draw import Draw, draw
from tamebpf_eval.resumable import arguments, measure_missing, publish
from tamebpf_eval.sticky_pacing import DRAW

NEAR = 0.10  # a capacity within this of the link's TCP goodput is right
FAR = 1.5
# "streams agree": a connection's band needs STREAMS_MIN_PAIRS pairs; the
# median of their bands is trusted when STREAMS_AGREE_OF of the connections
# with a band, and at least STREAMS_AT_LEAST of them, lie within AGREE of it.
STREAMS_MIN_PAIRS = MIN_PAIRS
STREAMS_AGREE_OF = 0.6
STREAMS_AT_LEAST = 4
# "windows agree": POOL windows in a row, AGREE_OF of them within AGREE of
# their bands' median.
POOL = 3
AGREE_OF = 2
AGREE = 0.10
# The widths (ms) over which a window's most-acknowledged stretch is kept:
# wider than the delay line's late batches (0.7 ms at worst), narrower
# than a round trip.
PEAK_MS = (5, 10, 20, 50)
# Drawn on 2026-11-28 at 23:22:42 UTC, `int.from_bytes(os.urandom(4),
# "big") >> 1`, for this study's deciding run, before any of its cases
# ran: 12 loss-based cases, half at 80 ms or more.
FRESH = Draw("pool13", 1672194309, "pooled windows", loss_based=12, bbr_cubic=0, bbr_bbr=0, long=6)
SECTION = "pooled_windows"


def cases(run: str, results_dir: str = ".") -> list[Case]:
    """The cases of a run (RUNS): the deciding run's drawn ones, or fresh
    draw 12's (all of them, or its two far-band cases)."""
    if run == "fresh":
        return draw(FRESH)
    drawn = [Case(**rec["case"]) for rec in load(f"{results_dir}/{DRAW}")]
    return [c for c in drawn if c.name.split("-")[1] in FAR_CASES] if run == "far" else drawn


def connection_windows(log: AckLog, mss: int) -> tuple[list[list[float]], float]:
    """Each connection's pair rates in the first seconds, and all the
    connections' goodput (Mbit/s) over WINDOW_S."""
    kept = first_seconds(log)
    return ([pair_rates(kept.only([k]), mss) for k in kept.flows],
            acked_bytes(kept) * 8e3 / (WINDOW_S * 1e9))


def peak_goodput(log: AckLog, width_ms: float) -> float:
    """The most all the connections acknowledged together in any
    `width_ms` of the first seconds, as Mbit/s (estimate/reach.py)."""
    return peak_acked_mbps(first_seconds(log), width_ms)


def agreed(bands: Sequence[float], need: int) -> float | None:
    """The median of `bands` when at least `need` of them lie within AGREE of it."""
    if not bands:
        return None
    m = statistics.median(bands)
    return m if sum(1 for b in bands if abs(b / m - 1) <= AGREE) >= need else None


def streams_agree(per_connection: Sequence[Sequence[float]], own_mbps: float) -> float | None:
    """The "streams agree" capacity of one window (Mbit/s), or None."""
    bands = []
    for rates in per_connection:
        e = estimate_capacity(rates, own_mbps)
        if e.goodput_mbps is not None and e.pairs >= STREAMS_MIN_PAIRS:
            bands.append(e.goodput_mbps)
    if len(bands) < STREAMS_AT_LEAST:
        return None
    return agreed(bands, max(STREAMS_AT_LEAST, math.ceil(len(bands) * STREAMS_AGREE_OF)))


def densest(window: dict[str, Any]) -> float | None:
    """The densest band of a whole window with MIN_PAIRS pairs, trusted or not."""
    e = estimate_capacity(all_pairs(window), window["goodput_mbps"])
    return e.goodput_mbps if e.goodput_mbps is not None and e.pairs >= MIN_PAIRS else None


def windows_agree(pool: Sequence[dict[str, Any]]) -> float | None:
    """The "windows agree" capacity of POOL windows, or None."""
    bands = [b for b in (densest(w) for w in pool) if b is not None]
    return agreed(bands, AGREE_OF)


def all_pairs(window: dict[str, Any]) -> list[float]:
    return [r for rates in window["conn_pair_mbps"] for r in rates]


def today(window: dict[str, Any]) -> CapacityEstimate:
    return capacity_above_own(all_pairs(window), window["goodput_mbps"])


def reach_checked(window: dict[str, Any]) -> CapacityEstimate:
    """Today's estimate of a window, not trusted above REACH x its peak."""
    e = today(window)
    return reach_refused(e, window["peak_mbps"][str(round(REACH_WIDTH_MS))])


def today_pool(pool: Sequence[dict[str, Any]]) -> float | None:
    """What path memory keeps today from POOL windows: the newest trusted."""
    kept = None
    for w in pool:
        e = today(w)
        if e.trusted and e.goodput_mbps is not None:
            kept = e.goodput_mbps
    return kept


def measure(case: Case, repeats: int) -> dict[str, Any]:
    runs = []
    for arm, log, status in logged_windows(case, "pw", repeats):
        per, goodput = connection_windows(log, 1448)
        runs.append({"arm": arm, "exit": status, "goodput_mbps": round(goodput, 3),
                     "peak_mbps": {str(w): round(peak_goodput(log, w), 2) for w in PEAK_MS},
                     "conn_pair_mbps": [[float(f"{r:.4g}") for r in rates] for rates in per]})
    return {"case": asdict(case), "key": case.key, "runs": runs}


class Tally:
    """Capacities given, against the link: right (within NEAR), far (over
    FAR x), otherwise off; and none."""

    def __init__(self) -> None:
        self.right = self.off = self.far = self.none = 0

    def add(self, capacity: float | None, link: float) -> str:
        if capacity is None:
            self.none += 1
            return "-"
        x = capacity / link
        if abs(x - 1) <= NEAR:
            self.right += 1
        elif x > FAR:
            self.far += 1
        else:
            self.off += 1
        return f"{x:.2f}x"

    def cells(self) -> list[str]:
        n = self.right + self.off + self.far + self.none
        return [f"{self.right} of {n}", f"{self.off + self.far} ({self.far} far)",
                f"{self.none}"]


def reach_lines(records: list[dict[str, Any]]) -> list[str]:
    """The bands today's estimator trusted, against their transfer's peak
    over REACH_WIDTH_MS: the near ones' largest ratio, each far one."""
    near: list[float] = []
    far: list[str] = []
    for rec in records:
        link = tcp_goodput_mbps(rec["case"]["rate"], 1448, False)
        for w in rec["runs"]:
            e = today(w)
            if not e.trusted or e.goodput_mbps is None:
                continue
            peak = w["peak_mbps"][str(round(REACH_WIDTH_MS))]
            x = e.goodput_mbps / link
            if abs(x - 1) <= NEAR:
                near.append(e.goodput_mbps / peak)
            elif x > FAR:
                verdict = "kept" if reach_checked(w).trusted else "refused"
                far.append(f"{x:.2f}x the link, {e.goodput_mbps / peak:.2f}x its peak of "
                           f"{peak / link:.2f}x the link ({verdict})")
    most = f"at most {max(near):.2f}x it ({len(near)} bands)" if near else "none"
    return [f"Today's trusted bands against their transfer's {REACH_WIDTH_MS:g}-ms peak: "
            f"within {NEAR:.0%} of the link, {most}; over {FAR:g}x the link: "
            + ("; ".join(far) if far else "none") + "."]


def pools(runs: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The record's windows in the order measured, POOL at a time (the
    last short pool dropped)."""
    return [list(runs[i:i + POOL]) for i in range(0, len(runs) - POOL + 1, POOL)]


def report(records: list[dict[str, Any]], section: str, title: str) -> str:
    rows = ["| case | windows: today's / reach check / streams agree | "
            "pools: today's / windows agree |", "|---|---|---|"]
    t_win, t_reach, t_streams, t_pool, t_windows = Tally(), Tally(), Tally(), Tally(), Tally()
    for rec in records:
        link = tcp_goodput_mbps(rec["case"]["rate"], 1448, False)
        cells = []
        for w in rec["runs"]:
            e = today(w)
            a = t_win.add(e.goodput_mbps if e.trusted else None, link)
            r = reach_checked(w)
            c = t_reach.add(r.goodput_mbps if r.trusted else None, link)
            b = t_streams.add(streams_agree(w["conn_pair_mbps"], w["goodput_mbps"]), link)
            cells.append(f"{a}/{c}/{b}")
        pcells = [f"{t_pool.add(today_pool(p), link)}/{t_windows.add(windows_agree(p), link)}"
                  for p in pools(rec["runs"])]
        rows.append(f"| {rec['key']} | {' '.join(cells)} | {' '.join(pcells)} |")
    head = ["| what | capacities within 10% of the link | elsewhere | none |",
            "|---|---|---|---|"]
    for name, t in (("one window, today's estimator", t_win),
                    (f"one window, today's with the reach check ({REACH:g}x the "
                     f"{REACH_WIDTH_MS:g}-ms peak)", t_reach),
                    ("one window, streams agree", t_streams),
                    (f"{POOL} windows, today's (the newest trusted)", t_pool),
                    (f"{POOL} windows, windows agree", t_windows)):
        head.append(f"| {name} | " + " | ".join(t.cells()) + " |")
    start_m, end_m = markers(section)
    return "\n".join([start_m, title, "", *head, "", *reach_lines(records), "", *rows,
                      end_m]) + "\n"


# run: (record, section, title, times each arm)
RUNS = {
    "design": ("pooled-windows", SECTION, "## The design: fresh draw 12's cases, 8 streams' "
               "first 5 s, each connection's pairs kept (make eval PRESET=pooled-windows)", 3),
    "fresh": ("pooled-windows-fresh", "pooled_windows_fresh", "## The deciding run: 12 cases "
              "drawn for it (make eval PRESET=pooled-windows-fresh)", 3),
    "far": ("pooled-windows-far", "pooled_windows_far", "## The deciding run's second part: "
            "fresh draw 12's far-band cases, 8 times each way "
            "(make eval PRESET=pooled-windows-far)", 8),
}
FAR_CASES = ("02", "11")


def main() -> int:
    ap = arguments(__doc__, "default: docs/results/pooled-windows[-RUN].json.gz")
    ap.add_argument("--run", choices=tuple(RUNS), default="design",
                    help="which cases: the design (default), the fresh draw, the far cases")
    args = ap.parse_args()
    name, section, title, repeats = RUNS[args.run]
    path = args.results or f"docs/results/{name}.json.gz"
    records = load(path)
    if not args.report:
        measure_missing(records, cases(args.run), args.only, lambda c: measure(c, repeats),
                        lambda rs: save(path, rs))
    publish(report(records, section, title), args.write, section,
            "Agreement of several reads of a crowded path")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

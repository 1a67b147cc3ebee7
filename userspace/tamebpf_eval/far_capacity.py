"""Capacities trusted far above the link: which estimator lets them through?

On fresh draw 12 two 120-ms paths (02: 150 Mbit/s beside 20 CUBIC flows;
11: 120 Mbit/s beside 3 of 240 ms) got capacities of 2.4-9x the link from
the transfers' ACKs, under `run` (its first 5 s) and under `export` (its
5-s window on 8 plain streams), and the advice built on them went over
the impact limit by 0.26-0.60. The transfers' estimator
(estimate/acktrain.highest_band) was changed after fresh draw 10, whose
capacities were within 10% in 25 of 26 (686b0bd: the climb goes on past
bands it cannot trust, and a band is trusted on its share of the pairs
from 1.3x below it up).

This repeats those windows on those two cases: 8 CUBIC streams for 7 s
beside the case's cross traffic, plain (as export samples them) and
under a pace cap of 100 Mbit/s (as `run` starts), 3 times each in turn,
every ACK logged; the first 5 s of pairs of all 8 connections are scored
with today's estimator, with 686b0bd's (the one fresh draw 12 ran: its
second look wanted no share of all the pairs), with the climb as it was
before 686b0bd, and with the probes' densest band (each at or above the window's own goodput, with
the 1.2x share clause), against the link's TCP goodput. `--report`
re-scores the stored record.

    make eval PRESET=far-capacity     # about 6 min
"""

from __future__ import annotations

import gzip
import json
import statistics
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tamebpf.estimate.acktrain import (
    CLIMB,
    CLIMB_PAIRS,
    FLOOR,
    CapacityEstimate,
    acked_bytes,
    capacity_above_own,
    estimate_capacity,
    highest_band,
    pair_rates,
    share_refused,
)
from tamebpf.estimate.capacity import tcp_goodput_mbps
from tamebpf.records import AckLog
from tamebpf_eval.advise import Case, case_path, load, save
from tamebpf_eval.commands import pin_dir
from tamebpf_eval.docsection import markers
from tamebpf_eval.resumable import arguments, measure_missing, publish
from tamebpf_eval.sticky_pacing import DRAW, logged_transfer
from tamebpf_eval.truth import settle

ARMS = ("plain", "pace cap 100 Mbit/s")
PACE_MBPS = 100.0  # run's start when path memory has none (runner/session.py)
STREAMS = 8
REPEATS = 3
SECONDS = 7.0
WINDOW_S = 5.0  # run's first seconds (runner/acks.py) and export's window
FAR = 1.5  # a learned capacity this many times the link's picks the case
NEAR = 0.10
SECTION = "far_capacity"
STORED_SECTION = "far_capacity_stored"
# Every stored record of transfers' ACK windows: (record, what its windows are).
STORED_ALL = (
    ("ack-windows.json.gz", "ack-windows: 52 of test runs' first seconds and scouts, "
     "20 Mbit/s path (the second look's design)"),
    ("far-capacity.json.gz", "far-capacity: 12 of 8 streams' first 5 s on 02 and 11 "
     "(the mend's design)"),
    ("sticky-pacing.json.gz", "sticky-pacing: 90 of one stream, first 5 s and 5-10 s"),
    ("paced-start.json.gz", "paced-start: 30 of 8 streams' first 5 s, 5 crowded cases"),
    ("back-to-back.json.gz", "back-to-back: 72 of 8 streams' first 5 s, 12 cases "
     "(after the mend)"),
    ("acked-size.json.gz", "acked-size: 42 of 8 streams' first 5 s, 7 cases (after the mend)"),
    ("acked-size-far.json.gz", "acked-size-far: 32 of 8 streams' first 5 s on 02 and 11 "
     "(after the mend)"),
)


def cases(results_dir: str = ".") -> list[Case]:
    """Fresh draw 12's cases where some plan learned a capacity FAR x the link."""
    out = []
    for rec in load(f"{results_dir}/{DRAW}"):
        link = tcp_goodput_mbps(rec["case"]["rate"], 1448, False)
        caps = [((a.get("memory") or {}).get("capacity") or {}).get("goodput_mbps")
                for a in rec["advice"].values()]
        if any(c is not None and c > FAR * link for c in caps):
            out.append(Case(**rec["case"]))
    return out


def first_seconds(log: AckLog) -> AckLog:
    """Each connection's ACKs in the first WINDOW_S from the first ACK of any."""
    starts = [acks[0][0] for acks in log.flows.values() if acks]
    if not starts:
        return AckLog({}, log.lost)
    return log.between(0, int(min(starts) + WINDOW_S * 1e9))


def first_window(log: AckLog, mss: int) -> tuple[list[float], float]:
    """The pair rates of every connection's ACKs in the first WINDOW_S from
    the first ACK, and the connections' goodput (Mbit/s) over it."""
    kept = first_seconds(log)
    return pair_rates(kept, mss), acked_bytes(kept) * 8e3 / (WINDOW_S * 1e9)


def stored_windows(name: str, results_dir: str) -> Iterator[tuple[list[float], float, float]]:
    """(pair rates, the streams' own goodput, the link's TCP goodput) of
    each window in the stored record `name`."""
    if name == "ack-windows.json.gz":  # windows of one path, not cases
        with gzip.open(f"{results_dir}/{name}", "rt") as f:
            stored = json.load(f)
        for w in stored["windows"]:
            yield w["pair_mbps"], w["floor_mbps"], stored["link_goodput_mbps"]
        return
    for r in load(f"{results_dir}/{name}"):
        link = tcp_goodput_mbps(r["case"]["rate"], 1448, False)
        for run in r["runs"]:
            for w in run.get("windows", [run]):
                yield w["ack_pair_mbps"], w["goodput_mbps"], link


def share_of_all(e: CapacityEstimate, rates: Sequence[float], own_mbps: float) -> float:
    """The share of the pairs at or above FLOOR x `own_mbps` in `e`'s band."""
    every = sum(1 for r in rates if r >= own_mbps * FLOOR and r > 0)
    return e.pairs / every if every else 0.0


def stored_report(results_dir: str) -> str:
    """Today's estimator and fresh draw 12's on every stored window: how
    many trusted near the link and far above it, and the shares of all the
    pairs those bands held."""
    ways = (("today's", capacity_above_own), ("686b0bd's", second_look_686b0bd))
    lines = ["| windows | " + " | ".join(f"{w}: trusted near / far" for w, _ in ways)
             + " | smallest share of a band today's trusts near the link | "
             "shares of the far bands (today's; 686b0bd's) |", "|---|---|---|---|---|"]
    for name, what in STORED_ALL:
        counts = {w: [0, 0] for w, _ in ways}
        near_shares: list[float] = []
        far_shares: dict[str, list[float]] = {w: [] for w, _ in ways}
        for rates, own, link in stored_windows(name, results_dir):
            for w, fn in ways:
                e = fn(rates, own)
                if not e.trusted or e.goodput_mbps is None:
                    continue
                x = e.goodput_mbps / link
                share = share_of_all(e, rates, own)
                if abs(x - 1) <= NEAR:
                    counts[w][0] += 1
                    if w == ways[0][0]:
                        near_shares.append(share)
                elif x > FAR:
                    counts[w][1] += 1
                    far_shares[w].append(share)
        smallest = f"{min(near_shares):.1%}" if near_shares else "-"
        far = "; ".join(", ".join(f"{v:.1%}" for v in sorted(far_shares[w])) or "-"
                        for w, _ in ways)
        lines.append(f"| {what} | " + " | ".join(f"{n} / {f}" for n, f in counts.values())
                     + f" | {smallest} | {far} |")
    start_m, end_m = markers(STORED_SECTION)
    return "\n".join([start_m, "## Every stored window, today's estimator and fresh draw 12's "
                      "(make eval PRESET=far-capacity EVAL_ARGS=--report)", "",
                      f"Near: trusted within {NEAR:.0%} of the link's TCP goodput; far: "
                      f"trusted over {FAR:g}x it. A band's share: its pairs over all the "
                      "window's pairs at or above the streams' own goodput. Today's: the "
                      "pairs' estimator alone; these records keep no ACK times, so the reach "
                      "check the transfers' estimate has had since (estimate/reach.py, "
                      "pooled-windows.md) is not in them.", "",
                      *lines, end_m]) + "\n"


def climb_before_686b0bd(rates: Sequence[float], own_mbps: float) -> CapacityEstimate:
    """The transfers' estimator as fresh draw 10 ran it: climb from the
    densest band to a trusted one above holding CLIMB_PAIRS of its pairs,
    stopping at the first that is not; the 1.2x share clause after."""
    e = estimate_capacity(rates, own_mbps)
    while e.goodput_mbps is not None:
        above = estimate_capacity(rates, CLIMB * e.goodput_mbps / FLOOR)
        if not above.trusted or above.pairs < CLIMB_PAIRS * e.pairs:
            break
        e = above
    return share_refused(e, own_mbps)


def second_look_686b0bd(rates: Sequence[float], own_mbps: float) -> CapacityEstimate:
    """The transfers' estimator as 686b0bd made it (fresh draw 12 ran it): its
    second look at a band's share wanted none of all the pairs."""
    return share_refused(highest_band(rates, own_mbps, of_all=0.0), own_mbps)


def densest(rates: Sequence[float], own_mbps: float) -> CapacityEstimate:
    return share_refused(estimate_capacity(rates, own_mbps), own_mbps)


ESTIMATORS: dict[str, Callable[[Sequence[float], float], CapacityEstimate]] = {
    "today's (highest_band)": capacity_above_own,
    "686b0bd's (fresh draw 12)": second_look_686b0bd,
    "before 686b0bd": climb_before_686b0bd,
    "the probes' densest band": densest,
}


def logged_windows(case: Case, prefix: str, repeats: int = REPEATS, seconds: float = SECONDS,
                   arms: Sequence[str] = ARMS) -> Iterator[tuple[str, AckLog, int | None]]:
    """On the case's testbed (namespaces named from `prefix`), `repeats`
    times each arm in turn, after the cross traffic settles: (the arm, the
    ACK log of STREAMS streams of the case's congestion control for
    `seconds`, iperf3's exit status). The studies of the transfers' ACK
    windows share it."""
    with pin_dir(), case_path(case, prefix) as (tb, reference, target):
        for _ in range(repeats):
            for arm in arms:
                settle(tb, case.cross, reference)
                log, status = logged_transfer(target.host, target.netns, case.cc, STREAMS,
                                              seconds, [],
                                              PACE_MBPS if arm == ARMS[1] else None)
                yield arm, log, status


def measure(case: Case) -> dict[str, Any]:
    runs = []
    for arm, log, status in logged_windows(case, "fc"):
        rates, goodput = first_window(log, 1448)
        runs.append({"arm": arm, "exit": status, "goodput_mbps": round(goodput, 3),
                     "ack_pair_mbps": [round(r, 2) for r in rates]})
    return {"case": asdict(case), "key": case.key, "runs": runs}


def _cell(e: CapacityEstimate, link: float) -> str:
    if e.goodput_mbps is None:
        return "none"
    return f"{e.goodput_mbps / link:.2f}x" + ("" if e.trusted else " (not trusted)")


def report(records: list[dict[str, Any]]) -> str:
    lines = ["| case | arm | its goodput Mbit/s | ACK pairs | "
             + " | ".join(ESTIMATORS) + " |", "|---|---|---|---|" + "---|" * len(ESTIMATORS)]
    far = dict.fromkeys(ESTIMATORS, 0)
    near = dict.fromkeys(ESTIMATORS, 0)
    total = 0
    for rec in records:
        link = tcp_goodput_mbps(rec["case"]["rate"], 1448, False)
        for r in rec["runs"]:
            total += 1
            got = {name: fn(r["ack_pair_mbps"], r["goodput_mbps"])
                   for name, fn in ESTIMATORS.items()}
            for name, e in got.items():
                if e.trusted and e.goodput_mbps is not None:
                    far[name] += e.goodput_mbps > FAR * link
                    near[name] += abs(e.goodput_mbps / link - 1) <= NEAR
            lines.append(f"| {rec['key']} | {r['arm']} | {r['goodput_mbps']:.1f} | "
                         f"{len(r['ack_pair_mbps'])} | "
                         + " | ".join(_cell(e, link) for e in got.values()) + " |")
    lines += ["", "| of " + str(total) + " windows | " + " | ".join(ESTIMATORS) + " |",
              "|---|" + "---|" * len(ESTIMATORS),
              f"| trusted, over {FAR:g}x the link | "
              + " | ".join(str(far[n]) for n in ESTIMATORS) + " |",
              f"| trusted, within {NEAR:.0%} of it | "
              + " | ".join(str(near[n]) for n in ESTIMATORS) + " |"]
    pairs = [len(r["ack_pair_mbps"]) for rec in records for r in rec["runs"]]
    if pairs:
        lines += ["", f"ACK pairs per window: median {statistics.median(pairs):.0f}."]
    start_m, end_m = markers(SECTION)
    return "\n".join([start_m, "## The first 5 s of 8 streams' ACKs on the cases that learned "
                      "a capacity far above the link (make eval PRESET=far-capacity)", "",
                      *lines, end_m]) + "\n"


def main() -> int:
    ap = arguments(__doc__, "default: docs/results/far-capacity.json.gz")
    args = ap.parse_args()
    path = args.results or "docs/results/far-capacity.json.gz"
    records = load(path)
    if not args.report:
        measure_missing(records, cases(), args.only, measure, lambda rs: save(path, rs))
    publish(report(records), args.write, SECTION, "Capacities far above the link")
    publish(stored_report(str(Path(path).parent)), args.write, STORED_SECTION,
            "Capacities far above the link")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Only the ACK pairs of segments sent back to back: do crowded paths read?

Packet dispersion reads the link from two segments that reached the
bottleneck together, which they do when they left us together. The
transfers' estimator (estimate/acktrain.py) takes every pair of
consecutive ACKs of a connection; in slow start most of them acknowledge
segments sent in answer to different ACKs, one ACK clock apart, and their
spacing is that clock's interleaved with the other traffic's packets. On
crowded paths the link's band then holds 10-20% of the pairs, under the
quarter the trust rule wants (docs/results/paced-start.md).

At commit 644d071 the ACK log kept what each connection had sent (snd_nxt)
as each ACK arrived, before TCP acted on it (bpf/acktrain.bpf.c, tb_ack's
snd_nxt, AckLog.sent): the data between
two such marks was sent in one go, in answer to one ACK. A pair counts
here only if the segments its second ACK acknowledges were sent in the
same go as the last one its first ACK acknowledges (no mark between
them). Paced connections send between ACKs too (the pacing timer), which
these marks do not see, so a capped window keeps pairs that are spaced at
our own rate; they mostly fall below the streams' own goodput, which the
estimator does not read.

On fresh draw 12's cases (5 crowded ones where run learned nothing, the 2
that learned capacities far above the link, 5 that learned them right),
8 CUBIC streams' first 5 s beside the case's cross traffic, unpaced and
under run's start cap (100 Mbit/s), 3 times each in turn: today's
estimator on all the pairs, and on the back-to-back ones alone.
`--report` re-scores the stored record. The candidate lost
(docs/results/back-to-back.md), so the log keeps no marks since: measuring
again needs a checkout of 644d071.

    make eval PRESET=back-to-back EVAL_ARGS=--report   # seconds
    git checkout 644d071 && make eval PRESET=back-to-back   # about 15 min
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from tamebpf.estimate.acktrain import SEQ_MOD, capacity_above_own
from tamebpf.estimate.capacity import DEFAULT_MSS, tcp_goodput_mbps
from tamebpf.records import AckLog
from tamebpf_eval.advise import Case, load, save
from tamebpf_eval.docsection import markers
from tamebpf_eval.far_capacity import WINDOW_S, logged_windows
from tamebpf_eval.resumable import arguments, measure_missing, publish
from tamebpf_eval.sticky_pacing import DRAW

NEAR = 0.10
SECTION = "back_to_back"
# Fresh draw 12's cases by number: where run learned nothing (crowded), far
# above the link, and right (within 10%).
GROUPS = {"crowded, run learned nothing": ("01", "06", "07", "09", "10"),
          "learned far above the link": ("02", "11"),
          "learned right": ("03", "04", "05", "08", "12")}


def _number(key: str) -> str:
    return key.split("-")[1]


def cases(results_dir: str = ".") -> list[Case]:
    wanted = {n for ns in GROUPS.values() for n in ns}
    return [Case(**rec["case"]) for rec in load(f"{results_dir}/{DRAW}")
            if _number(rec["key"]) in wanted]


def back_to_back(acks: Sequence[tuple[int, int]], sent: Sequence[int], mss: int) -> list[bool]:
    """For each pair of consecutive ACKs of one connection: whether the
    segments the second acknowledges left in the same go as the last one
    the first acknowledges (no snd_nxt mark, taken as an ACK arrived,
    falls strictly inside that run of bytes)."""
    if not acks:
        return []
    base = acks[0][1]
    marks = sorted((s - base) % SEQ_MOD for s in sent)
    out = []
    for (_, a0), (_, a1) in zip(acks, acks[1:], strict=False):
        lo = (a0 - base) % SEQ_MOD - (mss or DEFAULT_MSS)
        hi = (a1 - base) % SEQ_MOD
        i = bisect.bisect_right(marks, lo)
        out.append(not (i < len(marks) and marks[i] < hi))
    return out


def window_rates(log: AckLog, sent_by_flow: Mapping[int, Sequence[int]],
                 mss: int) -> tuple[list[float], list[float], float]:
    """The first WINDOW_S of every connection's ACKs: (all pair rates,
    the back-to-back ones by `sent_by_flow`'s marks, the connections'
    goodput in Mbit/s), pairs as estimate/acktrain.pair_rates takes them
    (at most 4 segments apart)."""
    starts = [acks[0][0] for acks in log.flows.values() if acks]
    if not starts:
        return [], [], 0.0
    end = min(starts) + WINDOW_S * 1e9
    most = 4 * (mss or DEFAULT_MSS)
    every, paired, acked_total = [], [], 0
    for cookie, acks in log.flows.items():
        n = sum(1 for a in acks if a[0] < end)
        kept, sent = acks[:n], list(sent_by_flow.get(cookie, []))[:n]
        flags = back_to_back(kept, sent, mss) if len(sent) == n else [False] * max(0, n - 1)
        for ((t0, a0), (t1, a1)), b2b in zip(zip(kept, kept[1:], strict=False), flags,
                                             strict=True):
            dt, acked = t1 - t0, (a1 - a0) % SEQ_MOD
            acked_total += acked
            if dt <= 0 or acked == 0 or acked > most:
                continue
            rate = acked * 8e3 / dt
            every.append(rate)
            if b2b:
                paired.append(rate)
    return every, paired, acked_total * 8e3 / (WINDOW_S * 1e9)


def measure(case: Case) -> dict[str, Any]:
    """At 644d071, where AckLog had `sent`; the log keeps no marks since."""
    if not hasattr(AckLog, "sent"):
        raise SystemExit("the ACK log keeps no snd_nxt marks since the back-to-back study "
                         "lost: `git checkout 644d071` to measure it again, or "
                         "EVAL_ARGS=--report to re-score the stored record")
    runs = []
    for arm, log, status in logged_windows(case, "bb"):
        every, paired, goodput = window_rates(log, log.sent, 1448)  # type: ignore[attr-defined]
        runs.append({"arm": arm, "exit": status, "goodput_mbps": round(goodput, 3),
                     "ack_pair_mbps": [round(r, 2) for r in every],
                     "back_to_back_mbps": [round(r, 2) for r in paired]})
    return {"case": asdict(case), "key": case.key, "runs": runs}


def _scored(rates: list[float], own: float, link: float) -> tuple[str, str]:
    """(the cell, its class: near / off / untrusted / none)."""
    e = capacity_above_own(rates, own)
    if e.goodput_mbps is None:
        return "none", "none"
    x = e.goodput_mbps / link
    if not e.trusted:
        return f"{x:.2f}x (not trusted)", "untrusted"
    return f"{x:.2f}x", "near" if abs(x - 1) <= NEAR else "off"


WAYS = ("all pairs (today's)", "back-to-back pairs")


def report(records: list[dict[str, Any]]) -> str:
    lines = ["| case | arm | its goodput Mbit/s | pairs | back to back | "
             + " | ".join(WAYS) + " |", "|---|---|---|---|---|---|---|"]
    tally: dict[tuple[str, str, str], int] = {}
    windows: dict[tuple[str, str], int] = {}
    for rec in records:
        link = tcp_goodput_mbps(rec["case"]["rate"], 1448, False)
        group = next((g for g, ns in GROUPS.items() if _number(rec["key"]) in ns), "other")
        for r in rec["runs"]:
            cells = []
            for way, rates in zip(WAYS, (r["ack_pair_mbps"], r["back_to_back_mbps"]),
                                  strict=True):
                cell, cls = _scored(rates, r["goodput_mbps"], link)
                cells.append(cell)
                tally[(group, way, cls)] = tally.get((group, way, cls), 0) + 1
            windows[(group, r["arm"])] = windows.get((group, r["arm"]), 0) + 1
            lines.append(f"| {rec['key']} | {r['arm']} | {r['goodput_mbps']:.1f} | "
                         f"{len(r['ack_pair_mbps'])} | {len(r['back_to_back_mbps'])} | "
                         + " | ".join(cells) + " |")
    lines += ["", "| cases | windows | " + " | ".join(
        f"{w}: trusted near / trusted off" for w in WAYS) + " |", "|---|---|---|---|"]
    for group in GROUPS:
        n = sum(v for (g, _), v in windows.items() if g == group)
        if not n:
            continue
        lines.append(f"| {group} | {n} | " + " | ".join(
            f"{tally.get((group, w, 'near'), 0)} / {tally.get((group, w, 'off'), 0)}"
            for w in WAYS) + " |")
    shares = sorted(len(r["back_to_back_mbps"]) / len(r["ack_pair_mbps"])
                    for rec in records for r in rec["runs"] if r["ack_pair_mbps"])
    if shares:
        lines += ["", f"Back-to-back pairs per window: a median {statistics.median(shares):.0%} "
                  f"of the pairs ({shares[0]:.0%}-{shares[-1]:.0%})."]
    start_m, end_m = markers(SECTION)
    return "\n".join([start_m, "## The first 5 s of 8 streams' ACKs: all pairs, and those of "
                      "segments sent back to back (make eval PRESET=back-to-back)", "",
                      f"Near: trusted within {NEAR:.0%} of the link's TCP goodput; off: "
                      "trusted further from it.", "", *lines, end_m]) + "\n"


def main() -> int:
    ap = arguments(__doc__, "default: docs/results/back-to-back.json.gz")
    args = ap.parse_args()
    path = args.results or "docs/results/back-to-back.json.gz"
    records = load(path)
    if not args.report:
        measure_missing(records, cases(), args.only, measure, lambda rs: save(path, rs))
    publish(report(records), args.write, SECTION, "Back-to-back ACK pairs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

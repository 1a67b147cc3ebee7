"""Bands of ACKs bunched on the way back: told apart by what each ACK covers?

A pair of ACKs spaced by the link reads the same rate whatever it
acknowledges: the bottleneck sent 2 segments in twice the time of one.
ACKs bunched on the way back (the testbed's delay line releases them
together; elsewhere a NIC's interrupt moderation or a reverse queue) leave
one service time apart whatever they acknowledge, so a pair acknowledging
one segment reads half the rate of one acknowledging two. The transfers'
estimator trusted such bands at 3.7-9x the link (docs/results/far-capacity.md)
and, after its mend, one at 7.5x with 11.7% of the pairs
(docs/results/back-to-back.md).

This measures, on fresh draw 12's two cases that learned far bands and 5
that learned right, 8 CUBIC streams' first 5 s beside the case's cross
traffic, unpaced and under run's start cap, 3 times each in turn, every
pair's rate with how many segments its second ACK acknowledged. The
candidate trusts a band of today's estimator only if, of the window's pairs
that acknowledge one segment, at least as many lie within a band's width
of its rate as of half its rate. `--report` re-scores the stored record.

That run held no far band, so `--far` repeats only the two far cases,
REPEATS_FAR times each way, into a record and a section of their own,
to decide the candidate by the same rule (its cost part stays the first
run's "learned right" windows).

    make eval PRESET=acked-size       # about 10 min
    make eval PRESET=acked-size-far   # about 8 min
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from tamebpf.estimate.acktrain import BAND, SEQ_MOD, CapacityEstimate, capacity_above_own
from tamebpf.estimate.capacity import DEFAULT_MSS, tcp_goodput_mbps
from tamebpf.records import AckLog
from tamebpf_eval.advise import Case, load, save
from tamebpf_eval.docsection import markers
from tamebpf_eval.far_capacity import REPEATS, WINDOW_S, logged_windows
from tamebpf_eval.resumable import arguments, measure_missing, publish
from tamebpf_eval.sticky_pacing import DRAW

NEAR = 0.10
FAR = 1.5
SECTION = "acked_size"
FAR_SECTION = "acked_size_far"
REPEATS_FAR = 8
FAR_TITLE = (f"The two far cases again, {REPEATS_FAR} times each way "
             "(make eval PRESET=acked-size-far)")
GROUPS = {"learned far above the link": ("02", "11"),
          "learned right": ("03", "04", "05", "08", "12")}


def _number(key: str) -> str:
    return key.split("-")[1]


def cases(results_dir: str = ".", far_only: bool = False) -> list[Case]:
    wanted = set(GROUPS["learned far above the link"]) if far_only else \
        {n for ns in GROUPS.values() for n in ns}
    return [Case(**rec["case"]) for rec in load(f"{results_dir}/{DRAW}")
            if _number(rec["key"]) in wanted]


def window_pairs(log: AckLog, mss: int) -> tuple[list[float], list[int], float]:
    """The first WINDOW_S of every connection's ACKs: (pair rates, the
    segments each pair's second ACK acknowledged, the connections'
    goodput in Mbit/s), pairs as estimate/acktrain.pair_rates takes them."""
    starts = [acks[0][0] for acks in log.flows.values() if acks]
    if not starts:
        return [], [], 0.0
    end = min(starts) + WINDOW_S * 1e9
    seg = mss or DEFAULT_MSS
    rates, segments, acked_total = [], [], 0
    for acks in log.flows.values():
        kept = [a for a in acks if a[0] < end]
        for (t0, a0), (t1, a1) in zip(kept, kept[1:], strict=False):
            dt, acked = t1 - t0, (a1 - a0) % SEQ_MOD
            acked_total += acked
            if dt <= 0 or acked == 0 or acked > 4 * seg:
                continue
            rates.append(acked * 8e3 / dt)
            segments.append(max(1, round(acked / seg)))
    return rates, segments, acked_total * 8e3 / (WINDOW_S * 1e9)


def measure(case: Case, repeats: int = REPEATS) -> dict[str, Any]:
    runs = []
    for arm, log, status in logged_windows(case, "as", repeats):
        rates, segments, goodput = window_pairs(log, 1448)
        runs.append({"arm": arm, "exit": status, "goodput_mbps": round(goodput, 3),
                     "ack_pair_mbps": [round(r, 2) for r in rates], "segments": segments})
    return {"case": asdict(case), "key": case.key, "runs": runs}


def one_segment_split(rates: list[float], segments: list[int], mbps: float) -> tuple[int, int]:
    """Of the pairs acknowledging one segment: (how many lie within BAND of
    `mbps`, how many within BAND of half of it)."""
    ones = [r for r, s in zip(rates, segments, strict=True) if s == 1]
    at = sum(1 for r in ones if abs(r / mbps - 1) <= BAND)
    half = sum(1 for r in ones if abs(r / (mbps / 2) - 1) <= BAND)
    return at, half


def candidate(rates: list[float], segments: list[int], own: float) -> CapacityEstimate:
    """Today's estimate, not trusted when its window's one-segment pairs
    lie at half its rate more than at it (a band of bunched ACKs)."""
    e = capacity_above_own(rates, own)
    if e.trusted and e.goodput_mbps is not None:
        at, half = one_segment_split(rates, segments, e.goodput_mbps)
        if half > at:
            return CapacityEstimate(e.goodput_mbps, e.low_mbps, e.high_mbps, e.pairs,
                                    e.considered, False,
                                    f"its one-segment pairs lie at half its rate ({half} "
                                    f"there, {at} at it): ACKs bunched on the way back")
    return e


WAYS = ("today's", "the candidate")


def _cell(e: CapacityEstimate, link: float) -> tuple[str, str]:
    if e.goodput_mbps is None:
        return "none", "none"
    x = e.goodput_mbps / link
    if not e.trusted:
        return f"{x:.2f}x (not trusted)", "untrusted"
    return f"{x:.2f}x", "near" if abs(x - 1) <= NEAR else ("far" if x > FAR else "off")


def report(records: list[dict[str, Any]], section: str = SECTION,
           title: str = "The first 5 s of 8 streams' ACKs by what each acknowledges "
                        "(make eval PRESET=acked-size)") -> str:
    lines = ["| case | arm | pairs | of one segment | at today's rate / at half of it | "
             + " | ".join(WAYS) + " |", "|---|---|---|---|---|---|---|"]
    tally: dict[tuple[str, str, str], int] = {}
    windows: dict[str, int] = {}
    for rec in records:
        link = tcp_goodput_mbps(rec["case"]["rate"], 1448, False)
        group = next((g for g, ns in GROUPS.items() if _number(rec["key"]) in ns), "other")
        for r in rec["runs"]:
            rates, segs, own = r["ack_pair_mbps"], r["segments"], r["goodput_mbps"]
            today = capacity_above_own(rates, own)
            split = (one_segment_split(rates, segs, today.goodput_mbps)
                     if today.goodput_mbps else (0, 0))
            cells = []
            for way, e in zip(WAYS, (today, candidate(rates, segs, own)), strict=True):
                cell, cls = _cell(e, link)
                cells.append(cell)
                tally[(group, way, cls)] = tally.get((group, way, cls), 0) + 1
            windows[group] = windows.get(group, 0) + 1
            lines.append(f"| {rec['key']} | {r['arm']} | {len(rates)} | "
                         f"{sum(1 for s in segs if s == 1)} | {split[0]} / {split[1]} | "
                         + " | ".join(cells) + " |")
    lines += ["", "| cases | windows | " + " | ".join(
        f"{w}: trusted near / far / other" for w in WAYS) + " |", "|---|---|---|---|"]
    for group in GROUPS:
        if group in windows:
            lines.append(f"| {group} | {windows[group]} | " + " | ".join(
                " / ".join(str(tally.get((group, w, c), 0)) for c in ("near", "far", "off"))
                for w in WAYS) + " |")
    start_m, end_m = markers(section)
    return "\n".join([start_m, f"## {title}", "",
                      f"Near: trusted within {NEAR:.0%} of the link's TCP goodput; far: "
                      f"trusted over {FAR:g}x it; other: trusted elsewhere.", "",
                      *lines, end_m]) + "\n"


def main() -> int:
    ap = arguments(__doc__, "default: docs/results/acked-size.json.gz "
                   "(with --far: acked-size-far.json.gz)")
    ap.add_argument("--far", action="store_true",
                    help=f"only the two far cases, {REPEATS_FAR} times each way")
    args = ap.parse_args()
    name = "acked-size-far" if args.far else "acked-size"
    path = args.results or f"docs/results/{name}.json.gz"
    records = load(path)
    if not args.report:
        measure_missing(records, cases(far_only=args.far), args.only,
                        lambda c: measure(c, REPEATS_FAR if args.far else REPEATS),
                        lambda rs: save(path, rs))
    if args.far:
        text = report(records, FAR_SECTION, FAR_TITLE)
        publish(text, args.write, FAR_SECTION, "Bunched ACKs by what each acknowledges")
    else:
        publish(report(records), args.write, SECTION, "Bunched ACKs by what each acknowledges")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Can one loss-based stream measure the capacity BBR advice rests on?

BBR's advice is the capacity share (model/share.py), and without a trusted
capacity there is none: BBR paces, so its probes' ACKs come spaced at its
own pacing rate (docs/results/bbr-refusal.md). Issue 44 suggested measuring
the capacity in an unpaced, loss-based stage even for BBR senders: a CUBIC
stream's slow-start bursts and ACK releases reach the bottleneck faster than
it drains, so their ACKs leave it one transmission time apart.

This runs that stage alone, as `advise` would run it after the BBR probes
(advise/probes.run_probe, 1 stream, `--congestion cubic`, 2 s and 4 s, twice
each), on the BBR-against-BBR cases of fresh draws 8 and 11 (the cases the
refusals came from), and scores its ACK spacing with the probes' estimator
and trust rule (estimate/acktrain.estimate_capacity, at or above its own
goodput) and with the transfers' (highest_band) against the link's TCP
goodput. `--report` re-scores the stored record.

    make eval PRESET=bbr-stage     # about 8 min
"""

from __future__ import annotations

import os
from dataclasses import asdict, replace
from typing import Any

from tamebpf.advise.probes import run_probe
from tamebpf.estimate.acktrain import CapacityEstimate, estimate_capacity, highest_band
from tamebpf.estimate.capacity import tcp_goodput_mbps
from tamebpf_eval.advise import Case, case_path, load, save
from tamebpf_eval.docsection import markers, write_section
from tamebpf_eval.resumable import arguments, measure_missing

DRAWS = ("docs/results/eval-fresh8.json.gz", "docs/results/eval-fresh11.json.gz")
STAGES_S = (2.0, 4.0, 2.0, 4.0)
CONGESTION = "cubic"
SECTION = "bbr_stage"


def cases(results_dir: str = ".") -> list[Case]:
    """The BBR-against-BBR cases of the draws whose BBR probes were refused."""
    out = []
    for path in DRAWS:
        for rec in load(os.path.join(results_dir, path)):
            c = rec["case"]
            if c["cc"] == "bbr" and (c.get("cross_cc") or c["cc"]) == "bbr":
                out.append(Case(**c))
    return out


def measure(case: Case) -> dict[str, Any]:
    stages = []
    with case_path(case, "bs") as (_, _, target):
        for seconds in STAGES_S:
            p = run_probe(replace(target, congestion=CONGESTION), 1, seconds)
            stages.append({"seconds": seconds, "goodput_mbps": p.steady.goodput_mbps,
                           "mss": p.steady.mss,
                           "ack_pair_mbps": [round(r, 2) for r in p.ack_pair_mbps]})
    return {"case": asdict(case), "key": case.key, "stages": stages}


def _cell(e: CapacityEstimate, link: float) -> str:
    if e.goodput_mbps is None:
        return f"none ({e.reason})"
    return (f"{e.goodput_mbps / link - 1:+.0%} of the link, {e.pairs} of {e.considered} pairs, "
            + ("trusted" if e.trusted else "not trusted"))


def report(records: list[dict[str, Any]]) -> str:
    lines = ["| case | stage | its goodput Mbit/s | ACK pairs | probes' estimator | "
             "transfers' estimator |", "|---|---|---|---|---|---|"]
    trusted = total = 0
    for rec in records:
        c = rec["case"]
        link = tcp_goodput_mbps(c["rate"], 1448, False)
        for s in rec["stages"]:
            rates, own = s["ack_pair_mbps"], s["goodput_mbps"]
            e, h = estimate_capacity(rates, own), highest_band(rates, own)
            total += 1
            trusted += e.trusted and e.goodput_mbps is not None \
                and abs(e.goodput_mbps / link - 1) <= 0.10
            lines.append(f"| {rec['key']} | {s['seconds']:g} s | {own:.2f} | {len(rates)} | "
                         f"{_cell(e, link)} | {_cell(h, link)} |")
    lines += ["", f"Trusted and within 10% of the link (probes' estimator): {trusted} of {total} "
              "stages."]
    start, end = markers(SECTION)
    return "\n".join([start, "## One CUBIC stream's ACK spacing beside BBR cross traffic "
                      "(make eval PRESET=bbr-stage)", "", *lines, end]) + "\n"


def main() -> int:
    ap = arguments(__doc__, "default: docs/results/bbr-stage.json.gz")
    args = ap.parse_args()
    path = args.results or "docs/results/bbr-stage.json.gz"
    records = load(path)
    if not args.report:
        measure_missing(records, cases(), args.only, measure, lambda rs: save(path, rs))
    text = report(records)
    print(text, end="")
    if args.write:
        write_section(args.write, SECTION, text, "A loss-based stage for BBR's capacity")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

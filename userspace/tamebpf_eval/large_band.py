"""Fresh draw 4's decision rule 3 (docs/results/fresh4-decision-rules.md):
the capacity estimates that only the large-band clause trusted (a band of
400 pairs or more, less than a quarter of the pairs considered), against
the link's TCP goodput. The clause is off in the advisor since (acktrain.
LARGE_BAND is None); this replays the estimates as the draw's advisor made
them, with the clause on, from the ACK pairs stored with each probe.

    python -m tamebpf_eval.large_band [--write docs/results/fresh4-rule3.md]
"""

from __future__ import annotations

import json
import os

from tamebpf.advise.estimate import acktrain
from tamebpf.advise.estimate.capacity import tcp_goodput_mbps
from tamebpf_eval.docsection import replay_main

RESULTS = os.path.join("docs", "results", "eval-fresh4.json")
SECTION = "fresh4_rule3"
MEASURED_BAND = 400  # LARGE_BAND in the code fresh draw 4 measured (d7ae9d9)
OFF = 0.10  # rule 3: more than 10% off


def rows(path: str) -> tuple[list[str], int, int]:
    """The table, the cases read more than OFF above the link, and those
    read more than OFF off either way (large-band estimates only)."""
    with open(path) as f:
        records = json.load(f)["records"]
    before = acktrain.LARGE_BAND
    acktrain.LARGE_BAND = MEASURED_BAND
    out = ["| case | plan | band | of pairs | share | estimate Mbit/s | link TCP goodput | error |",
           "|---|---|---|---|---|---|---|---|"]
    above = off = 0
    try:
        for r in records:
            for plan in ("default", "quick"):
                probes = (r["advice"].get(plan) or {}).get("probes") or []
                rates = [x for p in probes for x in p.get("ack_pair_mbps") or []]
                if not rates:
                    continue
                e = acktrain.estimate_capacity(
                    rates, max(p["steady"]["goodput_mbps"] for p in probes))
                if not e.trusted or e.pairs >= acktrain.MIN_SHARE * e.considered \
                        or e.goodput_mbps is None:
                    continue  # not one only the clause trusted
                link = tcp_goodput_mbps(r["case"]["rate"], None, False)
                err = e.goodput_mbps / link - 1
                above += err > OFF
                off += abs(err) > OFF
                out.append(f"| {r['key']} | {plan} | {e.pairs} | {e.considered} | "
                           f"{e.pairs / e.considered:.2f} | {e.goodput_mbps:.1f} | {link:.1f} | "
                           f"{err:+.3f} |")
    finally:
        acktrain.LARGE_BAND = before
    return out, above, off


def report(path: str) -> str:
    table, above, off = rows(path)
    with open(path) as f:
        measured = len(json.load(f)["records"])
    verdict = ("removed" if above >= 1 or off >= 2 else "kept")
    start, end = f"<!-- {SECTION}:start -->", f"<!-- {SECTION}:end -->"
    return "\n".join([
        start, "## Rule 3: estimates only the large-band clause trusted", "",
        f"Replayed from the ACK pairs of {measured} measured cases "
        f"(`python -m tamebpf_eval.large_band`), with the clause on as the draw's "
        f"advisor had it (band >= {MEASURED_BAND} pairs, share < "
        f"{acktrain.MIN_SHARE:.0%}). Link TCP goodput: the link rate less headers "
        "of full-sized segments.", "", *table, "",
        f"More than {OFF:.0%} above the link: {above}; more than {OFF:.0%} off either "
        f"way: {off}. Rule 3 says: the clause is **{verdict}**"
        + (" (a later case cannot undo it)." if verdict == "removed" else "."),
        end, ""])


if __name__ == "__main__":
    raise SystemExit(replay_main(__doc__ or "", report, SECTION,
                                 "Fresh draw 4: decision rule 3", RESULTS))

"""When to trust the ACK-spacing capacity estimate: the large-band rule
(advise/estimate/acktrain.LARGE_BAND) on the probes of the earlier draws.

The share rule (the link-rate band must hold MIN_SHARE of the pairs above
the floor) refused most 15 s probes among many cross flows although their
estimate was right: a long probe spreads most of its pairs below the link
rate while its peak grows. This re-reads every capacity estimate already
measured (no kernel, no testbed) and reports
  1. the estimates the share rule alone refuses, by the size of their band,
     with their error against the link's TCP goodput;
  2. the stop rules of docs/results/settled-design.md scored with the old
     rule and with the large-band rule, on the same probes.
The draws it reads were all measured before the rule was chosen; whether
it holds is measured on a later fresh draw.

    make eval PRESET=trust    # -> docs/results/settled-design.md
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterator
from typing import Any

from tamebpf.advise.estimate import acktrain
from tamebpf.advise.estimate.capacity import tcp_goodput_mbps
from tamebpf_eval import settled
from tamebpf_eval.docsection import replay_main
from tamebpf_eval.score import probe_from_dict

SECTION = "trust_large_band"
# The band this eval chose (docs/results/settled-design.md); fresh draw 4
# then removed the clause from the advisor (acktrain.LARGE_BAND is None).
CHOSEN = 400
# The draws measured before the rule was chosen (issue 29's fresh draws
# after it are not read here).
DRAWS = ("eval-fresh.json", "eval-fresh-staged.json", "eval-fresh-delivered.json",
         "eval-fresh-long.json", "eval-fresh-settled.json", "eval-fresh2-long.json",
         "eval-fresh2-settled.json", "settled-design.json.gz")
BANDS = (20, 100, 200, 300, 400, 800)
RULES = ("t2", "t15", "k4", "k4-floor100")


def _records(path: str) -> list[dict[str, Any]]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        data = json.load(f)
    records: list[dict[str, Any]] = data["records"] if isinstance(data, dict) else data
    return records


def estimates(results: str) -> Iterator[tuple[str, float, acktrain.CapacityEstimate]]:
    """(case, error against the link's TCP goodput, estimate) of every
    distinct pair of probes (1 and 10 streams) in the earlier draws: the
    capacity advise computes from them (advise/estimate/advice.build)."""
    seen = set()
    for name in DRAWS:
        path = os.path.join(results, name)
        if not os.path.exists(path):
            continue
        for rec in _records(path):
            for plan in rec.get("probes", {}).values():
                probes = [p for p in map(probe_from_dict, plan) if p.streams in (1, 10)]
                rates = [r for p in probes for r in p.ack_pair_mbps]
                key = (rec["case"]["name"], len(rates), round(sum(rates), 1))
                if not rates or key in seen:
                    continue
                seen.add(key)
                e = acktrain.estimate_capacity(rates, max(p.steady.goodput_mbps for p in probes))
                if e.goodput_mbps is None:
                    continue
                s = probes[-1].steady
                truth = tcp_goodput_mbps(rec["case"]["rate"], s.mss, s.ipv6)
                yield rec["case"]["name"], e.goodput_mbps / truth - 1, e


def refused_by_share(results: str) -> list[str]:
    found = [(case, err, e) for case, err, e in estimates(results)
             if e.pairs >= acktrain.MIN_PAIRS and e.pairs < acktrain.MIN_SHARE * e.considered]
    out = [f"{len(found)} distinct estimates have at least {acktrain.MIN_PAIRS} pairs in their "
           f"band but less than {acktrain.MIN_SHARE:.0%} of the pairs considered (the share "
           "rule alone refuses them).", "",
           "| band of at least | estimates | within 10% of the link | off by more |",
           "|---|---|---|---|"]
    for least in BANDS:
        group = [(c, err) for c, err, e in found if e.pairs >= least]
        off: dict[str, list[float]] = {}
        for c, err in group:
            if abs(err) > 0.10:
                off.setdefault(c, []).append(err)
        said = "; ".join(f"{c}: {len(v)}, {min(v):+.1%} to {max(v):+.1%}" if len(v) > 1
                         else f"{c}: {v[0]:+.1%}" for c, v in off.items())
        out.append(f"| {least} pairs | {len(group)} | "
                   f"{len(group) - sum(map(len, off.values()))} | {said or 'none'} |")
    return out


def stop_rules(results: str) -> list[str]:
    records = settled.load(os.path.join(results, "settled-design.json.gz"))
    chosen, before = CHOSEN, acktrain.LARGE_BAND
    out = ["| stop rule | trust | cases | thru err mean | median | >= 95% of best | over by "
           "> 0.05 | probing median / worst s | median s, RTT <= 30 ms |",
           "|---|---|---|---|---|---|---|---|---|"]
    try:
        for label, band in (("share only", 1 << 30), (f"large band ({chosen})", chosen)):
            acktrain.LARGE_BAND = band
            rows = settled.report(records).splitlines()
            for rule in RULES:
                row = next(r for r in rows if r.startswith(f"| {rule} |"))
                out.append(f"| {rule} | {label} |" + row.split("|", 2)[2])
    finally:
        acktrain.LARGE_BAND = before
    return out


def report(results: str) -> str:
    start, end = f"<!-- {SECTION}:start -->", f"<!-- {SECTION}:end -->"
    lines = [start, "## Trusting a large peak (make eval-trust)", "",
             "Every capacity estimate of the earlier draws, re-read: the ones the share rule "
             "alone refuses, by the size of their link-rate band, and their error against "
             "the link's TCP goodput.", "", *refused_by_share(results), "",
             f"The large-band rule trusts a band of {CHOSEN} pairs or more "
             "whatever its share. The stop rules above, scored on the same probes with each "
             "trust rule (impact limit 0.5, as above; probing times are the recorded stops, "
             "so a last probe that would now settle earlier is counted at its old length):",
             "", *stop_rules(results), end]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(replay_main(__doc__ or "", report, SECTION, "Choosing the stop rule",
                                 "docs/results"))

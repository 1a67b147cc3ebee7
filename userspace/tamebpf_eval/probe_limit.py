"""Why a settled 10-stream probe runs to its time limit: the capacity its
own ACK pairs give (advise/estimate/acktrain), against how it ended.

The stop rule ends the probe whose ACKs estimate the capacity only once
that estimate is trusted and tight (advise/settled.Settled). This re-reads
the 10-stream probes of loss-based cases stored by fresh draws (no kernel,
no testbed) and counts, by the path's RTT, those that ended early and
those that ran to the limit, each by whether its own pairs gave a trusted
estimate, with the share of the pairs in the link-rate band
(acktrain.MIN_SHARE is the least share trusted). The draws it reads were
measured before this replay was written; a stop rule changed on it is
measured on a later fresh draw.

    make eval PRESET=probe-limit    # -> docs/results/probe-limit.md
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from tamebpf.advise.estimate import acktrain
from tamebpf.advise.record import TIME_LIMIT
from tamebpf_eval.advise import load
from tamebpf_eval.docsection import replay_main
from tamebpf_eval.score import probe_from_dict

SECTION = "probe_limit"
DRAWS = ("eval-fresh3.json", "eval-fresh4.json", "eval-fresh5.json")
SHORT_RTT_MS = 30.0  # issue 29's short paths
STREAMS = 10


def probes(results: str) -> Iterator[tuple[float, bool, float, acktrain.CapacityEstimate]]:
    """(RTT ms, ran to the limit, median epochs a stream, its own capacity estimate) of every
    settled 10-stream probe of a loss-based sender (--quick's are fixed)."""
    for name in DRAWS:
        for rec in load(os.path.join(results, name)):  # a missing draw reads as none
            if rec["case"]["cc"] == "bbr":
                continue
            for plan, advice in rec["advice"].items():
                if plan == "quick" or not advice:
                    continue
                for d in advice.get("probes") or []:
                    p = probe_from_dict(d)
                    if p.streams != STREAMS or p.stopped is None:
                        continue
                    e = acktrain.estimate_capacity(p.ack_pair_mbps, p.steady.goodput_mbps)
                    yield (rec["case"]["rtt"], p.stopped == TIME_LIMIT, p.steady.median_epochs,
                           e)


def _share(e: acktrain.CapacityEstimate) -> float:
    return e.pairs / e.considered if e.considered else 0.0


def rows(results: str) -> list[str]:
    groups: dict[tuple[str, str, bool], list[tuple[float, float]]] = {}
    for rtt, limit, epochs, e in probes(results):
        paths = f"RTT {'<=' if rtt <= SHORT_RTT_MS else '>'} {SHORT_RTT_MS:g} ms"
        ended = "ran to the limit" if limit else "ended early"
        groups.setdefault((paths, ended, e.trusted), []).append((_share(e), epochs))
    out = ["| paths | 10-stream probe | its own capacity | probes | share of pairs in the band "
           "| congestion epochs a stream (median of its streams) |",
           "|---|---|---|---|---|---|"]
    for (paths, ended, trusted), got in sorted(groups.items()):
        shares, stream_epochs = [s for s, _ in got], [e for _, e in got]
        out.append(f"| {paths} | {ended} | {'trusted' if trusted else 'not trusted'} | "
                   f"{len(got)} | {min(shares):.2f}-{max(shares):.2f} | "
                   f"{min(stream_epochs):g}-{max(stream_epochs):g} |")
    return out


def report(results: str) -> str:
    start, end = f"<!-- {SECTION}:start -->", f"<!-- {SECTION}:end -->"
    return "\n".join([
        start, "## The 10-stream probes of fresh draws 3-5 (make eval-probe-limit)", "",
        "Each settled 10-stream probe of a loss-based case, every plan that ran one "
        "(a case counts once a plan), by the capacity estimate of its own ACK pairs "
        f"(trusted: at least {acktrain.MIN_PAIRS} pairs in the band and "
        f"{acktrain.MIN_SHARE:.0%} of those above the floor).", "",
        *rows(results), end, ""])


if __name__ == "__main__":
    raise SystemExit(replay_main(__doc__ or "", report, SECTION,
                                 "Why settled probes run to their limit",
                                 os.path.join("docs", "results")))

"""The transfers' ACK-spacing estimator on stored testbed windows.

docs/results/ack-windows.json.gz holds the ACK pair rates (at or above
each window's own goodput) of the windows that tests/integration/
test_scout_acks.py's shared-path test and test_run.py's held run opened on
the testbed's 20 Mbit/s path (the runs' first seconds and their scouts),
8 runs of each before estimate/acktrain.highest_band climbed past bands it
cannot trust and judged a band's share again (set "design": what that
change was made on) and 8 of each after it (set "check"). Per set: how
many windows each estimator trusts, and how far the trusted ones lie from
the link. Re-scores only:

    make eval PRESET=ack-windows
"""

from __future__ import annotations

from typing import Any

from tamebpf.estimate.acktrain import CapacityEstimate, estimate_capacity, highest_band
from tamebpf_eval.docsection import replay_main
from tamebpf_eval.records import read_json

RESULTS = "docs/results/ack-windows.json.gz"
ESTIMATORS = (("the densest band (the probes')", estimate_capacity),
              ("the transfers' (highest_band)", highest_band))


def _cell(got: list[CapacityEstimate], link: float) -> str:
    trusted = [e.goodput_mbps for e in got if e.trusted and e.goodput_mbps is not None]
    if not trusted:
        return f"0 of {len(got)}"
    return (f"{len(trusted)} of {len(got)}, {min(trusted):.2f}-{max(trusted):.2f} Mbit/s "
            f"({min(trusted) / link - 1:+.1%} to {max(trusted) / link - 1:+.1%})")


def report(results: str = RESULTS) -> str:
    stored: dict[str, Any] = read_json(results)
    link = stored["link_goodput_mbps"]
    lines = ["<!-- ack_windows:start -->",
             "## The transfers' estimator on stored windows (make eval PRESET=ack-windows)",
             "", f"{stored['path']}; the link carries {link:.2f} Mbit/s of TCP goodput.", "",
             "| windows | " + " | ".join(f"trusted by {n}" for n, _ in ESTIMATORS) + " |",
             "|---|" + "---|" * len(ESTIMATORS)]
    for name, about in stored["sets"].items():
        ws = [w for w in stored["windows"] if w["set"] == name]
        cells = [_cell([f(w["pair_mbps"], w["floor_mbps"]) for w in ws], link)
                 for _, f in ESTIMATORS]
        lines.append(f"| {name}: {about} | " + " | ".join(cells) + " |")
    return "\n".join(lines + ["<!-- ack_windows:end -->"]) + "\n"


if __name__ == "__main__":
    raise SystemExit(replay_main(__doc__ or "", report, "ack_windows",
                                 "The transfers' ACK-spacing estimator", RESULTS))

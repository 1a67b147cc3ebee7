"""How far one eval run's ground truth moved from another's, case by case.

  .venv/bin/python -m tamebpf_eval.truth_compare docs/results/eval.json docs/results/eval-run6.json

For each case in both files: the median goodput of each n (ours, and the
cross traffic's alone) in the old and the new run, and new / old - 1. Used
to show what the testbed's bottleneck change did to the ground truth that
the accuracy tables stand on. Prints a Markdown table.
"""

from __future__ import annotations

import json
import statistics
import sys
from typing import Any


def records(path: str) -> dict[str, dict[str, Any]]:
    with open(path) as f:
        return {r["key"]: r for r in json.load(f)["records"]}


def medians(rec: dict[str, Any]) -> dict[str, float]:
    """n -> median of our goodput over the rounds; 'cross' -> cross alone."""
    out = {n: statistics.median(p["mbit"]) for n, p in rec["truth"].items() if p["mbit"]}
    if rec.get("cross_alone"):
        out["cross"] = statistics.median(rec["cross_alone"])
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    old, new = records(argv[0]), records(argv[1])
    cols = ["1", "2", "4", "8", "16", "30", "cross"]
    print("| case | " + " | ".join(f"n={c}" if c != "cross" else "cross alone" for c in cols)
          + " |")
    print("|---" * (len(cols) + 1) + "|")
    shifts = []
    for key in sorted(old.keys() & new.keys()):
        a, b = medians(old[key]), medians(new[key])
        cells = []
        for c in cols:
            if c in a and c in b and a[c] > 0:
                shift = b[c] / a[c] - 1
                shifts.append(abs(shift))
                cells.append(f"{a[c]:.1f} -> {b[c]:.1f} ({100 * shift:+.0f}%)")
            else:
                cells.append("-")
        print(f"| {key} | " + " | ".join(cells) + " |")
    if shifts:
        shifts.sort()
        med = statistics.median(shifts)
        print(f"\n{len(shifts)} points; |new/old - 1|: median {100 * med:.1f}%,"
              f" 90th percentile {100 * shifts[int(0.9 * (len(shifts) - 1))]:.1f}%, "
              f"max {100 * shifts[-1]:.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Do two runs of the same sweep agree? (issue 4: medians within 5% per n)

    python -m tamebpf_testbed.compare A.json B.json [--tolerance 0.05]
Prints one line per (n, m) and exits 1 if any median differs by more.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def medians(path: Path) -> dict[tuple[int, int], float]:
    doc: dict[str, Any] = json.loads(path.read_text())
    return {(r["n"], r["m"]): float(r["mbit_median"]) for r in doc["summary"]}


def compare(a: dict[tuple[int, int], float], b: dict[tuple[int, int], float],
            tolerance: float) -> list[tuple[int, int, float, float, float, bool]]:
    rows = []
    for key in sorted(set(a) & set(b), key=lambda k: (k[1], k[0])):
        diff = abs(a[key] - b[key]) / min(a[key], b[key])
        rows.append((key[0], key[1], a[key], b[key], diff, diff <= tolerance))
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tamebpf_testbed.compare")
    p.add_argument("a", type=Path)
    p.add_argument("b", type=Path)
    p.add_argument("--tolerance", type=float, default=0.05)
    args = p.parse_args(argv)
    rows = compare(medians(args.a), medians(args.b), args.tolerance)
    print("| n | m | median A (Mbit/s) | median B (Mbit/s) | difference | within |")
    print("|---|---|---|---|---|---|")
    for n, m, x, y, d, ok in rows:
        print(f"| {n} | {m} | {x:.2f} | {y:.2f} | {100 * d:.1f}% | {'yes' if ok else 'NO'} |")
    return 0 if rows and all(r[5] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

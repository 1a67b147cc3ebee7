"""Plot a sweep (scripts/sweep output JSON) as in the paper's Figs. 3-8:
throughput vs number of parallel streams, with the cross traffic's throughput
(with and without our streams) on the same axes.

    .venv/bin/python -m tamebpf_eval.plot_sweep SWEEP.json [SWEEP2.json ...] --out PNG
Several files (e.g. two runs of the same sweep) are drawn on the same axes.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def _series(runs: list[dict[str, Any]], field: str, m: int) -> tuple[list[int], list[float],
                                                                     list[float], list[float]]:
    ns = sorted({r["n"] for r in runs if r["m"] == m and r[field] is not None})
    med, lo, hi = [], [], []
    for n in ns:
        vals = [r[field] for r in runs if r["n"] == n and r["m"] == m and r[field] is not None]
        med.append(statistics.median(vals))
        lo.append(min(vals))
        hi.append(max(vals))
    return ns, med, lo, hi


def _title(doc: dict[str, Any]) -> str:
    c, p = doc["testbed"]["config"], doc["plan"]
    name = doc["meta"].get("scenario") or doc["testbed"]["name"]
    win = f", {p['window_kb']} KB buffers" if p.get("window_kb") else ""
    return (f"{name}: {c['rate_mbit']:g} Mbit/s, RTT {c['rtt_ms']:g} ms, {c['queue_pkts']} pkt "
            f"{c['aqm']}, {p['cc']}{win}, {p['repeats']} repeats x {p['duration_s']:g} s")


def plot(paths: list[Path], out: Path, title: str | None) -> None:
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    cap = None
    for i, path in enumerate(paths):
        doc = json.loads(path.read_text())
        runs = doc["runs"]
        cap = doc["testbed"]["goodput_mbit"]
        tag = f" ({path.stem})" if len(paths) > 1 else ""
        for m in sorted({r["m"] for r in runs}):
            mt = f", m={m} cross" if m else ""
            style: dict[str, Any] = {"capsize": 3, "marker": "o",
                                     "linestyle": "-" if i == 0 else "--"}
            ns, med, lo, hi = _series(runs, "mbit", m)
            ax.errorbar(ns, med, yerr=[[a - b for a, b in zip(med, lo, strict=True)],
                                       [b - a for a, b in zip(med, hi, strict=True)]],
                        label=f"parallel TCP, aggregate{mt}{tag}", **style)
            if m:
                ns, med, lo, hi = _series(runs, "cross_with_mbit", m)
                ax.errorbar(ns, med, yerr=[[a - b for a, b in zip(med, lo, strict=True)],
                                           [b - a for a, b in zip(med, hi, strict=True)]],
                            label=f"cross traffic with ours{mt}{tag}",
                            **{**style, "marker": "s"})
                ns, med, _, _ = _series(runs, "cross_alone_mbit", m)
                ax.plot(ns, med, ":", color="grey", label=f"cross traffic alone{mt}{tag}")
    if cap:
        ax.axhline(cap, color="black", linewidth=0.8, label=f"R x 1448/1514 = {cap:.2f}")
    ax.set_xlabel("number of parallel TCP streams n")
    ax.set_ylabel("goodput (Mbit/s)")
    ax.set_ylim(0, (cap or 0) * 1.12 or None)
    ax.set_title(title or _title(json.loads(paths[0].read_text())), fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sweeps", nargs="+", type=Path)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--title")
    a = p.parse_args()
    plot(a.sweeps, a.out, a.title)


if __name__ == "__main__":
    main()

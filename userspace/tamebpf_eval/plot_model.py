"""Plot the model's throughput and impact curves for a few probe pairs.

    .venv/bin/python -m tamebpf_eval.plot_model [--out docs/img/model-curves.png]

Writes the figure used in docs/model.md: for each pair of probes (1 and 10
streams), the predicted aggregate throughput (Eq 10) and impact on cross
traffic relative to one stream (Eq 18) for 1..32 streams, the probes, and the
advice under the default limits (max impact 10%, gain threshold 1%).
"""

from __future__ import annotations

import argparse
import os

import matplotlib

matplotlib.use("Agg")  # no display needed; set before pyplot is imported
import matplotlib.pyplot as plt

from tamebpf.model import Probe, Settings, fit_throughput, predict

# (label, 10-stream throughput in Mbit/s); every pair starts at 1 stream, 50 Mbit/s.
CASES = [
    ("heavy congestion: 10 streams -> 80", 80.0),
    ("worked example: 10 streams -> 200", 200.0),
    ("light congestion: 10 streams -> 400", 400.0),
    ("no congestion seen: 10 streams -> 600", 600.0),
]
DEFAULT_OUT = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "img", "model-curves.png")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT, help="PNG to write (default %(default)s)")
    args = ap.parse_args()

    settings = Settings()
    fig, (ax_bw, ax_imp) = plt.subplots(1, 2, figsize=(11, 4.4), constrained_layout=True)
    for (label, bw10), colour in zip(CASES, ("C3", "C0", "C2", "C7"), strict=True):
        probes = [Probe(1, 50.0), Probe(10, bw10)]
        pred = predict(fit_throughput(probes), settings)
        ns = [c.streams for c in pred.curve]
        bws = [c.throughput for c in pred.curve]
        limit = pred.fit.evidence_limit or ns[-1]
        # Beyond the evidence limit (no congestion seen) the line is an
        # extrapolation the advice does not use: draw it dashed.
        ax_bw.plot(ns[:limit], bws[:limit], color=colour, label=label)
        ax_bw.plot(ns[limit - 1 :], bws[limit - 1 :], color=colour, linestyle=":")
        ax_imp.plot(ns, [100 * c.impact for c in pred.curve], color=colour, label=label)
        ax_bw.plot(
            [p.streams for p in probes],
            [p.throughput for p in probes],
            "o",
            color=colour,
            markerfacecolor="white",
        )
        adv = pred.advice
        ax_bw.plot(adv.num_flows, adv.max_nondisruptive_thru, "*", color=colour, markersize=14)
        ax_imp.plot(adv.num_flows, 100 * adv.cross_traffic_impact, "*", color=colour, markersize=14)
    ax_imp.axhline(100 * settings.max_impact, color="k", linestyle="--", linewidth=0.8)
    ax_imp.text(
        32, 100 * settings.max_impact + 1.5, "max impact 10% (default)", ha="right", fontsize=8
    )
    ax_bw.set(
        xlabel="parallel streams n",
        ylabel="predicted aggregate throughput (Mbit/s)",
        title="Throughput, Eq 10 (o probe, * advice, dotted: beyond evidence)",
        xlim=(0, 33),
        ylim=(0, 800),
    )
    ax_imp.set(
        xlabel="parallel streams n",
        ylabel="impact on each cross-traffic flow (%)",
        title="Impact relative to 1 stream, Eq 18",
        xlim=(0, 33),
        ylim=(0, 100),
    )
    ax_bw.legend(fontsize=8, loc="upper left")
    for ax in (ax_bw, ax_imp):
        ax.grid(alpha=0.3)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

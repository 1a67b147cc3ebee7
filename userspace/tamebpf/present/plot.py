"""`--plot FILE`: predicted throughput and impact, the probes and the advice."""

from __future__ import annotations

import contextlib
import importlib.util
import io
from collections.abc import Iterator
from typing import TYPE_CHECKING

from tamebpf.common.errors import UsageError
from tamebpf.common.outfile import OutputFile
from tamebpf.common.units import percent
from tamebpf.common.words import count

if TYPE_CHECKING:
    from tamebpf.estimate.record import AdviseResult

FORMATS = (".png", ".svg")


def check_path(path: str) -> None:
    """Before any probing: a plot that cannot be written fails at once."""
    if not path.lower().endswith(FORMATS):
        raise UsageError(f"--plot {path}: the file name must end in .png or .svg")
    if importlib.util.find_spec("matplotlib") is None:
        raise UsageError("--plot needs matplotlib, which is not installed",
                         "pip install 'tamebpf[plot]' (or apt install python3-matplotlib)")


@contextlib.contextmanager
def plot_file(path: str | None) -> Iterator[OutputFile | None]:
    """The plot's file (None without --plot), opened before any probing and
    removed again if the block fails before a plot is written into it."""
    if path is None:
        yield None
        return
    check_path(path)
    with OutputFile(path, "--plot") as out:
        yield out


def write_plot(result: AdviseResult, out: OutputFile) -> None:
    # Imported here: matplotlib takes most of a second to load, and only
    # --plot needs it.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    pred = result.prediction
    ns = [c.streams for c in pred.curve]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot(ns, [c.throughput for c in pred.curve], color="tab:blue",
            label=f"predicted throughput ({result.used} fit)")
    cap = result.capacity
    if cap is not None and result.used == "capacity":
        # Given (--capacity: the link rate), or estimated (its TCP goodput).
        label = f"--capacity {cap.link_mbps:g} Mbit/s (TCP goodput)" \
            if cap.link_mbps is not None else \
            f"capacity {cap.goodput_mbps:.1f} Mbit/s of TCP goodput ({cap.source})"
        ax.axhline(cap.goodput_mbps, color="grey", linestyle="--", linewidth=0.8, label=label)
    if result.loss_prediction is not None:
        ax.plot(ns, [c.throughput for c in result.loss_prediction.curve], color="tab:blue",
                linestyle=":", label="predicted throughput (loss-RTT fit)")
    ax.scatter([p.streams for p in result.probes],
               [p.steady.goodput_mbps for p in result.probes],
               color="black", zorder=3, label="probes (kernel goodput)")
    a = pred.advice
    ax.scatter([a.num_flows], [a.max_nondisruptive_thru], marker="*", s=200, color="tab:green",
               zorder=4, label=f"advice: {count(a.num_flows, 'stream')}")
    ax.set_xlabel("parallel streams")
    ax.set_ylabel("aggregate throughput (Mbit/s)")
    ax.set_ylim(bottom=0)
    ax2 = ax.twinx()
    ax2.plot(ns, [percent(c.impact) for c in pred.curve], color="tab:red",
             label="impact on cross traffic")
    ax2.axhline(percent(pred.settings.max_impact), color="tab:red", linestyle="--", linewidth=0.8,
                label=f"max impact {pred.settings.max_impact:.0%}")
    ax2.set_ylabel("impact on cross traffic (%)")
    ax2.set_ylim(0, 100)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="center right", fontsize=8)
    ax.set_title(f"tamebpf advise {result.target.host}:{result.target.port}")
    fig.tight_layout()
    image = io.BytesIO()
    fig.savefig(image, format=out.path.lower().rsplit(".", 1)[1])
    plt.close(fig)
    out.replace(image.getvalue())

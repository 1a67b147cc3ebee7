"""The impact range at the advised count, on the records the spread table
was fitted on: how often it holds the measured impact, before and after
widening it by the round-to-round spread.

Fresh draw 8's rule 4 (docs/results/fresh8-decision-rules.md): the range of
the probes' own noise (model/confidence.py, the delta method) held the
measured impact in 10 of 24 cases, so the range is widened by the same
spread as the count range (estimate/advice.impact_confidence, with the
spread of estimate/spread.py's table). The score here is in-sample: the
draws are those the table was fitted on (range_design.py's runs, each
rebuilt from its stored probes by today's advisor), and the table was
fitted on the count range, not on this. The measured impact is the median
of the case's truth rounds at the advised count, as by_class.py's impact
check takes it; a run whose rebuilt count the truth did not measure is left
out. Where the widened range holds under the target in a class, the
coverage of other spreads on the grid is printed, for a next draw's rule to
name one; the product keeps the count range's spread.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Protocol

from tamebpf.estimate.advice import impact_confidence
from tamebpf.estimate.record import AdviseResult
from tamebpf.model import Settings
from tamebpf.model.confidence import ImpactRange
from tamebpf_eval.by_class import RANGE_COVERAGE, impact_holds

# The spreads whose coverage is shown beside the smallest reaching the target.
SHOWN = (0.25, 0.5, 0.75, 1.0)


class ImpactRun(Protocol):
    """A rebuilt run: its advice, the impact limit it was made for, the
    measured impact at its advised count (None: not measured there)."""

    result: AdviseResult
    limit: float
    impact: float | None


def advised_range(run: ImpactRun, spread: float | None, clip: bool = True) -> ImpactRange:
    """The impact range at the advised count; spread None: the path's own
    (as the advice gives it), 0: the probes' noise alone; clip: moves stop
    at the capacity (estimate/advice.CLIP_AT_CAPACITY) rather than drop."""
    n = run.result.prediction.advice.num_flows
    ranges = impact_confidence(run.result, Settings(max_impact=run.limit), spread=spread,
                               clip=clip)
    return next(r for r in ranges if r.streams == n)


def scored(runs: Sequence[ImpactRun], spread: float | None,
           clip: bool = True) -> list[tuple[bool, float]]:
    """(the range holds the measured impact, its width) per run measured at
    its advised count."""
    out = []
    for run in runs:
        if run.impact is not None:
            r = advised_range(run, spread, clip)
            out.append((impact_holds((r.low, r.high), run.impact), r.high - r.low))
    return out


def reaching(runs: Sequence[ImpactRun], grid: Sequence[float]) -> float | None:
    """The smallest spread of the grid whose range holds the target share
    (None: none does)."""
    for s in grid:
        got = scored(runs, s)
        if got and sum(h for h, _ in got) >= RANGE_COVERAGE * len(got):
            return s
    return None


def _holds(got: list[tuple[bool, float]]) -> str:
    if not got:
        return "-"
    held = sum(h for h, _ in got)
    return f"{held}/{len(got)} ({held / len(got):.0%})"


def _cells(got: list[tuple[bool, float]]) -> str:
    """holds | median width, as two cells."""
    if not got:
        return "- | - |"
    return f"{_holds(got)} | {statistics.median(w for _, w in got):.3f} |"


def rows(groups: Sequence[tuple[str, float | None, Sequence[ImpactRun]]],
         grid: Sequence[float]) -> list[str]:
    """groups: (label, the class's spread or None for a mix, its runs)."""
    out = ["### The impact range at the advised count (in-sample)", "",
           f"Target (issue 44): the range holds the measured impact (the median of the truth "
           f"rounds at the advised count) in >= {RANGE_COVERAGE:.0%} of cases. Width: high - "
           "low, in impact. In-sample: these are the runs the spread table was fitted on (on "
           "the count range, not on this); not a fresh result.", "",
           "| class | s | runs scored | s = 0 (delta method; BBR: between the probed counts): "
           "holds | median width | widened by s, moves above the capacity dropped: holds | "
           "median width | widened by s, moves stopped at the capacity: holds | median width |",
           "|---|---|---|---|---|---|---|---|---|"]
    under = []
    for label, s, runs in groups:
        before, dropped, after = scored(runs, 0.0), scored(runs, None, False), scored(runs, None)
        out.append(f"| {label} | {'' if s is None else f'{s:.3f}'} | {len(after)} | "
                   + _cells(before) + " " + _cells(dropped) + " " + _cells(after))
        if s is not None and after and sum(h for h, _ in after) < RANGE_COVERAGE * len(after):
            under.append((label, runs))
    left = sum(run.impact is None for _, s, runs in groups if s is not None for run in runs)
    out += ["", f"Left out: {left} runs whose rebuilt advised count the truth did not measure."]
    if under:
        out += ["", f"Classes where the widened range holds under {RANGE_COVERAGE:.0%}: the "
                "smallest s of the grid that would reach it, and the coverage at other s (for "
                "a next draw's rule to name; the product keeps the count range's s).", "",
                "| class | smallest s reaching the target | holds | median width | "
                + " | ".join(f"holds at s = {s:g}" for s in SHOWN) + " |",
                "|---|---|---|---|" + "---|" * len(SHOWN)]
        for label, runs in under:
            s = reaching(runs, grid)
            at = "none on the grid | - | - |" if s is None else f"{s:.3f} | " + _cells(
                scored(runs, s))
            shown = " | ".join(_holds(scored(runs, x)) for x in SHOWN)
            out.append(f"| {label} | {at} {shown} |")
    return out

"""The runs the count range's table (estimate/spread.py's SPREAD) was fitted
on, rebuilt from their stored probes by today's advisor, and how a range is
scored against their truth rounds.

docs/results/count-range-draws.json.xz holds each run of today's default on
fresh draws 3-8 and 11 (draw 7's 3 repeats too) whose advice was not
refused: its case, impact limit, probes (their ACK pair rates sorted: the
capacity estimate sorts them) and truth rounds (4 on draw 7's long
loss-based paths, 3 on draws 8 and 11, 2 before). A scoring is one (run,
truth round): the range holds it when that round's best nondisruptive count
lies inside it (a round with no such count is left out).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tamebpf.estimate.advice import build, impact_confidence, streams_range
from tamebpf.estimate.record import AdviseResult, Target
from tamebpf.estimate.spread import PathClass, path_class
from tamebpf.estimate.steady import window_samples
from tamebpf.model import ModelInputError, Settings
from tamebpf.model.confidence import ImpactRange, relative_standard_error
from tamebpf_eval.by_class import best_count, impact_holds, measured_impact, rounds_of, some_rounds
from tamebpf_eval.records import read_json
from tamebpf_eval.score import probe_from_dict

RECORD = Path(__file__).resolve().parents[3] / "docs" / "results" / "count-range-draws.json.xz"
# The fit's rule, fixed before any result was seen: per class, the smallest
# s of the grid whose coverage of the scorings reaches TARGET_COVERAGE.
TARGET_COVERAGE = 0.85
GRID = tuple(round(0.025 * k, 3) for k in range(0, 41))  # s = 0 .. 1.0
Key = tuple[bool, bool]


@dataclass
class Run:
    draw: str
    case: str
    result: AdviseResult
    limit: float
    cls: PathClass
    bests: list[int]  # each truth round's best nondisruptive count
    rounds: int  # the case's truth rounds, those without a best count too
    # The measured impact at the rebuilt advised count, the median of the
    # rounds (None: the truth did not measure that count).
    impact: float | None = None
    ranges: dict[float, tuple[int, int]] = field(default_factory=dict)  # by s, computed once

    @property
    def key(self) -> Key:
        return (self.cls.long, self.cls.unsettled)


def round_bests(truth: dict[str, Any], limit: float) -> list[int | None]:
    """Each truth round's best nondisruptive count, round by round (None:
    no count of that round within the limit)."""
    rec = {"truth": truth}
    return [best_count(some_rounds(rec, (k,)), limit) for k in range(rounds_of(rec))]


def _rebuilt(probes: list[dict[str, Any]], limit: float) -> AdviseResult | None:
    try:
        result = build(Target("eval"), [probe_from_dict(p) for p in probes],
                       Settings(max_impact=limit))
    except ModelInputError:
        return None
    return None if result.refused is not None else result


def runs(path: Path = RECORD) -> list[Run]:
    """The stored runs the advisor rebuilds unrefused and whose case has a
    round with a best count."""
    out = []
    for r in read_json(str(path))["runs"]:
        truth, limit = r["truth"], r["max_impact"]
        result = _rebuilt(r["probes"], limit)
        bests = [b for b in round_bests(truth, limit) if b is not None]
        if result is None or not bests:
            continue
        cls = path_class([p.path_srtt_us / 1000 or p.steady.srtt_ms or 0.0
                          for p in result.probes], [p.stopped for p in result.probes])
        out.append(Run(r["draw"], r["key"], result, limit, cls, bests,
                       rounds_of({"truth": truth}),
                       measured_impact({"truth": truth}, result.prediction.advice.num_flows)))
    return out


def _range(run: Run, s: float) -> tuple[int, int]:
    if s not in run.ranges:
        got = streams_range(run.result, Settings(max_impact=run.limit), spread=s)
        assert got is not None  # refused runs are not kept
        run.ranges[s] = got
    return run.ranges[s]


def _iid(run: Run) -> float:
    """The widest probe's relative standard error: the range if the probes'
    samples were independent draws of the path."""
    return max(relative_standard_error(p.steady.noise, window_samples(p.steady))
               for p in run.result.probes)


def scorings(rs: Sequence[Run], spread: dict[Key, float] | None
             ) -> Iterator[tuple[bool, float]]:
    """(the range holds the round's best count, high / low) per scoring;
    spread None: the i.i.d. range."""
    for r in rs:
        lo, hi = _range(r, _iid(r) if spread is None else spread[r.key])
        for b in r.bests:
            yield lo <= b <= hi, hi / lo


def fit(rs: Sequence[Run]) -> dict[Key, float]:
    """The rule: per class, the smallest s whose coverage of the scorings
    reaches TARGET_COVERAGE (the grid's widest if none does)."""
    out: dict[Key, float] = {}
    for key in [(a, b) for a in (False, True) for b in (False, True)]:
        mine = [r for r in rs if r.key == key]
        out[key] = GRID[-1]
        for s in GRID:
            got = [h for h, _ in scorings(mine, {key: s})]
            if not got or sum(got) >= TARGET_COVERAGE * len(got):
                out[key] = s
                break
    return out


def advised_range(run: Run, spread: float | None) -> ImpactRange:
    """The impact range at the advised count; spread None: the path's own
    (as the advice gives it), 0: the probes' noise alone."""
    n = run.result.prediction.advice.num_flows
    ranges = impact_confidence(run.result, Settings(max_impact=run.limit), spread=spread)
    return next(r for r in ranges if r.streams == n)


def impact_scorings(rs: Sequence[Run], spread: float | None) -> list[tuple[bool, float]]:
    """(the impact range holds the measured impact, its width) per run
    measured at its advised count."""
    out = []
    for run in rs:
        if run.impact is not None:
            r = advised_range(run, spread)
            out.append((impact_holds((r.low, r.high), run.impact), r.high - r.low))
    return out

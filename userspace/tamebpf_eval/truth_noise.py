"""How repeatable the ground truth is: one settled round of it scored, as if
it were the advice, against the other round.

Every fresh draw measures the truth in 2 rounds (20 s warm-up, 15 s window
each) and scores against their median. This re-reads the loss-based cases
of the draws that measured the settled default (no kernel, no testbed)
and, for each case and each order of its two rounds, takes round A as a
perfect advisor would see it: A's goodput and impact at every measured n
as the prediction, and as the advice the n of A's best nondisruptive
throughput. That is scored against round B with issue 29's metrics
(score.score, the same code that scores the advice). No probe is
involved: it asks what a second settled measurement of the very same
case would score as the advice, that is, how far the truth the targets
are measured against moves between two rounds.

Round against round carries noise on both sides, where the advice is
scored against the mean of two rounds (the median of two): so these
numbers are not a bound on what an advisor that knew the long-run mean
would score, only the repeatability of the measurement it is scored by.

    make eval PRESET=truth-noise    # -> docs/results/truth-noise.md
"""

from __future__ import annotations

import itertools
import os
import statistics
from collections.abc import Callable, Iterator
from typing import Any

from tamebpf_eval.advise import load
from tamebpf_eval.docsection import replay_main
from tamebpf_eval.fresh_draw import plan_score
from tamebpf_eval.report import OVER_BY, TARGET_QUALITY
from tamebpf_eval.score import p90, score, truth_table

SECTION = "truth_noise"
# Each draw that measured today's default (1 stream, then 10, each until
# settled), with the plan that ran it: draw 5 named it "both", beside the
# capacity-first default it measured and did not keep.
DRAWS = (("fresh4", "default"), ("fresh5", "both"), ("fresh6", "default"),
         ("fresh7", "default"))


def some_rounds(rec: dict[str, Any], ks: tuple[int, ...]) -> dict[int, dict[str, float | None]]:
    """The truth table (score.truth_table) of rounds ks alone."""
    return truth_table({"truth": {
        n: {"mbit": [v["mbit"][k] for k in ks],
            "cross_with": [v["cross_with"][k] for k in ks] if v["cross_with"] else []}
        for n, v in rec["truth"].items()}})


def one_round(rec: dict[str, Any], k: int) -> dict[int, dict[str, float | None]]:
    """The truth table of round k alone."""
    return some_rounds(rec, (k,))


def as_advice(pred: dict[int, dict[str, float | None]], truth: dict[int, dict[str, float | None]],
              limit: float) -> dict[str, Any]:
    """A truth table taken as the advice (its goodput and impact at each n as
    the prediction, the n of its best nondisruptive goodput as the advised
    count), scored against another."""
    thru = {n: t["mbit"] for n, t in pred.items() if t["mbit"]}
    imp = {n: t["impact"] for n, t in pred.items() if t["impact"] is not None}
    allowed = [(t["mbit"], n) for n, t in pred.items()
               if t["mbit"] and (t["impact"] or 0.0) <= limit]
    return score(thru, imp, max(allowed)[1], truth, limit)


def rounds_of(rec: dict[str, Any]) -> int:
    return len(next(iter(rec["truth"].values()))["mbit"])


def round_scores(rec: dict[str, Any], against: int = 1,
                 which: Callable[[int, tuple[int, ...]], bool] = lambda a, ks: True
                 ) -> Iterator[dict[str, Any]]:
    """Each round A as the advice, scored against the median of `against`
    other rounds, for every choice of them that `which(A, them)` keeps (by
    default, with 2 rounds: each against the other, both orders)."""
    limit = rec["max_impact"]
    rounds = rounds_of(rec)
    for a in range(rounds):
        for ks in itertools.combinations([b for b in range(rounds) if b != a], against):
            if which(a, ks):
                yield as_advice(one_round(rec, a), some_rounds(rec, ks), limit)


def cells(scores: list[dict[str, Any]]) -> str:
    errs = [s["thru_err_mean"] for s in scores if s["thru_err_mean"] is not None]
    imp = [e for s in scores for e in s["impact_errs"]]
    q = [s["quality"] for s in scores if s["quality"] is not None]
    over = sum((s["exceeds_by"] or 0.0) > OVER_BY for s in scores)
    ip90 = p90(imp)
    good = sum(x >= TARGET_QUALITY for x in q)
    return (f"{len(scores)} | {over}/{len(scores)} | {good}/{len(q)} | "
            + (f"{statistics.median(errs):.3f} / {statistics.fmean(errs):.3f}" if errs else "-")
            + " | " + ("-" if ip90 is None else f"{ip90:.3f}") + " |")


def rows(results: str) -> list[str]:
    out = ["| draw | what | scored | over by > 0.05 | >= 95% of best | "
           "thru err median / mean | impact err p90 |", "|---|---|---|---|---|---|---|"]
    every_round: list[dict[str, Any]] = []
    every_default: list[dict[str, Any]] = []
    for name, plan in DRAWS:
        recs = [r for r in load(os.path.join(results, f"eval-{name}.json"))
                if r["case"]["cc"] != "bbr"]
        if not recs:
            continue
        by_round = [s for r in recs for s in round_scores(r)]
        default = [s for s in (plan_score(r, plan) for r in recs) if s is not None]
        every_round += by_round
        every_default += default
        out.append(f"| {name} | one round against the other (each case both ways) | "
                   + cells(by_round))
        out.append(f"| {name} | the default's advice against the median of both | "
                   + cells(default))
    if every_round:
        out.append("| all | one round against the other | " + cells(every_round))
        out.append("| all | the default's advice against the median of both | "
                   + cells(every_default))
    return out


def _draw_span() -> str:
    numbers = [name.removeprefix("fresh") for name, _ in DRAWS]
    return f"{numbers[0]}-{numbers[-1]}"


def report(results: str) -> str:
    start, end = f"<!-- {SECTION}:start -->", f"<!-- {SECTION}:end -->"
    return "\n".join([
        start, f"## The ground truth against itself, draws {_draw_span()} (make "
        "eval-truth-noise)", "",
        "Loss-based cases; impact limit as each draw's; the targets: over by > 0.05 in <= 1 "
        "in 10, >= 95% of the best in >= 90%, throughput error median <= 0.08 and mean <= "
        "0.15, impact error p90 <= 0.15. 'One round against the other': round A's goodput "
        "and impact at each measured n as the prediction, the n of its best nondisruptive "
        "throughput as the advice, scored against round B; each case both ways.", "",
        *rows(results), end, ""])


if __name__ == "__main__":
    raise SystemExit(replay_main(__doc__ or "", report, SECTION,
                                 "How repeatable the ground truth is",
                                 os.path.join("docs", "results")))

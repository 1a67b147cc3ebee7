"""How narrow can a count range around the advised count be and still hold
the truth's best count? A bound, on draws 3-8 and 11.

Issue 44 asks of the count range both that it hold a truth round's best
count in >= 85% of scorings and that its median high/low be <= 2. Both
are limited by how far the advised count itself lies from the rounds' best
counts. This replays range_design's runs (the advisor rebuilt from each
run's stored probes, every truth round's best count) and asks, per class
(RTT under or over 80 ms; every probe settled or not), of ranges that
scale with the advised count n, [c n, c R n] with one c per class:

- the most scorings any such range of high/low <= R holds, with c chosen
  in hindsight (after seeing the bests: an upper bound for that family);
- the least R with which such a range, so placed, holds 85%.

A range whose width varies from case to case (wide where the probes
disagree, narrow elsewhere) is outside that family and could do better;
the product's range (estimate/spread.py) is one, and is shown beside.
Re-scores only:

    make eval PRESET=range-bound
"""

from __future__ import annotations

import math
import os

from tamebpf.estimate.spread import SPREAD
from tamebpf_eval.docsection import replay_main
from tamebpf_eval.range_design import (
    KEYS,
    PRODUCT_DRAWS,
    TARGET_COVERAGE,
    Key,
    Run,
    _class_name,
    _held,
    runs,
    scorings,
)

SECTION = "range_bound"
TITLE = "How narrow the count range can be around the advised count"
RATIOS = (1.5, 2.0, 3.0)


def offsets(rs: list[Run]) -> list[float]:
    """log(best / advised) per scoring (one per run and truth round)."""
    return [math.log(b / r.result.prediction.advice.num_flows) for r in rs for b in r.bests]


def best_cover(xs: list[float], ratio: float) -> int:
    """The most offsets one window of width log(ratio) holds."""
    xs = sorted(xs)
    width = math.log(ratio) + 1e-9
    hi, most = 0, 0
    for lo, x in enumerate(xs):
        hi = max(hi, lo)
        while hi < len(xs) and xs[hi] - x <= width:
            hi += 1
        most = max(most, hi - lo)
    return most


def window(xs: list[float], share: float = TARGET_COVERAGE) -> tuple[float, float]:
    """The narrowest (low, high) offsets holding `share` of xs."""
    xs = sorted(xs)
    need = math.ceil(share * len(xs))
    i = min(range(len(xs) - need + 1), key=lambda i: xs[i + need - 1] - xs[i])
    return xs[i], xs[i + need - 1]


def least_ratio(xs: list[float], share: float = TARGET_COVERAGE) -> float:
    """The least high/low of one window holding `share` of the offsets."""
    low, high = window(xs, share)
    return math.exp(high - low)


def proportional(n: int, low: float, high: float) -> tuple[int, int]:
    """The whole counts from n e^low to n e^high (the lowest one alone when
    the window holds no whole count)."""
    lo = max(1, math.ceil(n * math.exp(low) - 1e-9))
    return lo, max(lo, math.floor(n * math.exp(high) + 1e-9))


def held_out(rs: list[Run]) -> dict[Key, list[tuple[bool, float]]]:
    """The proportional range with its window fitted per class on the other
    draws (the narrowest holding 85% of their scorings), scored on each
    draw held out: (holds, high/low) per scoring."""
    out: dict[Key, list[tuple[bool, float]]] = {key: [] for key in KEYS}
    for draw in sorted({r.draw for r in rs}):
        for key in KEYS:
            train = offsets([r for r in rs if r.key == key and r.draw != draw])
            if not train:
                continue
            low, high = window(train)
            for r in rs:
                if r.key == key and r.draw == draw:
                    lo, hi = proportional(r.result.prediction.advice.num_flows, low, high)
                    out[key].extend((lo <= b <= hi, hi / lo) for b in r.bests)
    return out


def _least_overall(by_class: list[list[float]], share: float = TARGET_COVERAGE) -> float:
    """The least high/low (on a 1% grid) with which ranges placed in
    hindsight per class hold `share` of all the scorings."""
    total = sum(map(len, by_class))
    ratio = 1.0
    while sum(best_cover(xs, ratio) for xs in by_class) < share * total:
        ratio *= 1.01
    return ratio


def _row(name: str, xs: list[float], rs: list[Run]) -> str:
    """A class's row: its offsets xs, and its runs rs for the product's range."""
    exact = sum(1 for x in xs if x == 0)
    cover = " | ".join(f"{best_cover(xs, q) / len(xs):.0%}" for q in RATIOS)
    return (f"| {name} | {len(xs)} | {exact / len(xs):.0%} | {cover} | "
            f"{least_ratio(xs):.2f} | " + _held(list(scorings(rs, SPREAD))))


def report(results: str, draws: str = PRODUCT_DRAWS) -> str:
    return render(runs(results, draws), draws)


def render(rs: list[Run], draws: str = PRODUCT_DRAWS) -> str:
    """The section, from range_design's runs of `draws`."""
    lines = [f"<!-- {SECTION}:start -->",
             f"## {TITLE}, draws {draws} (make eval PRESET=range-bound)", "",
             f"{len(rs)} runs rebuilt from their stored probes; a scoring is one run "
             "against one truth round's best nondisruptive count. \"Placed in hindsight\": "
             "a range [c n, c R n] around the advised count n, one c per class chosen "
             "after seeing the bests (the most such a range can hold).", "",
             "| class | scorings | advised count = the round's best | "
             + " | ".join(f"placed in hindsight, high/low {q:g}: holds" for q in RATIOS)
             + f" | least high/low holding {TARGET_COVERAGE:.0%} | the product's range "
             "holds | its median high/low |",
             "|---|---|---|" + "---|" * len(RATIOS) + "---|---|---|"]
    classes = {key: mine for key in KEYS if (mine := [r for r in rs if r.key == key])}
    by_class = {key: offsets(mine) for key, mine in classes.items()}
    lines += [_row(_class_name(key), xs, classes[key]) for key, xs in by_class.items()]
    total = sum(map(len, by_class.values()))
    cover = " | ".join(f"{sum(best_cover(xs, q) for xs in by_class.values()) / total:.0%}"
                       for q in RATIOS)
    lines.append(f"| all (one c per class, one high/low) | {total} | "
                 f"{sum(1 for xs in by_class.values() for x in xs if x == 0) / total:.0%} | "
                 f"{cover} | {_least_overall(list(by_class.values())):.2f} | "
                 + _held(list(scorings(rs, SPREAD))))
    held = held_out(rs)
    lines += ["", "The proportional range as a candidate: its window (per class, the "
              f"narrowest holding {TARGET_COVERAGE:.0%} of the other draws' scorings) "
              "scored on each draw held out, beside the product's range (its own "
              "held-out figures: range-design-11.md).", "",
              "| class | scorings | proportional range holds | its median high/low |",
              "|---|---|---|---|"]
    lines += [f"| {_class_name(key)} | {len(held[key])} | " + _held(held[key])
              for key in KEYS if held[key]]
    every = [x for key in KEYS for x in held[key]]
    lines.append(f"| all | {len(every)} | " + _held(every))
    return "\n".join([*lines, f"<!-- {SECTION}:end -->"]) + "\n"


if __name__ == "__main__":
    raise SystemExit(replay_main(__doc__ or "", report, SECTION, TITLE,
                                 os.path.join("docs", "results")))

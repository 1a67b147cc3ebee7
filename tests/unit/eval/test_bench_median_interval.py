"""The benchmark's interval for a median ratio (tamebpf_bench.bench_overhead
median_interval): pure, no kernel."""

from __future__ import annotations

import math
import random

import pytest

from tamebpf_bench.bench_overhead import median_interval


def coverage(n: int, k: int) -> float:
    """P(the k-th smallest <= median <= the k-th largest) for n draws of a
    continuous distribution: 1 - 2 P(Binomial(n, 1/2) <= k - 1)."""
    return 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2 ** n


@pytest.mark.parametrize("n", [5, 7, 9, 15, 21, 31, 60])
def test_the_interval_is_the_narrowest_order_statistics_holding_90_percent(n: int) -> None:
    xs = [float(i) for i in range(1, n + 1)]
    random.Random(n).shuffle(xs)
    lo, hi = median_interval(xs)
    k = int(lo)
    assert hi == n + 1 - k, (lo, hi)
    if coverage(n, 1) >= 0.90:  # enough pairs for a 90% interval at all
        assert coverage(n, k) >= 0.90
        assert coverage(n, k + 1) < 0.90, "a narrower one would hold 90% too"
    else:
        assert (lo, hi) == (1.0, float(n)), "too few pairs: the whole range"


def test_fifteen_pairs_give_the_4th_to_the_12th() -> None:
    assert median_interval([float(x) for x in range(15, 0, -1)]) == (4.0, 12.0)

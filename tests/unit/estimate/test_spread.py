"""The advised count's range (estimate/spread.py): which class a path
is in, and the counts the moved probes give."""

from __future__ import annotations

from collections.abc import Sequence

from tamebpf.estimate.spread import (
    SPREAD,
    count_range,
    holds,
    path_class,
    spread_for,
)
from tamebpf.model import ModelInputError, Probe, Settings, fit_throughput, predict

SETTINGS = Settings(max_impact=0.10)
PROBES = [Probe(1, 50.0), Probe(10, 200.0)]  # docs/model.md's worked example: 2 streams


def advised(ps: Sequence[Probe]) -> int:
    return predict(fit_throughput(ps, "square"), SETTINGS).advice.num_flows


def test_the_class_is_the_rtt_and_whether_a_probe_ended_unsettled() -> None:
    assert not path_class([30.0, 31.0], ["settled", "settled"]).long
    assert path_class([0.0, 120.0], ["settled", "settled"]).long  # 0: not learned
    assert path_class([0.0], ["settled"]).rtt_ms is None
    assert path_class([90.0], ["settled", "time limit"]).unsettled
    assert path_class([90.0], [None, None]).unsettled  # fixed-length probes
    assert not path_class([90.0], ["settled", "settled"]).unsettled
    # Long unsettled paths part most from round to round (range-design.md).
    assert spread_for(path_class([120.0], ["time limit"])) == max(SPREAD.values())


def test_the_range_holds_the_advice_and_widens_with_the_spread() -> None:
    n = advised(PROBES)
    assert count_range(advised, PROBES, n, 0.0) == (n, n)
    narrow = count_range(advised, PROBES, n, 0.1)
    wide = count_range(advised, PROBES, n, 0.7)
    assert holds(narrow, n) and holds(wide, n)
    assert wide[0] <= narrow[0] and wide[1] > narrow[1]


def test_a_moved_probe_without_a_fit_adds_nothing() -> None:
    def fragile(ps: Sequence[Probe]) -> int:
        if ps[1].throughput < 200.0:
            raise ModelInputError("no fit")
        return advised(ps)

    low, high = count_range(fragile, PROBES, advised(PROBES), 0.5)
    assert low <= advised(PROBES) <= high

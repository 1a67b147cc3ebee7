"""The order of the settled probes, on canned probe results:
advisor.capacity_first's decision (the larger probe alone where its ACK
pairs give a trusted capacity or --capacity is given, the smaller one after
it otherwise), the pair in order, and "by-rtt"'s choice between them. The
probes themselves run in the kernel in tests/integration/test_advise.py;
here only which run."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tamebpf.advise import advisor
from tamebpf.advise.estimate.acktrain import estimate_capacity
from tamebpf.advise.record import PathRtt, ProbeResult, Target
from tamebpf.model import Settings
from tests.unit.test_advise_report import probe

TARGET = Target("198.18.3.2", 5201, None, "cubic")
# ACK pairs of a 10-stream probe on a path of 300 Mbit/s of TCP goodput: most
# at the link rate (segments that queued together), the rest below it.
LINK_PAIRS = tuple([300.0 + 0.1 * (i % 10) for i in range(600)] +
                   [50.0 + i for i in range(200)])


class Runs:
    """Stands in for advisor.run_probe: what was asked, and canned answers."""

    def __init__(self, answers: dict[int, ProbeResult]) -> None:
        self.answers = answers
        self.asked: list[dict[str, Any]] = []

    def __call__(self, target: Target, streams: int, seconds: float, index: int = 1,
                 total: int = 1, on_progress: Any = None, srtt_us: int = 0,
                 fast_start: bool = True, enough: Any = None) -> ProbeResult:
        self.asked.append({"streams": streams, "index": index, "total": total,
                           "srtt_us": srtt_us, "capacity": getattr(enough, "capacity", None)})
        return self.answers[streams]


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> Runs:
    ten = replace(probe(10, 200.0), ack_pair_mbps=LINK_PAIRS, path_srtt_us=21_000)
    r = Runs({10: ten, 1: probe(1, 50.0)})
    monkeypatch.setattr(advisor, "run_probe", r)
    monkeypatch.setattr(advisor, "probe_congestion", lambda t: ("cubic", "--congestion"))
    return r


def test_the_pairs_give_a_trusted_capacity() -> None:
    e = estimate_capacity(list(LINK_PAIRS), 200.0)
    assert e.trusted and e.goodput_mbps == pytest.approx(300.0, rel=0.01), e


def test_a_trusted_capacity_ends_probing_after_the_larger_probe(runs: Runs) -> None:
    r = advisor.run_advice(TARGET, Settings(max_impact=0.26), order="larger-first")
    assert [a["streams"] for a in runs.asked] == [10]
    assert runs.asked[0]["capacity"] is True  # it waits for a tight capacity
    assert r.used == "capacity" and [p.streams for p in r.probes] == [10]
    assert r.congestion == "cubic (--congestion)"


def test_without_a_trusted_capacity_the_smaller_probe_follows(runs: Runs) -> None:
    runs.answers[10] = replace(runs.answers[10], ack_pair_mbps=())
    r = advisor.run_advice(TARGET, Settings(max_impact=0.26), order="larger-first")
    assert [(a["streams"], a["index"], a["total"]) for a in runs.asked] == \
        [(10, 1, 2), (1, 2, 2)]
    assert runs.asked[1]["srtt_us"] == 21_000  # the first probe's RTT is handed on
    assert runs.asked[1]["capacity"] is False
    assert [p.streams for p in r.probes] == [10, 1] and r.used == "throughput"
    assert r.prediction.advice.num_flows == 3


def test_a_given_capacity_needs_no_second_probe(runs: Runs) -> None:
    runs.answers[10] = replace(runs.answers[10], ack_pair_mbps=())
    link = 300.0 * 1514 / 1448
    r = advisor.run_advice(TARGET, Settings(max_impact=0.26), capacity_mbps=link,
                           order="larger-first")
    assert [a["streams"] for a in runs.asked] == [10]
    assert runs.asked[0]["capacity"] is False  # nothing to estimate
    assert r.used == "capacity" and r.capacity is not None and r.capacity.link_mbps == link


def test_a_capacity_below_the_probe_falls_back_to_both(runs: Runs) -> None:
    # The 10-stream probe measured more than the given link carries: that
    # capacity cannot anchor the fit, and the 1-stream probe runs.
    r = advisor.run_advice(TARGET, Settings(max_impact=0.26), capacity_mbps=100.0,
                           order="larger-first")
    assert [a["streams"] for a in runs.asked] == [10, 1]
    assert [w.code for w in r.warnings if w.code == "capacity_not_used"]


def test_bbr_and_fixed_lengths_keep_the_pair_of_stages(monkeypatch: pytest.MonkeyPatch,
                                                        runs: Runs) -> None:
    staged: list[list[tuple[int, float]]] = []

    def run_probes(target: Target, stages: list[tuple[int, float]], *a: Any,
                   **k: Any) -> list[ProbeResult]:
        staged.append(list(stages))
        return [runs.answers[1], runs.answers[10]]

    monkeypatch.setattr(advisor, "run_probes", run_probes)
    advisor.run_advice(TARGET, Settings(max_impact=0.26), durations_s=(2.0, 2.0),
                       order="larger-first")
    assert staged == [[(1, 2.0), (10, 2.0)]] and runs.asked == []


def test_smaller_first_keeps_the_settled_pair(monkeypatch: pytest.MonkeyPatch,
                                              runs: Runs) -> None:
    # make eval's "both" plan: 1 stream then 10, each until settled.
    staged: list[tuple[list[tuple[int, float]], list[Any]]] = []

    def run_probes(target: Target, stages: list[tuple[int, float]], *a: Any,
                   enough: list[Any], **k: Any) -> list[ProbeResult]:
        staged.append((list(stages), enough))
        return [runs.answers[1], runs.answers[10]]

    monkeypatch.setattr(advisor, "run_probes", run_probes)
    r = advisor.run_advice(TARGET, Settings(max_impact=0.26), order="smaller-first")
    limit = advisor.DEFAULT_MAX_PROBE_S
    assert [s for s, _ in staged] == [[(1, limit), (10, limit)]] and runs.asked == []
    assert [rule.capacity for rule in staged[0][1]] == [False, True]
    assert [p.streams for p in r.probes] == [1, 10]


@pytest.fixture
def staged(monkeypatch: pytest.MonkeyPatch, runs: Runs) -> list[dict[str, Any]]:
    """Stands in for advisor.run_probes (the pair in order): what it was asked."""
    asked: list[dict[str, Any]] = []

    def run_probes(target: Target, stages: list[tuple[int, float]], on_progress: Any = None,
                   srtt_us: int = 0, **k: Any) -> list[ProbeResult]:
        asked.append({"stages": [n for n, _ in stages], "srtt_us": srtt_us})
        return [runs.answers[1], runs.answers[10]]

    monkeypatch.setattr(advisor, "run_probes", run_probes)
    return asked


@pytest.mark.parametrize("srtt_us, larger_first", [
    (12_000, True), (advisor.SHORT_PATH_SRTT_US, True),
    (advisor.SHORT_PATH_SRTT_US + 1, False), (120_000, False),
    (0, False),  # no sample: the long path's order, the one that errs less
])
def test_by_rtt_orders_the_probes_by_the_path_rtt(monkeypatch: pytest.MonkeyPatch, runs: Runs,
                                                  staged: list[dict[str, Any]], srtt_us: int,
                                                  larger_first: bool) -> None:
    check = PathRtt(srtt_us, 0.4)
    monkeypatch.setattr(advisor, "path_rtt", lambda target: check)
    r = advisor.run_advice(TARGET, Settings(max_impact=0.26), order="by-rtt")
    if larger_first:
        assert [a["streams"] for a in runs.asked] == [10] and staged == []
        assert runs.asked[0]["srtt_us"] == srtt_us  # the first SYN already knows the RTT
    else:
        assert runs.asked == [] and staged == [{"stages": [1, 10], "srtt_us": srtt_us}]
    assert r.rtt_check == check


def test_by_rtt_checks_no_rtt_where_the_order_is_fixed(monkeypatch: pytest.MonkeyPatch,
                                                       runs: Runs,
                                                       staged: list[dict[str, Any]]) -> None:
    def no_check(target: Target) -> PathRtt:
        raise AssertionError("the RTT check ran")

    monkeypatch.setattr(advisor, "path_rtt", no_check)
    r = advisor.run_advice(TARGET, Settings(max_impact=0.26), durations_s=(2.0, 2.0),
                           order="by-rtt")
    assert staged == [{"stages": [1, 10], "srtt_us": 0}] and r.rtt_check is None

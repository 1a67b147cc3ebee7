"""The short-path stop-rule design (tamebpf_eval/short_design.py): the
candidates that wait for a trusted capacity only so long, and how a
candidate's stop becomes a probe record."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from tamebpf.advise.settled import loss_based_rule
from tamebpf_eval.short_design import (
    _capacity_until,
    _capacity_until_rtts,
    _view,
    second_stage,
    with_plans,
)


@dataclass(frozen=True)
class Rule:
    """Settled's shape: settled at `ready` s, and with `capacity` only once
    the capacity is trusted too (at `trusted` s)."""

    ready: float
    trusted: float
    capacity: bool = True

    def __call__(self, s: Any, rates: Any) -> bool:
        return s.end_s >= self.ready and (not self.capacity or s.end_s >= self.trusted)


def at(t: float, srtt_ms: float = 20.0) -> Any:
    return SimpleNamespace(end_s=t, srtt_ms=srtt_ms)


def test_waits_for_the_capacity_only_until_its_time() -> None:
    never = Rule(ready=2.5, trusted=99.0)
    rule = _capacity_until(4.0, never)
    assert not rule(at(3.0), list), "settled but untrusted, before 4 s: go on"
    assert rule(at(4.0), list), "settled at 4 s: stop, the capacity left to the fit"
    early = _capacity_until(4.0, Rule(ready=2.5, trusted=3.0))
    assert early(at(3.0), list), "trusted before 4 s: stop as today's rule does"
    late = _capacity_until(4.0, Rule(ready=5.0, trusted=99.0))
    assert not late(at(4.5), list), "not settled yet: the time alone does not stop it"


def test_the_rtt_bounded_candidate_is_what_the_bounded_profile_ships() -> None:
    # The product's rule itself is tested in test_settled_rule.py; here,
    # that the design run scored that rule and not a copy of it.
    assert second_stage()["k4-cap-until200rtt"] == loss_based_rule(True, True, "bounded")
    assert _capacity_until_rtts(150.0) != loss_based_rule(True, True, "bounded")


def test_a_stop_becomes_the_probe_then() -> None:
    full = {"streams": 10, "duration_s": 16.0, "steady": {"end_s": 15.0}, "ack_pair_mbps": [1.0]}
    seen = {"at_s": 3.0, "steady": {"end_s": 3.0}, "ack_pair_mbps": [2.0]}
    v = _view(full, seen, "k4", 0.5)
    assert (v["duration_s"], v["steady"], v["ack_pair_mbps"], v["stopped"]) == (
        3.6, {"end_s": 3.0}, [2.0], "k4")
    assert _view(full, None, "k4", 0.5) is full, "never said stop: the full probe"


def test_plans_pair_every_first_stage_rule_with_every_second() -> None:
    stages = {"first": {"t15": "F", "k4": "f4", "t2": "f2"},
              "second": {"t15": "S", "k4-cap": "s4"}}
    got = with_plans({"key": "k", "stages": stages})["probes"]
    assert got == {"t15+t15": ["F", "S"], "k4+k4-cap": ["f4", "s4"],
                   "t2+k4-cap": ["f2", "s4"]}, got

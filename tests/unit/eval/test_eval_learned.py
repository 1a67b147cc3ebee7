"""Issue 45's draw (tamebpf_eval.learned, learned_score): what is drawn,
how an answer from memory is read, when a following cap settles within
the truth's spread, and the report, on synthetic records."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tamebpf.estimate.spread import LONG_RTT_MS
from tamebpf_eval import fresh_draw, learned
from tamebpf_eval.commands import json_log
from tamebpf_eval.fresh_draw import RATES, RTTS, draw
from tamebpf_eval.learned import DRAWS, PLANS
from tamebpf_eval.learned_score import (
    advice_of,
    long_score,
    report,
    settled_at,
    target_at,
    time_within,
    timeline,
    why_not,
)
from tamebpf_eval.records import load

RESULTS = Path(__file__).resolve().parents[3] / "docs" / "results"
FRESH12 = DRAWS["fresh12"]


def test_the_draw_is_loss_based_half_of_it_long() -> None:
    cases = draw(FRESH12)
    assert cases == draw(FRESH12), "the same seed draws the same cases"
    assert len(cases) == FRESH12.loss_based == 12
    assert {c.cc for c in cases} <= {"cubic", "reno"} and all(c.cross_cc == c.cc for c in cases)
    assert sum(c.rtt >= LONG_RTT_MS for c in cases) == FRESH12.long == 6
    assert sum(c.cross_rtt is not None for c in cases) == 12 // 3
    for c in cases:
        assert c.rate in RATES and c.rtt in RTTS and 1 <= c.cross <= 30 and c.queue >= 2
    assert FRESH12.seed not in {d.seed for d in fresh_draw.DRAWS.values()}
    assert not {c.key for c in cases} & {c.key for d in fresh_draw.DRAWS.values()
                                         for c in draw(d)}


@pytest.mark.parametrize("d", [fresh_draw.DRAWS["fresh11"], FRESH12], ids=lambda d: d.name)
def test_the_draws_are_drawn_as_they_were_measured(d: fresh_draw.Draw) -> None:
    """The cases a draw's stored records measured come out of draw(), in
    order."""
    measured = [r["key"] for r in load(str(RESULTS / f"eval-{d.name}.json.gz"))]
    assert measured, f"{d.name}'s records are stored"
    drawn = [c.key for c in draw(d)]
    assert drawn[:len(measured)] == measured


def an_answer(n: int = 4, source: str = "passive") -> dict[str, Any]:
    """`advise --json` from memory, as present/paths.recalled_json writes it."""
    return {"from_memory": True,
            "memory": {"source": source, "transfers": 1, "learned_over_s": 55.0,
                       "pool": {"windows": 2, "seconds": 40.0},
                       "capacity": {"goodput_mbps": 19.5, "method": "ack-spacing (scout)"},
                       "advice": {"num_flows": n, "impact_low": 0.1, "impact_high": 0.4}},
            "advice": {"num_flows": n, "streams_range": [n - 1, n + 2]},
            "curve": [{"streams": k, "throughput_mbps": 10.0 * k ** 0.5,
                       "impact": 0.08 * (k - 1)} for k in range(1, 17)]}


def asked(answer: dict[str, Any] | None, sent: int = 0) -> dict[str, Any]:
    return {"exit": 0 if answer else 3, "answer": answer, "sent_packets": sent,
            "seconds": 0.4, "error": "" if answer else "tamebpf: no iperf3 server answers"}


def test_an_answer_from_what_transfers_taught_is_scored_as_an_advice() -> None:
    a = advice_of(asked(an_answer(4)))
    assert a["refused"] is None and a["n"] == 4 and a["streams_range"] == [3, 6]
    assert a["curve"][3] == [4, 20.0, pytest.approx(0.24)]
    assert a["impact_range"] == [0.1, 0.4] and a["probes"] == []
    assert a["memory"]["pool"] == {"windows": 2, "seconds": 40.0}
    # The entry's impact range is for its own count: another count has none.
    other = an_answer(4)
    other["memory"]["advice"]["num_flows"] = 5
    assert advice_of(asked(other))["impact_range"] is None


def test_no_answer_or_one_not_learned_is_refused_with_the_reason() -> None:
    none = advice_of(asked(None))
    assert none["refused"] == "exit 3: tamebpf: no iperf3 server answers" and none["n"] is None
    probed = advice_of(asked(an_answer(source="probe")))
    assert probed["refused"] is not None and "source probe" in probed["refused"]


def test_the_caps_target_over_time_comes_from_the_runs_log() -> None:
    run = {"started": 1000.0, "summary": {"cap_start_mbps": 100.0},
           "log": [{"time": 1030.0, "event": "follow_change", "to_mbps": 14.0},
                   {"time": 1020.0, "event": "follow_scout", "cookie": 7},
                   {"time": 1090.0, "event": "follow_change", "to_mbps": 17.5},
                   {"time": 1001.0, "msg": "run: following 10.0.0.2 (cubic) from 100.0"}]}
    steps = timeline(run)
    assert steps == [(0.0, 100.0), (30.0, 14.0), (90.0, 17.5)]
    assert [target_at(steps, t) for t in (0, 29.9, 30, 89, 300)] == [100, 100, 14, 14, 17.5]
    assert timeline({"started": 0.0, "summary": None}) == []


@pytest.mark.parametrize("steps, settled", [
    ([(0, 100), (30, 15), (90, 17)], 30),  # in from 30 s on
    ([(0, 100), (30, 15), (100, 25), (200, 16)], 200),  # out again at 100 s: from 200
    ([(0, 100), (30, 15), (250, 30)], None),  # outside at the end
    ([(0, 16)], 0),  # held a rate that was inside all along
    ([(0, 100)], None),  # never followed
    ([(0, 100), (30, 15), (320, 40)], 30),  # a change after the end does not count
])
def test_settled_is_the_first_time_from_which_it_stays_inside(
        steps: list[tuple[float, float]], settled: float | None) -> None:
    assert settled_at(steps, 13.5, 19.8, 300.0) == settled


def test_the_share_of_time_inside_counts_each_step_to_the_next() -> None:
    steps = [(0.0, 100.0), (200.0, 15.0), (260.0, 30.0)]
    assert time_within(steps, 13.5, 19.8, 180.0, 300.0) == pytest.approx(60 / 120)
    assert time_within([(0.0, 15.0)], 13.5, 19.8, 180.0, 300.0) == 1.0


def a_record(key: str, rtt: float, steps: list[tuple[float, float]] | None,
             answered: bool = True) -> dict[str, Any]:
    """A case with a 3-round truth at 1, 4, 16 (4 streams the best in every
    round: 16 takes too much), the learned plans' advice and, when `steps`
    is given, a long run with those target changes and a 60-s truth."""
    truth = {"1": {"mbit": [8.0, 9.0, 10.0], "cross_with": [100.0, 100.0, 100.0]},
             "4": {"mbit": [15.0, 17.0, 18.0], "cross_with": [80.0, 78.0, 82.0]},
             "16": {"mbit": [40.0, 42.0, 38.0], "cross_with": [40.0, 40.0, 40.0]}}
    rec: dict[str, Any] = {
        "key": key, "case": {"rtt": rtt, "cc": "cubic", "rate": 20.0}, "max_impact": 0.3,
        "short": False, "streams": 8, "truth": truth, "truth_warmup_s": 20.0,
        "truth_window_s": 15.0, "rounds": 3, "long_s": 300.0, "by_s": 180.0,
        "advice": {p: advice_of(asked(an_answer(4) if answered else None))
                   for p in PLANS if p != "run-5min"},
        "transfers": {"run-60s": {"summary": {"not_learned": "no stream count held",
                                              "notes": []}},
                      "export-60s": {"log": [{"event": "ack_window", "msg": "sampling"},
                                             {"event": "ack_none", "msg": "too few pairs"}]}}}
    if steps is not None:
        rec["truth_long"], rec["truth_long_window_s"] = truth, 60.0
        rec["advice"]["run-5min"] = advice_of(asked(an_answer(4)))
        rec["transfers"]["run-5min"] = {
            "started": 0.0, "exit": 0, "summary": {"cap_start_mbps": steps[0][1]},
            "log": [{"time": t, "event": "follow_change", "to_mbps": v} for t, v in steps[1:]]}
    return rec


def test_the_long_run_is_scored_against_the_60s_rounds_spread() -> None:
    rec = a_record("long", 120.0, [(0, 100.0), (40, 16.0), (130, 17.0)])
    s = long_score(rec)
    assert s is not None
    assert s["best"] == [15.0, 17.0, 18.0]
    assert s["spread"] == pytest.approx((13.5, 19.8))
    assert (s["settled_s"], s["within_by"], s["at_by"], s["changes"]) == (40, True, 17.0, 2)
    late = long_score(a_record("late", 120.0, [(0, 100.0), (40, 16.0), (150, 25.0),
                                               (200, 16.0)]))
    assert late is not None and late["settled_s"] == 200 and not late["within_by"]
    assert long_score(a_record("short path", 20.0, None)) is None


def test_the_report_says_what_answered_and_how_the_long_runs_settled() -> None:
    recs = [a_record("fresh12-01-short", 20.0, None),
            a_record("fresh12-02-short", 30.0, None, answered=False),
            a_record("fresh12-03-long", 120.0, [(0, 100.0), (40, 16.0)]),
            a_record("fresh12-04-long", 100.0, [(0, 100.0)])]
    text = report(recs, FRESH12)
    lines = text.splitlines()
    assert lines[0] == "<!-- eval_fresh12:start -->" and lines[-1] == "<!-- eval_fresh12:end -->"
    assert "smoke run" not in text
    assert "| run-60s | 3/4 | 3/3 (most 0) |" in text
    # The case without an answer names why, from what its transfer said.
    row = next(ln for ln in lines if ln.startswith("| fresh12-02-short | run-60s |"))
    assert "nothing (exit 3): no stream count held" in row
    row = next(ln for ln in lines if ln.startswith("| fresh12-02-short | export-60s |"))
    assert "too few pairs" in row
    assert "Within for good by 180 s in 1 of 2 (issue 45: >= 5 of 6)" in text
    assert any(ln.startswith("| fresh12-03-long |") and "| 40 s | yes |" in ln for ln in lines)
    assert any(ln.startswith("| fresh12-04-long |") and "| never | no |" in ln for ln in lines)
    # Issue 44's bar per class, and the long cases against the 60-s truth.
    assert "| >= 80 ms (2 cases) | ceiling" in text and "| < 80 ms (2 cases) | ceiling" in text
    assert "The long cases against the truth of the 60-s windows:" in text
    smoke = report([{**recs[2], "short": True}], FRESH12)
    assert "A smoke run (--short)" in smoke


def test_the_report_of_no_case_yet() -> None:
    text = report([], FRESH12)
    assert "0 of 12 loss-based cases measured, 0 of them at 80 ms or more (of 6)" in text
    assert "No case measured yet" in text


def test_a_smoke_run_needs_results_outside_the_draws(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    monkeypatch.setattr(sys, "argv", ["learned", "--draw", "fresh12", "--short"])
    with pytest.raises(SystemExit) as e:
        learned.main()
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--results FILE outside docs/results" in err and "Traceback" not in err
    monkeypatch.setattr(sys, "argv", ["learned", "--draw", "fresh12", "--short", "--results",
                                      "docs/results/smoke.json.gz"])
    with pytest.raises(SystemExit):
        learned.main()


def test_the_json_log_keeps_info_the_events_asked_for_and_plain_lines(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    log.write_text('{"level": "info", "msg": "a"}\n'
                   '{"level": "debug", "msg": "b"}\n'
                   '{"level": "debug", "msg": "c", "event": "follow_scout"}\n'
                   "tamebpf: a line that is not JSON\n\n"
                   '{"level": "warning", "msg": "d"}\n')
    assert [r["msg"] for r in json_log(str(log), ("follow_scout",))] == [
        "a", "c", "tamebpf: a line that is not JSON", "d"]
    assert [r["msg"] for r in json_log(str(log), most=2)] == [
        "tamebpf: a line that is not JSON", "d"]


def test_why_run_taught_nothing_names_each_note_once_and_the_scouts_window() -> None:
    held = "held at the target: no capacity"
    rec = {"transfers": {"run-60s": {
        "summary": {"not_learned": "one stream count", "notes": [held, held, "first 5 s: none"]},
        "log": [{"event": "run_follow", "msg": "following"},
                {"event": "scout_no_capacity", "msg": "scout: within 1.2x of its own"}]}}}
    assert why_not(rec, "run-60s") == ("one stream count; held at the target: no capacity; "
                                       "first 5 s: none; scout: within 1.2x of its own")

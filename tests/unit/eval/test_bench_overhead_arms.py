"""The overhead benchmark's pure parts (tamebpf_bench.bench_overhead): the
order of runs, which sides can share a run, reading iperf3's intervals,
the cost summary and segment count. No kernel."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace
from typing import Any

import pytest

from tamebpf_bench.bench_overhead import (
    ARMS,
    RECEIVE,
    SEND,
    ProgCost,
    RunCost,
    cost_rows,
    interval_mbit,
    run_order,
    segments,
    toggle_sides,
)


def test_a_two_sided_arm_alternates_which_side_goes_first() -> None:
    blocks = ARMS["telemetry"].blocks
    assert [run_order(blocks, rep) for rep in range(4)] == [
        [("off", "on")], [("on", "off")], [("off", "on")], [("on", "off")]]


@pytest.mark.parametrize("arm", sorted(ARMS))
def test_every_side_runs_once_a_rep(arm: str) -> None:
    for rep in range(8):
        sides = [side for block in run_order(ARMS[arm].blocks, rep) for side in block]
        assert sorted(sides) == sorted(ARMS[arm].sides)


def test_four_reps_of_the_pace_arm_balance_order_and_place() -> None:
    arm = ARMS["pace"]
    orders = [[side for block in run_order(arm.blocks, rep) for side in block]
              for rep in range(4)]
    for a, base in arm.ratios.values():
        before = sum(o.index(a) < o.index(base) for o in orders)
        assert before == 2, f"{a} ran before {base} in {before} of 4 reps, expected 2"
    for side in arm.sides:
        places = Counter(o.index(side) < 2 for o in orders)
        assert places[True] == places[False] == 2, f"{side}: first half {places[True]} of 4"
    for o in orders:  # the ratios of telemetry are of neighbours
        for a, base in list(arm.ratios.values())[:2]:
            assert abs(o.index(a) - o.index(base)) == 1, (o, a, base)


def test_the_arms_ratios_compare_sides_that_exist() -> None:
    for name, arm in ARMS.items():
        for a, base in arm.ratios.values():
            assert a in arm.sides and base in arm.sides, (name, a, base)


def run(progs: list[tuple[str, int, int]], segs: int, seconds: float = 2.0,
        busy_ns: int = 4_000_000_000) -> RunCost:
    return RunCost([ProgCost(name, f"hook/{name}", runs, ns) for name, runs, ns in progs],
                   segs, seconds, busy_ns)


def test_cost_rows_are_medians_per_program_and_all_together() -> None:
    costs = [run([("pace", 400, 120_000), ("state", 10, 1_000)], 1000),
             run([("pace", 500, 200_000), ("state", 10, 3_000)], 1000),
             run([("pace", 300, 60_000), ("state", 10, 2_000)], 1000)]
    rows = {r.name: r for r in cost_rows(costs)}
    assert list(rows) == ["pace", "state", "all"]
    pace = rows["pace"]
    assert pace.hook == "hook/pace"
    assert pace.runs_per_s == 200.0
    assert pace.runs_per_segment == 0.4
    assert pace.ns_per_run == 300.0  # of 300, 400, 200
    assert pace.ns_per_segment == 120.0
    assert pace.share == pytest.approx(120_000 / 4e9)
    total = rows["all"]
    assert total.runs_per_segment == 0.41
    assert total.ns_per_segment == 121.0  # of 121, 203, 62


def test_a_program_that_never_ran_has_no_row_but_counts_in_all() -> None:
    costs = [run([("connect6", 0, 0), ("pace", 4, 400)], 10)]
    rows = cost_rows(costs)
    assert [r.name for r in rows] == ["pace", "all"]
    assert rows[-1].ns_per_segment == 40.0


def test_no_runs_no_rows() -> None:
    assert cost_rows([]) == []


def flow(remote_port: int, segs_in: int, segs_out: int) -> Any:
    return SimpleNamespace(remote_port=remote_port, data_segs_in=segs_in,
                           data_segs_out=segs_out)


def test_segments_count_the_clients_connections_to_the_server_only() -> None:
    flows = [flow(5201, 1000, 3), flow(5201, 20, 2),  # a stream, the control connection
             flow(40000, 5, 1020)]                  # the server's end of the stream
    assert segments(flows, 5201, RECEIVE) == 1020
    assert segments(flows, 5201, SEND) == 5


REPORT = """\
[  5] local 127.0.0.1 port 40164 connected to 127.0.0.1 port 5393
[ ID] Interval           Transfer     Bitrate
[  5]   0.00-1.00   sec   929 MBytes  7788 Mbits/sec                  (omitted)
[  7]   0.00-1.00   sec   884 MBytes  7411 Mbits/sec                  (omitted)
[SUM]   0.00-1.00   sec  1.77 GBytes  15199 Mbits/sec                  (omitted)
- - - - - - - - - - - - - - - - - - - - - - - - -
[  5]   0.00-0.50   sec   497 MBytes  8318 Mbits/sec
[  7]   0.00-0.50   sec   483 MBytes  8088 Mbits/sec
[SUM]   0.00-0.50   sec   980 MBytes  16407 Mbits/sec
[  5]   0.50-1.00   sec  1.00 GBytes  8644.5 Mbits/sec    0   3.12 MBytes
[SUM]   0.50-1.00   sec  1.99 GBytes  17119 Mbits/sec    3
[ ID] Interval           Transfer     Bitrate         Retr
[  5]   0.00-3.00   sec  3.05 GBytes  8739 Mbits/sec   13             sender
[SUM]   0.00-3.00   sec  6.06 GBytes  17357 Mbits/sec                  receiver
"""


def test_interval_lines_give_the_whole_transfers_goodput() -> None:
    lines = REPORT.splitlines()
    assert [m for line in lines if (m := interval_mbit(line, 2)) is not None] == [16407.0,
                                                                                   17119.0]
    assert [m for line in lines if (m := interval_mbit(line, 1)) is not None] == [8318.0, 8088.0,
                                                                                   8644.5]


def test_only_sides_that_differ_in_telemetry_alone_can_share_a_run() -> None:
    pace = ARMS["pace"]
    assert toggle_sides(pace, ("none", "telemetry")) == ("telemetry", "none")
    assert toggle_sides(pace, ("cap+telemetry", "cap")) == ("cap+telemetry", "cap")
    assert toggle_sides(ARMS["telemetry"], ("off", "on")) == ("on", "off")
    for arm, block in ((pace, ("cap", "telemetry")), (ARMS["acks"], ("off", "on"))):
        with pytest.raises(SystemExit, match="differ in more than telemetry"):
            toggle_sides(arm, block)

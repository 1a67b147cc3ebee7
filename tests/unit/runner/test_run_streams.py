"""How many streams `tamebpf run` says a destination got (runner/bytecount.py
Moved): connections that moved data in two readings in a row, so that a
control connection's few bytes at the end (iperf3's results, beside the
data streams' tails) do not count as one more stream."""

from __future__ import annotations

from tamebpf.runner.bytecount import Moved

DATA = 2_500_000  # bytes a data stream moves in a reading
TAIL = 40_000  # in the last one, as the transfer ends
RESULTS = 3_000  # iperf3's control connection, sending its results


def counted(readings: list[list[int]]) -> int:
    m = Moved()
    for amounts in readings:
        m.read(amounts)
    return m.counted


def test_four_streams_and_a_control_connection_at_the_end_are_four() -> None:
    readings = [[400, 20_000, 20_000, 20_000, 20_000]] + [[DATA] * 4] * 6 + \
        [[TAIL] * 4 + [RESULTS]]
    assert counted(readings) == 4
    # what a count of one reading gave (the last one: 5)
    assert max(sum(1 for a in r if a >= max(r) * 0.01) for r in readings) == 5


def test_streams_that_start_one_by_one_are_counted_once_all_move() -> None:
    assert counted([[DATA], [DATA, DATA], [DATA] * 3, [DATA] * 3, [DATA] * 2]) == 3


def test_a_run_read_once_counts_that_reading() -> None:
    assert counted([[DATA, DATA]]) == 2
    assert counted([[DATA, DATA], []]) == 2
    assert counted([]) == 0


def test_a_pause_between_readings_restarts_the_pair() -> None:
    assert counted([[DATA] * 4, [], [DATA] * 2, [DATA] * 2]) == 2

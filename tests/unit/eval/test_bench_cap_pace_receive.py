"""The download sweep's verdict and table (tamebpf_bench.cap_pace, --direction
receive): pure, no kernel."""

from __future__ import annotations

from typing import Any

import pytest

from tamebpf_bench.cap_pace import held, receive_table


def run(rate: float, rtt: float, mbit: float | None, slowest: float | None = None,
        exit_: int = 0, eperm: bool = False) -> dict[str, Any]:
    return {"rate_mbit": rate, "rtt_ms": rtt, "exit": exit_, "eperm": eperm, "mbit": mbit,
            "slowest_mbit": mbit if slowest is None and mbit is not None else slowest,
            "retransmits": 0, "run_goodput_mbit": None,
            "error": "" if mbit is not None else "iperf3: error - unable to connect"}


@pytest.mark.parametrize(("r", "ok"), [
    (run(20, 10, 18.01), True),
    (run(20, 10, 21.99), True),
    (run(20, 10, 17.9), False),  # 10.5% short
    (run(20, 10, 22.1), False),
    (run(20, 10, 20.0, slowest=9.9), False),  # a second under half of R: a stall
    (run(20, 10, 20.0, exit_=1), False),
    (run(20, 10, 20.0, eperm=True), False),
    (run(20, 10, None, exit_=1), False),  # no report: it never ended
])
def test_held_is_within_ten_percent_to_the_end(r: dict[str, Any], ok: bool) -> None:
    assert held(r) is ok


def test_the_table_has_a_row_a_rate_and_a_column_an_rtt() -> None:
    runs = [run(20, 10, 19.9), run(20, 100, 19.0, slowest=12.0), run(200, 10, 170.0),
            run(200, 100, None, exit_=1)]
    text = receive_table({"link_mbit": 250, "streams": 8, "seconds": 10, "runs": runs}, "CMD")
    lines = text.splitlines()
    assert lines[0] == "<!-- cap_pace_receive_eval:start -->"
    assert lines[-1] == "<!-- cap_pace_receive_eval:end -->"
    assert "| R | RTT 10 ms | RTT 100 ms |" in lines
    assert "| 20 | 19.90 (-0.5%) | 19.00 (-5.0%) |" in lines
    assert "| 200 | 170.00 (-15.0%), not held | exit 1: iperf3: error - unable to connect |" \
        in lines
    assert lines[-2].startswith("2 of 4 within 10% of R, to the end: exit not 0 in some, "
                                "no EPERM, the slowest second 60% of R (R 20 at 100 ms)"), lines[-2]

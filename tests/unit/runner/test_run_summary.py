"""`tamebpf run`'s summary (runner/summary.py) and its command line: pure."""

from __future__ import annotations

import json

import pytest

from tamebpf.cli import main
from tamebpf.runner.summary import Destination, Learned, Summary, render


def summary(**kw: object) -> Summary:
    base: dict[str, object] = {
        "command": "iperf3", "exit_status": 0, "seconds": 8.0,
        "destinations": (Destination("198.18.0.2", 20_000_000, 0, 4, 0.075, 1),),
        "cap_start_mbps": 100.0, "cap_start_from": "--rate", "cap_end_mbps": 100.0,
        "learning": True,
        "learned": (Learned("198.18.0.2", "cubic", 1, 18.7, 19.1, "ack-spacing (transfer)"),)}
    base.update(kw)
    return Summary(**base)  # type: ignore[arg-type]


def test_the_line_says_bytes_goodput_streams_impact_and_what_was_learned() -> None:
    line = render(summary())
    assert line == ("tamebpf run: iperf3 exited 0 after 8.0 s: 20.00 MB to 198.18.0.2 at "
                    "20.0 Mbit/s over 4 streams (estimated impact 7.5%; advised 1); paced "
                    "from 100.0 Mbit/s (--rate); learned: 198.18.0.2 (cubic) advise 1 stream at "
                    "18.7 Mbit/s, capacity 19.1 Mbit/s (ack-spacing (transfer))"), line
    assert "\n" not in line


def test_a_download_nothing_learned_and_a_moved_target() -> None:
    s = summary(destinations=(Destination("10.0.0.9", 0, 3_000, 2),), learned=(),
                not_learned="CMD moved no steady TCP data", cap_end_mbps=50.0)
    line = render(s)
    assert "3.00 kB from 10.0.0.9" in line and "estimated impact" not in line, line
    assert "paced from 100.0 Mbit/s (--rate) to 50.0" in line, line
    assert line.endswith("nothing learned (CMD moved no steady TCP data)"), line
    assert "not learning (--no-learn)" in render(summary(learning=False, learned=()))


def test_a_learned_download_is_named_as_one() -> None:
    learned = Learned("10.0.0.9", "remote", 3, 41.2, 47.5, "data-spacing (transfer)",
                      "receive")
    line = render(summary(destinations=(Destination("10.0.0.9", 1_000, 90_000_000, 3),),
                          learned=(learned,)))
    assert "90.00 MB from 10.0.0.9" in line, line
    assert "learned: downloads from 10.0.0.9 advise 3 streams at 41.2 Mbit/s, capacity " \
        "47.5 Mbit/s (data-spacing (transfer))" in line, line
    assert summary(learned=(learned,)).to_json()["learned"][0]["direction"] == "receive"


def test_json_has_goodput_per_destination() -> None:
    d = summary().to_json()
    json.dumps(d, allow_nan=False)
    assert d["destinations"][0]["goodput_mbps"] == pytest.approx(20.0)
    assert d["learned"][0]["advised_streams"] == 1


@pytest.mark.parametrize("argv", [["run"], ["run", "--"], ["run", "--rate", "0", "--", "true"],
                                  ["run", "--rate", "fast", "--", "true"]])
def test_bad_command_lines_are_usage_errors(argv: list[str],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tamebpf: "), err

"""advise --format: the exact flags printed for each transfer tool."""

from __future__ import annotations

import pytest

from tamebpf.present.toolflags import FORMATS, tool_flags


@pytest.mark.parametrize(("tool", "expected"), [
    ("globus", "-p 6\n"),
    ("rclone", "--transfers 6 --multi-thread-streams 6\n"),
    ("xrdcp", "--streams 6\n"),
    ("fdt", "-P 6\n"),
    ("iperf3", "-P 6\n"),
    ("shell", "6\n"),
])
def test_flags_per_tool(tool: str, expected: str) -> None:
    got = tool_flags(tool, 6)
    assert got == expected, f"{tool}: expected {expected!r}, got {got!r}"


def test_every_format_is_covered() -> None:
    assert set(FORMATS) == {"globus", "rclone", "xrdcp", "fdt", "iperf3", "shell"}


def test_one_stream() -> None:
    assert tool_flags("iperf3", 1) == "-P 1\n"


@pytest.mark.parametrize(("tool", "n"), [("scp", 4), ("iperf3", 0), ("shell", -1)])
def test_rejects_unknown_tool_and_bad_count(tool: str, n: int) -> None:
    with pytest.raises(ValueError):
        tool_flags(tool, n)


def test_cli_refuses_json_with_format(capsys: pytest.CaptureFixture[str]) -> None:
    from tamebpf.cli import main
    code = main(["advise", "127.0.0.1", "--max-impact", "5%", "--json", "--format", "shell"])
    err = capsys.readouterr().err
    assert code == 2, f"expected exit 2 for --json with --format, got {code}: {err}"
    assert "--format" in err, f"error should name --format: {err!r}"

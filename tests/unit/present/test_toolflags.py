"""advise --format: the exact flags printed for each transfer tool, as each
tool's own documentation defines its stream count."""

from __future__ import annotations

import logging

import pytest

from tamebpf.present.toolflags import FORMATS, tool_flags


@pytest.mark.parametrize(("tool", "expected"), [
    ("globus-url-copy", "-p 6\n"),
    # one file at a time, six streams for it (not 6 files x 6 streams)
    ("rclone", "--transfers 1 --multi-thread-streams 6\n"),
    ("xrdcp", "--streams 6\n"),
    ("fdt", "-P 6\n"),
    ("iperf3", "-P 6\n"),
    ("shell", "6\n"),
])
def test_flags_per_tool(tool: str, expected: str) -> None:
    got = tool_flags(tool, 6)
    assert got == expected, f"{tool}: expected {expected!r}, got {got!r}"


def test_every_format_is_listed_under_its_own_name() -> None:
    assert list(FORMATS) == ["globus-url-copy", "rclone", "xrdcp", "fdt", "iperf3", "shell"]


def test_globus_is_a_deprecated_alias(caplog: pytest.LogCaptureFixture) -> None:
    assert "globus" in FORMATS, "the old name should still be accepted"
    with caplog.at_level(logging.WARNING, logger="tamebpf"):
        assert tool_flags("globus", 3) == "-p 3\n"
    assert "deprecated" in caplog.text and "globus-url-copy" in caplog.text, caplog.text


def test_xrdcp_is_clamped_at_15_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="tamebpf"):
        assert tool_flags("xrdcp", 15) == "--streams 15\n"
        assert not caplog.text, caplog.text
        assert tool_flags("xrdcp", 20) == "--streams 15\n"
    assert "at most 15" in caplog.text and "20" in caplog.text, caplog.text


def test_one_stream() -> None:
    assert tool_flags("iperf3", 1) == "-P 1\n"
    assert tool_flags("rclone", 1) == "--transfers 1 --multi-thread-streams 1\n"


@pytest.mark.parametrize(("tool", "n"), [("scp", 4), ("iperf3", 0), ("shell", -1)])
def test_rejects_unknown_tool_and_bad_count(tool: str, n: int) -> None:
    with pytest.raises(ValueError):
        tool_flags(tool, n)


def test_cli_takes_the_new_and_the_old_name() -> None:
    from tamebpf.cli import build_parser
    for name in ("globus-url-copy", "globus"):
        args = build_parser().parse_args(["advise", "h", "--max-impact", "5%", "--format", name])
        assert args.format == name


def test_cli_refuses_json_with_format(capsys: pytest.CaptureFixture[str]) -> None:
    from tamebpf.cli import main
    code = main(["advise", "127.0.0.1", "--max-impact", "5%", "--json", "--format", "shell"])
    err = capsys.readouterr().err
    assert code == 2, f"expected exit 2 for --json with --format, got {code}: {err}"
    assert "--format" in err, f"error should name --format: {err!r}"


@pytest.mark.parametrize(("tool", "expected"), [
    ("globus-url-copy", "-cc 4 -p 2\n"),
    ("rclone", "--transfers 4 --multi-thread-streams 2\n"),
    # xrdcp's parallel jobs to one server share its streams: all 10 stay.
    ("xrdcp", "--parallel 4 --streams 10\n"),
])
def test_concurrency_prints_both_axes(tool: str, expected: str) -> None:
    got = tool_flags(tool, 10, concurrency=4)
    assert got == expected, f"{tool} --concurrency 4, advice 10: expected {expected!r}, got {got!r}"


@pytest.mark.parametrize(("streams", "k"), [(s, k) for s in range(1, 40) for k in (1, 2, 3, 4, 7)])
def test_concurrency_never_exceeds_the_advice(streams: int, k: int) -> None:
    cc, p = map(int, tool_flags("globus-url-copy", streams, concurrency=k).split()[1::2])
    assert cc * p <= streams, f"advice {streams}, K {k}: -cc {cc} -p {p} opens {cc * p}"
    assert cc * (p + 1) > streams, f"advice {streams}, K {k}: -p {p} rounded down too far"
    assert cc == min(k, streams), f"advice {streams}, K {k}: -cc {cc}"


def test_rounding_down_is_said(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="tamebpf"):
        assert tool_flags("globus-url-copy", 8, concurrency=4) == "-cc 4 -p 2\n"
        assert not caplog.text, f"8 = 4 x 2 needs no remark: {caplog.text}"
        tool_flags("globus-url-copy", 10, concurrency=4)
    assert "rounded down" in caplog.text and "8 in all" in caplog.text, caplog.text


@pytest.mark.parametrize("tool", ["iperf3", "fdt", "shell"])
def test_tools_without_a_second_axis_refuse_concurrency(tool: str) -> None:
    with pytest.raises(ValueError, match="one axis only"):
        tool_flags(tool, 6, concurrency=2)


@pytest.mark.parametrize(("argv", "named"), [
    (["--format", "iperf3", "--concurrency", "2"], "one axis only"),
    (["--concurrency", "2"], "--format"),
    (["--format", "rclone", "--concurrency", "0"], "--concurrency"),
    (["--format", "rclone", "--concurrency", "two"], "--concurrency"),
])
def test_cli_refuses_bad_concurrency_before_probing(
        argv: list[str], named: str, capsys: pytest.CaptureFixture[str]) -> None:
    from tamebpf.cli import main
    code = main(["advise", "127.0.0.1", "--max-impact", "5%", "--fresh", *argv])
    err = capsys.readouterr().err
    assert code == 2, f"expected exit 2 for {argv}, got {code}: {err}"
    assert named in err and len(err.strip().splitlines()) <= 2, f"{argv}: {err!r}"

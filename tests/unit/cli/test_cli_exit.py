"""The command line: global flags anywhere, and exit codes that tell advice
(0), an error (1), bad usage (2) and no advice possible (3) apart."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from tamebpf.cli import build_parser, main, subcommand_parsers
from tamebpf.commands import advise
from tamebpf.common.errors import EXIT_STATUS, NoAdviceError, TamebpfError, UsageError
from tamebpf.estimate.record import AdviceRefusal
from tamebpf.present.advice import refusal_text


@pytest.mark.parametrize("argv", [
    ["--log-level", "debug", "flows"],
    ["flows", "--log-level", "debug"],
    ["cap", "--log-level", "debug", "list"],
    ["cap", "list", "--log-level", "debug"],
])
def test_log_level_before_or_after_the_subcommand(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert args.log_level == "debug", argv


def test_a_subcommand_flag_does_not_undo_the_global_one() -> None:
    args = build_parser().parse_args(["--log-format", "json", "export"])
    assert (args.log_format, args.log_level) == ("json", "info")
    args = build_parser().parse_args(["export", "--listen", "127.0.0.1:1", "--log-format", "json"])
    assert args.log_format == "json"


def test_every_subcommand_takes_the_global_flags() -> None:
    for p in subcommand_parsers(build_parser()):
        opts = {o for a in p._actions for o in a.option_strings}
        assert {"--log-format", "--log-level"} <= opts, p.prog


def test_exit_codes_are_distinct_and_documented() -> None:
    assert (TamebpfError.exit_code, UsageError.exit_code, NoAdviceError.exit_code) == (1, 2, 3)
    assert set(EXIT_STATUS) == {0, 1, 2, 3, 130}
    assert issubclass(NoAdviceError, TamebpfError)


def no_preflight(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(advise.preflight, "check", lambda *a, **k: "/")


def test_refused_after_probing_exits_3(monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    no_preflight(monkeypatch)
    monkeypatch.setattr(advise, "run_advice",
                        lambda *a, **k: types.SimpleNamespace(
                            refused=AdviceRefusal("bbr_share_failed", {"error": "too few flows"})))
    code = main(["advise", "127.0.0.1", "--max-impact", "5%", "--format", "shell"])
    assert code == 3, capsys.readouterr().err


def test_an_error_exits_1_and_usage_exits_2(monkeypatch: pytest.MonkeyPatch) -> None:
    no_preflight(monkeypatch)

    def fail(*a: object, **k: object) -> None:
        raise TamebpfError("cannot connect to 127.0.0.1:5201")

    monkeypatch.setattr(advise, "run_advice", fail)
    assert main(["advise", "127.0.0.1", "--max-impact", "5%"]) == 1
    assert main(["advise", "127.0.0.1", "--max-impact", "5%", "--probes", "3,1"]) == 2
    with pytest.raises(SystemExit) as exc:
        main(["advise", "127.0.0.1", "--max-impact", "5%", "--log-level", "loud"])
    assert exc.value.code == 2


def test_no_advice_is_said_once(monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str],
                                tmp_path: Path) -> None:
    """The reason goes into the report on stdout; stderr's one line points
    at it instead of printing it a second time (issue 30)."""
    from tamebpf.estimate.advice import build
    from tamebpf.model import Settings
    from tests.unit.advise.test_advise_report import TARGET, probe

    no_preflight(monkeypatch)
    refused = build(TARGET, [probe(1, 50.0, cc="bbr"), probe(10, 200.0, cc="bbr")],
                    Settings(max_impact=0.10))
    assert refused.refused
    why = refusal_text(refused.refused)
    monkeypatch.setattr(advise, "run_advice", lambda *a, **k: refused)
    code = main(["advise", "127.0.0.1", "--max-impact", "10%", "--state-dir", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 3
    assert why in out
    assert why not in err and "the reason is above" in err, err

"""What a command line loads before it answers (docs/performance.md, "Startup").

`tamebpf --help`, `tamebpf CMD --help` and a mistyped option are answered
by the parsers alone (tamebpf/parsers/, tamebpf/common/defaults.py): no command's
code, no advisor, kernel layer, model or path memory. A command that runs
loads its own module (tamebpf/commands/) and what that needs, not the other
commands'. Each case runs in a fresh interpreter, whose sys.modules then
lists everything the command line imported.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tamebpf.cli import build_parser, command_names

# The slow ones of the old startup, which imported every command's code
# (python -X importtime -m tamebpf --help, cumulative): the advisor and its
# probes and path memory, the cap table and view, `run`'s session, the flow
# reader, the aggregator, the model, and the stdlib they pull in.
HEAVY = (
    "tamebpf.advise.advisor",
    "tamebpf.advise.memory",
    "tamebpf.advise.probes",
    "tamebpf.cap.table",
    "tamebpf.cap.view",
    "tamebpf.runner.session",
    "tamebpf.kernel.flows",
    "tamebpf.groups.aggregate",
    "tamebpf.paths.store",
    "tamebpf.estimate.record",
    "tamebpf.model",
    "http.client",
    "sqlite3",
)

# Runs main(ARGV) with its output set aside, then prints the exit status and
# the modules loaded, as JSON.
CHILD = """
import io, json, sys
from tamebpf.cli import main
argv = json.loads(sys.argv[1])
sys.stdout = sys.stderr = io.StringIO()
try:
    code = main(argv)
except SystemExit as exit:
    code = exit.code
sys.__stdout__.write(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def loaded(argv: list[str], state_dir: Path) -> tuple[int, set[str]]:
    """(exit status, modules imported) of `tamebpf ARGV` in a fresh interpreter."""
    res = subprocess.run([sys.executable, "-c", CHILD, json.dumps(argv)], capture_output=True,
                         text=True, timeout=60,
                         env={**os.environ, "TAMEBPF_STATE_DIR": str(state_dir)})
    assert res.returncode == 0, res.stderr[-2000:]
    got = json.loads(res.stdout)
    return got["code"], set(got["modules"])


def commands_loaded(modules: set[str]) -> set[str]:
    return {m for m in modules if m.startswith("tamebpf.commands.")}


@pytest.mark.parametrize("argv", [
    [],
    ["--help"],
    ["advise", "--help"],
    ["cap", "list", "--help"],
    ["cap"],
    ["paths", "--help"],
    ["paths", "forget", "--help"],
    ["run", "--help"],
    ["watch", "--sort", "nosuch"],  # a mistyped value: argparse's usage error
    ["export", "--no-such-option"],
], ids=lambda argv: " ".join(argv) or "no arguments")
def test_help_and_usage_errors_load_no_command(argv: list[str], tmp_path: Path) -> None:
    code, modules = loaded(argv, tmp_path)
    assert code in (0, 2), f"tamebpf {argv}: exit {code}"
    commands = sorted(commands_loaded(modules))
    assert commands == [], f"tamebpf {argv} imported {commands}"
    heavy = sorted(set(HEAVY) & modules)
    assert heavy == [], f"tamebpf {argv} imported {heavy}: building the parsers should not"


@pytest.mark.parametrize(("argv", "own"), [
    (["paths", "list"], "paths"),
    (["predict", "--probe", "1:50", "--probe", "10:200", "--json"], "predict"),
])
def test_a_command_loads_its_own_module_only(argv: list[str], own: str, tmp_path: Path) -> None:
    code, modules = loaded(argv, tmp_path)
    assert code == 0, f"tamebpf {argv}: exit {code}"
    assert commands_loaded(modules) == {f"tamebpf.commands.{own}"}, sorted(modules)
    for other in ("tamebpf.advise.advisor", "tamebpf.kernel.flows", "tamebpf.runner.session",
                  "tamebpf.cap.table"):
        assert other not in modules, f"tamebpf {argv} imported {other}"


def verbs(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The (sub-)commands directly below parser, by name."""
    return {name: child for a in parser._actions if isinstance(a, argparse._SubParsersAction)
            for name, child in a.choices.items()}


def test_every_parser_names_a_function_of_its_command_module() -> None:
    """`run` is a name, looked up only when the command runs: a typo would
    show only then, so every parser's is checked here."""
    for name, parser in verbs(build_parser()).items():
        module = importlib.import_module(f"tamebpf.commands.{name}")
        stack = [parser]
        while stack:
            p = stack.pop()
            below = list(verbs(p).values())
            stack += below
            run = p.get_default("run")
            if run is None:
                assert below, f"{p.prog} has neither a function nor verbs"
                continue
            assert callable(getattr(module, run, None)), \
                f"{p.prog}: tamebpf.commands.{name} has no function {run!r}"


def test_every_parser_module_has_a_command_module() -> None:
    commands = {p.stem for p in Path(importlib.import_module("tamebpf.commands").__file__)
                .parent.glob("*.py") if p.stem != "__init__"}
    assert set(command_names()) == commands

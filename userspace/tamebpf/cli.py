"""Command-line entry point: one sub-command per module in tamebpf.parsers.

Each parser module defines ``register(subparsers)``, which adds its parser
and sets ``run``: the name of the function in the tamebpf.commands module of
the same name that runs it (taking the parsed namespace, returning an exit
code). Only that one command module is imported, and only once the arguments
parsed: `tamebpf --help` and a mistyped option load no command's code
(docs/performance.md, "Startup"). Modules are discovered, so adding a command
is adding a parser module and a command module.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import re
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

import tamebpf.parsers
from tamebpf import __version__
from tamebpf.common import logs
from tamebpf.common.errors import TamebpfError

# The order shown in --help; commands not listed here follow, by name.
ORDER = ("watch", "advise", "run", "paths", "predict", "cap", "site", "flows", "export")


def command_names() -> list[str]:
    found = {m.name for m in pkgutil.iter_modules(tamebpf.parsers.__path__)}
    return [n for n in ORDER if n in found] + sorted(found - set(ORDER))


class Parser(argparse.ArgumentParser):
    """argparse, but a word that starts with '-' and a digit or '.' is a
    value (--rate -5M, --max-impact -5%, --probe -1:50), so its own parser
    names what is wrong with it; argparse takes only plain negative numbers
    as values and says "expected one argument" for the rest. No option of
    ours is named like a number, so nothing is lost."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._negative_number_matcher = re.compile(r"^-[0-9.]")
        self._words: list[str] = []

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None
                         ) -> tuple[argparse.Namespace, list[str]]:
        self._words = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(self._words, namespace)

    def error(self, message: str) -> NoReturn:
        wanted = re.fullmatch(r"argument (--[a-z-]+)(/\S+)?: expected one argument", message)
        if wanted and self._followed_by_dash(wanted.group(1)):
            message += (f" (a value that starts with '-' goes after '=': "
                        f"{wanted.group(1)}=-VALUE)")
        super().error(message)

    def _followed_by_dash(self, option: str) -> bool:
        after = [self._words[i + 1] for i, w in enumerate(self._words[:-1]) if w == option]
        return any(w.startswith("-") for w in after)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="tamebpf",
        description=(
            "How many parallel TCP streams to use toward a destination, "
            "measured from the kernel with eBPF."
        ),
    )
    parser.add_argument("--version", action="version", version=f"tamebpf {__version__}")
    add_global_options(parser, defaults=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in command_names():
        importlib.import_module(f"tamebpf.parsers.{name}").register(sub)
    for child in subcommand_parsers(parser):
        add_global_options(child, defaults=False)
    return parser


def add_global_options(parser: argparse.ArgumentParser, defaults: bool) -> None:
    """--log-format and --log-level. The top-level parser holds the defaults;
    every (sub-)command takes them too, so `tamebpf export --log-format json`
    works as well as `tamebpf --log-format json export`. A sub-command's copy
    sets nothing unless given (SUPPRESS), so it cannot undo the top-level one."""
    fmt_default = "text" if defaults else argparse.SUPPRESS
    level_default = "info" if defaults else argparse.SUPPRESS
    parser.add_argument("--log-format", choices=logs.FORMATS, default=fmt_default,
                        help="how warnings from long-running commands are written to stderr "
                        "(default text; json: one object per line)")
    parser.add_argument("--log-level", choices=logs.LEVELS, default=level_default,
                        help="least severe log record shown (default info)")


def subcommand_parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every (sub-)command's parser below parser, depth first."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found += [child, *subcommand_parsers(child)]
    return found


def innermost(parser: argparse.ArgumentParser,
              args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the (sub-)command that args chose, e.g. `cap set`'s."""
    while True:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        name = getattr(args, subs[0].dest, None) if subs else None
        if not subs or name not in subs[0].choices:
            return parser
        parser = subs[0].choices[name]


def command_function(command: str, name: str) -> Callable[[argparse.Namespace], int]:
    """The function NAME of tamebpf.commands.COMMAND, imported now: the one
    command that runs is the one whose code is loaded."""
    function: Callable[[argparse.Namespace], int] = getattr(
        importlib.import_module(f"tamebpf.commands.{command}"), name)
    return function


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        # argparse would report these with the top-level usage; the command's
        # own usage says what it does take.
        owner = innermost(parser, args)
        owner.error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "run", None):
        # No command, or a command of verbs without one (`tamebpf cap`): its help.
        innermost(parser, args).print_help(sys.stderr)
        return 2
    logs.setup(args.log_format, args.log_level)
    try:
        code: int = command_function(args.command, args.run)(args)
        return code
    except TamebpfError as err:
        print(f"tamebpf: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("tamebpf: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0

"""Command-line entry point: one sub-command per module in tamebpf.commands.

Each command module defines ``register(subparsers)``, which adds its parser
and sets ``func`` (taking the parsed namespace, returning an exit code).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from tamebpf import __version__
from tamebpf.errors import TamebpfError

# Order is the order shown in --help.
COMMANDS = ("flows", "predict")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tamebpf",
        description=(
            "How many parallel TCP streams to use toward a destination, "
            "measured from the kernel with eBPF."
        ),
    )
    parser.add_argument("--version", action="version", version=f"tamebpf {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        module = importlib.import_module(f"tamebpf.commands.{name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        code: int = args.func(args)
        return code
    except TamebpfError as err:
        print(f"tamebpf: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("tamebpf: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0

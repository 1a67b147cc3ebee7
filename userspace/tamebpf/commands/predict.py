"""`tamebpf predict`: placeholder until the model lands (issue 3)."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("predict", help="predict throughput and impact from probe results")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    raise SystemExit("tamebpf predict: not implemented yet")

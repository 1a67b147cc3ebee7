"""`tamebpf flows`: placeholder until telemetry lands (issue 2)."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("flows", help="flows throughput and impact from probe results")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    raise SystemExit("tamebpf flows: not implemented yet")

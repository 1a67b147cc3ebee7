"""`tamebpf watch`'s arguments (tamebpf/commands/watch.py runs it)."""

from __future__ import annotations

import argparse
from typing import Any

from tamebpf.common.defaults import SORT_KEYS
from tamebpf.options import add_reader_arguments, add_state_dir_option

EPILOG = """\
examples:
  tamebpf watch                          live view; h for keys, q to quit
  tamebpf watch --once                   one refresh, printed
  tamebpf watch --json | jq .            one JSON object per group per refresh

A group is a process name (or a cgroup, --group-by cgroup) and a destination
address.  STRMS counts established flows that sent data in the last interval.
ADVICE appears once a group was seen at two or more stream counts: the model
of docs/model.md fitted to the goodput seen (no probes are sent).  See
docs/watch.md.
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "watch",
        help="live view of TCP transfers and how many streams they should use (root)",
        description="A top-like view of TCP transfers grouped by process (or cgroup) and "
        "destination: streams, goodput, loss, RTT, congestion control, and the model's "
        "advice fitted passively from what each group did.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_reader_arguments(p)
    p.add_argument("--interval", default="1", metavar="SEC",
                   help="seconds between refreshes (default 1)")
    p.add_argument("--sort", choices=SORT_KEYS, default="goodput", help="initial sort order")
    p.add_argument("--filter", default="", metavar="TEXT",
                   help="only groups whose process, cgroup, destination or CC contains TEXT")
    p.add_argument("--all", action="store_true",
                   help="also groups whose flows sent nothing in the last interval")
    p.add_argument("--json", action="store_true",
                   help="one JSON object per group per refresh, for pipes")
    p.add_argument("--iterations", metavar="N",
                   help="print N refreshes and exit (no live screen)")
    p.add_argument("--once", action="store_const", const=1, dest="iterations",
                   help="print one refresh and exit (--iterations 1)")
    add_state_dir_option(p)
    p.set_defaults(run="run")

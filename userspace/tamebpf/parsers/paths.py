"""`tamebpf paths`'s arguments: list and forget (tamebpf/commands/paths.py runs them)."""

from __future__ import annotations

import argparse
from typing import Any

from tamebpf.options import add_state_dir_option


def register(sub: Any) -> None:
    p = sub.add_parser(
        "paths",
        help="what path memory knows: the last advice per path; 'paths forget' removes it",
        description="List path memory: per path (destination prefix, network namespace, "
        "congestion control) the newest advice, its age and source, the capacity, "
        "competing flows and RTT it rests on (docs/paths.md). `advise` answers from an "
        "entry younger than its --max-age without sending anything.")
    add_state_dir_option(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(run="run_list")
    verbs = p.add_subparsers(dest="paths_command", metavar="{list,forget}")
    ls = verbs.add_parser("list", help="list the paths remembered (the default)",
                          description="List the newest entry of every path remembered.")
    add_state_dir_option(ls, sub=True)
    ls.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                    help="print JSON instead of a table")
    ls.set_defaults(run="run_list")
    fg = verbs.add_parser("forget", help="remove remembered paths: --dest CIDR or --all",
                          description="Remove path memory's entries for destinations "
                          "inside CIDR (every namespace and congestion control), or all of "
                          "them; the next advise to such a destination probes.")
    add_state_dir_option(fg, sub=True)
    which = fg.add_mutually_exclusive_group(required=True)
    which.add_argument("--dest", metavar="CIDR",
                       help="an address or prefix: 198.51.100.7, 198.51.100.0/24, 2001:db8::/32")
    which.add_argument("--all", action="store_true", help="every entry")
    fg.set_defaults(run="run_forget")

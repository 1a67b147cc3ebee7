"""`tamebpf flows`: one snapshot of TCP flows, measured in the kernel."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tamebpf.kernel.flows import FlowReader
from tamebpf.options import dump_json_objects
from tamebpf.present.flows import render_table
from tamebpf.records import FLOW_JSON_ORDER


def register(sub: Any) -> None:
    p = sub.add_parser(
        "flows",
        help="one snapshot of TCP flows, measured in the kernel (root)",
        description="Print every TCP flow in a cgroup v2 subtree with the kernel's own "
        "counters: RTT, retransmits, segments, bytes, cwnd, congestion control, owner.",
    )
    p.add_argument("--cgroup", metavar="PATH",
                   help="cgroup v2 subtree (absolute or relative to the cgroup2 root); "
                   "default: every cgroup")
    p.add_argument("--netns", metavar="NAME", action="append", default=[],
                   help="read flows in this network namespace ('ip netns' name or a "
                   "path such as /proc/PID/ns/net); repeatable; default: our own")
    p.add_argument("--json", action="store_true", help="a JSON array of flow objects")
    p.add_argument("-v", "--verbose", action="store_true", help="libbpf's debug log on stderr")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    with FlowReader(cgroup=args.cgroup, netns=args.netns, verbose=args.verbose) as reader:
        if args.json:
            # Straight from the records to JSON: no Flow object per flow.
            rows = reader.snapshot_rows()
        else:
            flows = reader.snapshot()
        stats = reader.stats()
    if args.json:
        dump_json_objects(FLOW_JSON_ORDER, rows, sys.stdout)
    else:
        sys.stdout.write(render_table(flows))
    if stats.closed_dropped:
        print(f"tamebpf: {stats.closed_dropped} closed flows were dropped (map full)",
              file=sys.stderr)
    return 0


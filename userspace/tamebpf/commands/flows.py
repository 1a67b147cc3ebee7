"""`tamebpf flows`: one snapshot of TCP flows, measured in the kernel."""

from __future__ import annotations

import argparse
import sys

from tamebpf.common.records import FLOW_JSON_ORDER
from tamebpf.kernel.flows import FlowReader
from tamebpf.options import dump_json_objects
from tamebpf.present.flows import render_table


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


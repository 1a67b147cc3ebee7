"""`tamebpf flows`'s arguments (tamebpf/commands/flows.py runs it)."""

from __future__ import annotations

from typing import Any


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
    p.set_defaults(run="run")

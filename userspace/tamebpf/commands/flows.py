"""`tamebpf flows`: one snapshot of TCP flows, measured in the kernel."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from tamebpf.kernel.flows import Flow, FlowReader
from tamebpf.options import dump_json

# The JSON keys the issue promises, in this order, then every other field.
JSON_KEYS = (
    "cookie", "pid", "comm", "cgroup_id", "cgroup", "family", "local_addr", "local_port",
    "remote_addr", "remote_port", "state", "congestion_control", "srtt_us", "rttvar_us",
    "min_rtt_us", "segs_out", "data_segs_out", "total_retrans", "bytes_acked",
    "bytes_received", "snd_cwnd", "snd_ssthresh", "mss", "delivery_rate_bps", "age_s",
)


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
        flows = reader.snapshot()
        stats = reader.stats()
    if args.json:
        dump_json([flow_json(f) for f in flows], sys.stdout)
    else:
        sys.stdout.write(render_table(flows))
    if stats.closed_dropped:
        print(f"tamebpf: {stats.closed_dropped} closed flows were dropped (map full)",
              file=sys.stderr)
    return 0


def flow_json(flow: Flow) -> dict[str, Any]:
    data = flow.to_json()
    ordered = {k: data.pop(k) for k in JSON_KEYS}
    ordered.update(data)
    return ordered


def _endpoint(addr: str, port: int) -> str:
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


def _opt(value: float | int | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


COLUMNS = (
    ("PID", 7), ("COMM", 15), ("LOCAL", 21), ("REMOTE", 21), ("STATE", 11), ("CC", 5),
    ("SRTT_MS", 8), ("RETRANS", 7), ("DATA_SEGS", 9), ("LOSS%", 6), ("MBIT/S", 8),
    ("CWND", 6), ("AGE_S", 7),
)


def render_table(flows: Sequence[Flow]) -> str:
    """Plain text, one flow a line, sorted by process then destination."""
    head = " ".join(f"{name:<{w}}" if i < 6 else f"{name:>{w}}"
                    for i, (name, w) in enumerate(COLUMNS))
    lines = [head.rstrip()]
    for f in sorted(flows, key=lambda f: (f.comm or "~", f.pid or 0, f.remote_addr,
                                          f.remote_port, f.local_port)):
        rate = None if f.delivery_rate_bps is None else f.delivery_rate_bps / 1e6
        cells = (
            _opt(f.pid, "d"), (f.comm or "-")[:15], _endpoint(f.local_addr, f.local_port),
            _endpoint(f.remote_addr, f.remote_port), f.state + ("*" if f.closed else ""),
            (f.congestion_control or "-")[:5],
            _opt(None if f.srtt_us is None else f.srtt_us / 1000, ".3f"),
            str(f.total_retrans), str(f.data_segs_out),
            _opt(None if f.loss_rate is None else f.loss_rate * 100, ".2f"),
            _opt(rate, ".1f"), str(f.snd_cwnd), _opt(f.age_s, ".1f"),
        )
        widths = [w for _, w in COLUMNS]
        lines.append(" ".join(f"{c:<{w}}" if i < 6 else f"{c:>{w}}"
                              for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip())
    if len(lines) == 1:
        lines.append("(no TCP flows)")
    lines.append(f"{len(flows)} flows; * closed since the last read; MBIT/S is the kernel's "
                 "delivery-rate sample")
    return "\n".join(lines) + "\n"

"""`tamebpf export`: Prometheus metrics per transfer group, and a JSON-lines sink.

The metrics are read from the kernel at scrape time (tamebpf.present.prometheus); the
list is docs/metrics.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import threading
import time
from collections.abc import Iterator
from typing import IO, Any

from prometheus_client import start_http_server

from tamebpf.errors import TamebpfError, UsageError
from tamebpf.groups import Aggregator
from tamebpf.kernel.caps_view import cap_table, read_caps
from tamebpf.kernel.flows import FlowReader
from tamebpf.lifecycle import terminate_as_exit
from tamebpf.logs import log
from tamebpf.options import add_reader_arguments, parse_host_port, settings_from
from tamebpf.present.prometheus import Reading, TamebpfCollector, make_registry
from tamebpf.present.watch import group_to_json
from tamebpf.values import parse_count, parse_duration

DEFAULT_LISTEN = "127.0.0.1:9477"
DEFAULT_MAX_GROUPS = 1000

EPILOG = f"""\
examples:
  tamebpf export                         metrics on http://{DEFAULT_LISTEN}/metrics
  tamebpf export --listen 0.0.0.0:9477   every interface (mind who can read them)
  tamebpf export --listen off --jsonl /var/log/tamebpf.jsonl --interval 10

Every metric, its unit and labels: docs/metrics.md.  Series are per group
(process or cgroup, and destination); --per-flow adds one series per flow.
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "export",
        help="Prometheus metrics of TCP transfers and advice (root)",
        description="Serve Prometheus metrics per transfer group (process or cgroup, and "
        "destination): flows, bytes, segments, retransmissions, RTT, the passive advice and "
        "caps, and the exporter's own health; optionally write them as JSON lines.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_reader_arguments(p)
    p.add_argument("--listen", default=DEFAULT_LISTEN, metavar="ADDR:PORT",
                   help=f"where to serve /metrics (default {DEFAULT_LISTEN}, loopback only; "
                   "port 0 picks a free one; 'off' serves nothing)")
    p.add_argument("--jsonl", metavar="FILE",
                   help="also append one JSON object per group every --interval to FILE "
                   "('-' for standard output)")
    p.add_argument("--interval", default="10", metavar="SEC",
                   help="seconds between JSON-lines records (default 10)")
    p.add_argument("--per-flow", action="store_true",
                   help="also one series per open flow (label cardinality grows with flows)")
    p.add_argument("--max-groups", default=str(DEFAULT_MAX_GROUPS), metavar="N",
                   help="keep at most N groups; idle ones beyond are forgotten, oldest "
                   f"first (default {DEFAULT_MAX_GROUPS})")
    p.set_defaults(func=run)


MIN_INTERVAL_S, MAX_INTERVAL_S = 0.01, 86400.0  # a JSON line at most every 10 ms, at least daily


def parse_listen(text: str) -> tuple[str, int] | None:
    """'127.0.0.1:9477', '[::1]:9477', ':9477' (every address) or 'off'."""
    if text == "off":
        return None
    if ":" not in text:
        raise UsageError(f"bad --listen {text!r}: expected ADDR:PORT, e.g. {DEFAULT_LISTEN}")
    return parse_host_port(text, "--listen", empty_host="0.0.0.0", port_zero=True)


def run(args: argparse.Namespace) -> int:
    listen = parse_listen(args.listen)
    if listen is None and not args.jsonl:
        raise UsageError("nothing to do: --listen off and no --jsonl FILE")
    interval = parse_duration(args.interval, "--interval", MIN_INTERVAL_S, MAX_INTERVAL_S)
    max_groups = parse_count(args.max_groups, "--max-groups", 1)
    agg = Aggregator(args.group_by, settings_from(args), max_groups=max_groups)
    try:
        with terminate_as_exit(), FlowReader(cgroup=args.cgroup, netns=args.netns,
                                             verbose=args.verbose, command="export") as reader:
            collector = TamebpfCollector(reader, agg, per_flow=args.per_flow, caps=read_caps,
                                         cap_table=cap_table)
            with serving(collector, listen), sink(args.jsonl) as out:
                if out is None:
                    threading.Event().wait()
                else:
                    write_jsonl(collector, out, interval)
    except KeyboardInterrupt:
        pass
    return 0


@contextlib.contextmanager
def serving(collector: TamebpfCollector, listen: tuple[str, int] | None) -> Iterator[None]:
    if listen is None:
        yield
        return
    registry = make_registry(collector)
    host, port = listen
    try:
        server, thread = start_http_server(port, host, registry)
    except OSError as err:
        raise TamebpfError(f"cannot listen on {host}:{port}: {err.strerror}",
                           "pick another --listen ADDR:PORT") from None
    addr, bound_port = str(server.server_address[0]), server.server_address[1]
    shown = f"[{addr}]" if ":" in addr else addr
    log.info("serving metrics on http://%s:%d/metrics", shown, bound_port,
             extra={"event": "listening", "port": bound_port})
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@contextlib.contextmanager
def sink(path: str | None) -> Iterator[IO[str] | None]:
    if path is None:
        yield None
    elif path == "-":
        yield sys.stdout
    else:
        try:
            f = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed below
        except OSError as err:
            raise UsageError(f"cannot open --jsonl {path}: {err.strerror}") from None
        try:
            yield f
        finally:
            f.close()


def reading_to_jsonl(r: Reading, programs: int) -> list[dict[str, Any]]:
    """The records of one reading: one per group, then one on the exporter."""
    out: list[dict[str, Any]] = [{"type": "group", **group_to_json(g, r.time_s)}
                                 for g in r.groups]
    st = r.stats
    out.append({
        "type": "exporter",
        "time": round(r.time_s, 3),
        "ok": r.ok,
        "programs_attached": programs,
        "flows": r.open_flows,
        "groups": len(r.groups),
        "read_duration_s": r.duration_s,
        "closed_fill": st.closed_fill if st else None,
        "closed_max": st.closed_max if st else None,
        "closed_dropped": st.closed_dropped if st else None,
        "owners_dropped": st.owners_dropped if st else None,
    })
    return out


def write_jsonl(collector: TamebpfCollector, out: IO[str], interval: float,
                iterations: int | None = None) -> None:
    """Every interval, a fresh reading as JSON lines (on a fixed schedule)."""
    collector.read(0)  # the baseline for the rates
    due = time.monotonic() + interval
    done = 0
    while iterations is None or done < iterations:
        time.sleep(max(0.0, due - time.monotonic()))
        due += interval
        if due <= time.monotonic():
            due = time.monotonic() + interval
        reading = collector.read(0)
        for rec in reading_to_jsonl(reading, len(collector.programs)):
            out.write(json.dumps(rec, allow_nan=False) + "\n")
        out.flush()
        done += 1

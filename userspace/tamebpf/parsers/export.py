"""`tamebpf export`'s arguments (tamebpf/commands/export.py runs it)."""

from __future__ import annotations

import argparse
from typing import Any

from tamebpf.options import add_reader_arguments, add_state_dir_option

DEFAULT_LISTEN = "127.0.0.1:9477"
DEFAULT_MAX_GROUPS = 1000
# Well above any site's scrapers, and what a default descriptor limit allows.
DEFAULT_MAX_CONNECTIONS = 1024

EPILOG = f"""\
examples:
  tamebpf export                         metrics on http://{DEFAULT_LISTEN}/metrics
  tamebpf export --listen 0.0.0.0:9477   every interface (mind who can read them)
  tamebpf export --listen off --jsonl /var/log/tamebpf/flows.jsonl --interval 10
  tamebpf export --listen 0.0.0.0:9477 --web-config /etc/tamebpf/web.yml   TLS, basic auth
  tamebpf export --listen :9478 --netns dtn2 --node dtn2   one node of a container host

Every metric, its unit and labels: docs/metrics.md.  Series are per group
(process or cgroup, and destination) and per site path (the destination's
/24 or /64, and direction); --per-flow adds one series per flow.  Every
series carries the label node (--node), so that a site's Prometheus tells
its nodes apart however it scrapes them.

Signals: SIGTERM and SIGINT stop it cleanly (programs detached, exit 0).
SIGHUP does the same, after one log line (event "hangup"): export has no
reload; options are read at start, so restart it to change them.
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
    p.add_argument("--web-config", metavar="FILE",
                   help="TLS and basic auth for /metrics, in the Prometheus exporter "
                   "toolkit's web config format (tls_server_config: cert_file, key_file; "
                   "basic_auth_users: bcrypt hashes; docs/metrics.md)")
    p.add_argument("--max-connections", default=str(DEFAULT_MAX_CONNECTIONS), metavar="N",
                   help="serve at most N connections at once, closing more at once; each "
                   "has 10 s to send its request (default "
                   f"{DEFAULT_MAX_CONNECTIONS})")
    p.add_argument("--node", metavar="NAME",
                   help="this node's name, the label node of every series: 1-64 letters, "
                   "digits, '.', '_' or '-' (default: [site] node in /etc/tamebpf/tamebpf.toml, "
                   "else the host name)")
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
    p.add_argument("--no-learn", action="store_true",
                   help="do not feed what the transfers do into path memory (by default "
                   "every --interval; docs/paths.md)")
    p.add_argument("--ack-sampling", action="store_true",
                   help="also sample a path's capacity from its transfers' ACKs, in a few "
                   "5-s windows an hour on a path that has none (off by default: on a "
                   "shared path a steady window read the transfer's share; docs/paths.md)")
    add_state_dir_option(p)
    p.set_defaults(run="run")

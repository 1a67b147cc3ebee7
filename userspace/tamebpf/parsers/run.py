"""`tamebpf run`'s arguments (tamebpf/commands/run.py runs it)."""

from __future__ import annotations

import argparse
from typing import Any

from tamebpf.common.defaults import DEFAULT_RATE_MBPS
from tamebpf.options import (
    ExamplesFormatter,
    add_advice_options,
    add_site_options,
    add_state_dir_option,
)

EPILOG = f"""\
examples:
  sudo tamebpf run -- globus-url-copy -p 8 file:///data/big gsiftp://dtn2.example.org/data/
  sudo tamebpf run --max-impact 10% --json=/var/log/run.json -- rclone copy /data remote:data
  sudo tamebpf run --netns blue --rate 500M -- iperf3 -c 198.18.0.2 -P 4 -t 60
  sudo tamebpf run --site http://prometheus.example:9090 -- iperf3 -c 198.18.0.2 -P 8

CMD runs in a cgroup of its own (tamebpf-run-PID below the cgroup v2 root).
Its TCP streams share a pace cap: {DEFAULT_RATE_MBPS:g} Mbit/s (or --rate) until the
destination is known, then path memory's advice for it, then the rate the
cap's scout stream reads on the path, as 'cap set --follow' caps do. The
path's capacity that reading needs comes from path memory, else from the
transfer's ACKs: those of its first 5 s (when the cap did not hold them:
a --rate above the path, or a CMD slow to send), or its scout's. What the
transfer shows is learned into path memory, as 'tamebpf export' learns
from every transfer.

Exit status: CMD's own (128+N when a signal N ended it); 127 when CMD is not
found and 126 when it cannot be executed, as a shell gives; tamebpf's own
failures before CMD starts: 1 or 2 (tamebpf(1), EXIT STATUS).

Ctrl-C, SIGTERM, SIGHUP and SIGQUIT are passed to CMD once; when it has
ended, what it left in the cgroup is killed, then the cap and the cgroup are
removed. One that comes before CMD starts ends the run (128+N); one that
comes while the run tidies waits for the tidy. After a kill -9 of 'tamebpf
run', the next tamebpf command that reads the cap table ('cap list', 'cap
rm', 'cap apply', 'watch', 'export', another 'run') removes the run's cgroup
and caps once no process is left in it (docs/run.md).
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "run",
        help="run a transfer command in its own cgroup, paced and learned from (root)",
        description="Run CMD in a cgroup of its own. Its TCP streams share a pace cap that "
        "follows the destination they send to, and what the transfer shows teaches path "
        "memory, so a later 'tamebpf advise' to that host can answer with no server "
        "there. At the end, one summary line on stderr: bytes, goodput, streams, the "
        "path's estimated impact, and what was learned.",
        epilog=EPILOG,
        formatter_class=ExamplesFormatter,
    )
    p.add_argument("--netns", metavar="NAME",
                   help="run CMD in this network namespace ('ip netns' name or "
                   "/proc/PID/ns/net)")
    p.add_argument("--rate", metavar="RATE",
                   help="the pace cap's target to start from, in Mbit/s or with a unit "
                   f"(500M, 9.4G); default: path memory's advice for the destination, else "
                   f"{DEFAULT_RATE_MBPS:g} Mbit/s")
    add_advice_options(p)
    add_state_dir_option(p)
    add_site_options(p, "pace at this node's share of the site's advised rate on the path, "
                     "re-split as the site's nodes start and stop transfers")
    p.add_argument("--no-learn", action="store_true",
                   help="do not write what the transfer shows into path memory")
    p.add_argument("--json", nargs="?", const="-", metavar="FILE",
                   help="the summary as a JSON object instead of the line: on stderr, or "
                   "written to FILE with --json=FILE (never on CMD's stdout)")
    p.add_argument("-v", "--verbose", action="store_true", help="libbpf's debug log on stderr")
    p.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS...]",
                   help="the command to run, after --")
    p.set_defaults(run="run")

"""`tamebpf run -- CMD`: run a transfer the way tamebpf advises (docs/run.md)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

from tamebpf.defaults import DEFAULT_RATE_MBPS
from tamebpf.errors import UsageError
from tamebpf.kernel.netns import check_netns
from tamebpf.logs import log
from tamebpf.options import (
    JSON_INDENT,
    ExamplesFormatter,
    add_advice_options,
    add_state_dir_option,
    parse_rate_mbps,
    settings_from,
)
from tamebpf.runner.session import RunOptions, Session
from tamebpf.runner.summary import Summary, render

EPILOG = f"""\
examples:
  sudo tamebpf run -- globus-url-copy -p 8 file:///data/big gsiftp://dtn2.example.org/data/
  sudo tamebpf run --max-impact 10% --json=/var/log/run.json -- rclone copy /data remote:data
  sudo tamebpf run --netns blue --rate 500M -- iperf3 -c 198.18.0.2 -P 4 -t 60

CMD runs in a cgroup of its own (tamebpf-run-PID below the cgroup v2 root).
Its TCP streams share a pace cap: {DEFAULT_RATE_MBPS:g} Mbit/s (or --rate) until the
destination is known, then path memory's advice for it, then the rate the
cap's scout stream reads on the path, as 'cap set --follow' caps do (when
path memory holds the path's capacity). What the transfer shows is learned
into path memory, as 'tamebpf export' learns from every transfer; the
path's capacity, if path memory has none, from the ACKs of its first 5 s
(when the cap did not hold it: a --rate above the path).

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
    p.add_argument("--no-learn", action="store_true",
                   help="do not write what the transfer shows into path memory")
    p.add_argument("--json", nargs="?", const="-", metavar="FILE",
                   help="the summary as a JSON object instead of the line: on stderr, or "
                   "written to FILE with --json=FILE (never on CMD's stdout)")
    p.add_argument("-v", "--verbose", action="store_true", help="libbpf's debug log on stderr")
    p.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS...]",
                   help="the command to run, after --")
    p.set_defaults(func=run)


def command_of(argv: list[str]) -> list[str]:
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise UsageError("no command to run", "give it after --: tamebpf run -- CMD [ARGS...]")
    return argv


def run(args: argparse.Namespace) -> int:
    argv = command_of(args.argv)
    settings = settings_from(args)
    rate = None if args.rate is None else parse_rate_mbps(args.rate, "--rate")
    if rate is not None and rate <= 0:
        raise UsageError(f"--rate {args.rate}: give a rate above 0")
    if args.netns is not None:
        check_netns(args.netns)
    if args.json not in (None, "-"):
        check_writable(args.json)
    if args.log_level == "info":
        # What following does step by step is news for a service's log, not
        # for the user of one command: the summary says it (--log-level
        # debug shows the steps).
        log.setLevel(logging.WARNING)
    session = Session(RunOptions(argv, settings, args.netns, rate, args.state_dir,
                                 not args.no_learn, args.verbose))
    status, summary = session.run()
    report(summary, args.json)
    return status


def check_writable(path: str) -> None:
    """--json=FILE can be written (said before CMD runs, not after)."""
    try:
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as err:
        raise UsageError(f"--json={path}: {err.strerror}") from None


def report(summary: Summary, json_to: str | None) -> None:
    if json_to is None:
        print(render(summary), file=sys.stderr)
        return
    text = json.dumps(summary.to_json(), indent=JSON_INDENT, allow_nan=False) + "\n"
    if json_to == "-":
        sys.stderr.write(text)
        return
    try:
        with open(json_to, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as err:
        print(f"tamebpf: --json={json_to}: {err.strerror}", file=sys.stderr)
        print(render(summary), file=sys.stderr)

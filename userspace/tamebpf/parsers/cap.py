"""`tamebpf cap`'s arguments: set, list, rm and apply (tamebpf/commands/cap.py runs them)."""

from __future__ import annotations

import argparse
from typing import Any

from tamebpf.common.defaults import CONGESTION
from tamebpf.options import ExamplesFormatter, add_site_options

SET_EXAMPLES = """\
examples:
  sudo tamebpf cap set --cgroup dtn.slice --dest 198.18.0.0/15 --max-streams 8
  sudo tamebpf cap set --cgroup dtn.slice --dest 198.51.100.0/24:50000-51000 --max-streams 4
  sudo tamebpf cap set --cgroup dtn.slice --dest 198.18.0.0/15 --mode pace --rate 2G
  sudo tamebpf cap set --cgroup dtn.slice --dest 198.18.0.0/15 --auto 198.18.3.2 --max-impact 5%
  sudo tamebpf cap set --cgroup dtn.slice --dest 198.18.0.0/15 --auto 198.18.3.2 \\
      --max-impact 5% --follow

Caps stay until 'tamebpf cap rm' with the same --cgroup and --dest (docs/cap.md).
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "cap",
        help="cap the TCP streams a cgroup opens to a destination (root)",
        description="Hold a cgroup (with its descendants) to at most N concurrent TCP "
        "streams to a destination network: a connect() over the cap fails at once with "
        "EPERM (--mode refuse); or let every connect() through and pace the streams so "
        "that together they send at most a target rate (--mode pace). Caps stay in "
        "force after tamebpf exits (pinned in bpffs, $TAMEBPF_PIN_DIR or /sys/fs/bpf/tamebpf/cap).",
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB")

    s = verbs.add_parser("set", help="set a cap", description="Set a cap. Streams to the "
                         "destination that already exist are counted at once.",
                         epilog=SET_EXAMPLES, formatter_class=ExamplesFormatter)
    _target_args(s)
    n = s.add_mutually_exclusive_group()
    n.add_argument("--max-streams", metavar="N",
                   help="refuse mode: streams allowed at once (>= 1)")
    n.add_argument("--auto", metavar="HOST[:PORT]",
                   help="ask the advisor ('tamebpf advise HOST --max-impact PCT'): its N "
                   "(refuse mode) or its throughput as the target (pace mode)")
    s.add_argument("--max-impact", metavar="PCT",
                   help="with --auto: largest tolerated loss of other traffic, 5%% or 0.05")
    s.add_argument("--congestion", choices=CONGESTION, default="system",
                   help="with --auto: the probes' congestion control, as the transfers run "
                   "(default: the host's; the advisor gives no advice for BBR)")
    s.add_argument("--mode", choices=("refuse", "pace"), default="refuse",
                   help="refuse: connect()s over N fail with EPERM (default); pace: none "
                   "is refused, the streams together send at most --rate (or the advisor's "
                   "throughput, with --auto), each paced by the kernel")
    s.add_argument("--rate", metavar="RATE",
                   help="pace mode: the group's target, in Mbit/s or with a unit (500M, 9.4G)")
    s.add_argument("--direction", choices=("both", "send", "receive"),
                   help="pace mode: pace what the streams send (their pacing rate), what "
                   "they receive (their receive window) or both (default both)")
    s.add_argument("--follow", action="store_true",
                   help="with --auto: keep the cap on the path as it changes ('tamebpf "
                   "export' recomputes a pace target from a scout stream, a refuse N from "
                   "the streams' goodput, for new connects; docs/paths.md)")
    add_site_options(s, "with --follow and --mode pace: the target is this node's share of "
                     "the site's advised rate on the path, re-split as the site's nodes start "
                     "and stop transfers ('tamebpf export' on this node keeps it)")
    s.add_argument("--all-processes", action="store_true",
                   help="with --cgroup /: yes, cap every process on the host")
    s.add_argument("--json", action="store_true", help="the cap set, as a JSON object")
    s.add_argument("-v", "--verbose", action="store_true", help="libbpf's debug log on stderr")
    s.set_defaults(run="run_set")

    ls = verbs.add_parser("list", help="caps in force, with live streams, refusals and rate",
                          description="Caps in force: mode, limit (streams or pace target), "
                          "live streams, refused connect()s, and the rate the cap's streams "
                          "send at now (bytes acked over --window, in every namespace).")
    ls.add_argument("--json", action="store_true", help="a JSON array of cap objects")
    ls.add_argument("--window", default="0.5", metavar="SECONDS",
                    help="how long to measure the live rate (default %(default)s; 0: do not)")
    ls.set_defaults(run="run_list")

    rm = verbs.add_parser("rm", help="remove a cap (the last one removes every program)")
    _target_args(rm)
    rm.add_argument("--json", action="store_true", help="the cap removed, as a JSON object")
    rm.set_defaults(run="run_rm")

    ap = verbs.add_parser("apply", help="make the caps of a TOML file be in force",
                          description="Set every cap of FILE (see docs/cap.md); a cap "
                          "already in force with another N is replaced. All at once or not "
                          "at all: the whole file is checked first, and the kernel switches "
                          "to the new caps in one step. FILE is read whole and used only if "
                          "it held still while read (a file rewritten in place is read "
                          "again for up to 2 s, then refused): edit it by writing a new "
                          "file and renaming it over the old one.")
    ap.add_argument("file", metavar="FILE", help="TOML file of caps (docs/cap.md)")
    ap.add_argument("--prune", action="store_true",
                    help="also remove caps in force that FILE does not list (a FILE with "
                    "no caps is refused, exit 2, unless --allow-empty)")
    ap.add_argument("--allow-empty", action="store_true",
                    help="with --prune: a FILE with no caps removes every cap in force "
                    "(cap apply --prune --allow-empty /dev/null)")
    ap.add_argument("--check", action="store_true",
                    help="only check FILE (syntax, cgroups, limits; auto entries are not "
                    "probed) and change nothing")
    ap.add_argument("--json", action="store_true",
                    help="what changed, as a JSON object (removed, set, kept)")
    ap.add_argument("-v", "--verbose", action="store_true", help="libbpf's debug log on stderr")
    ap.set_defaults(run="run_apply")


def _target_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cgroup", required=True, metavar="PATH",
                   help="cgroup v2 directory, absolute or below the cgroup2 root "
                   "(not the root itself, unless '/' with --all-processes)")
    p.add_argument("--dest", required=True, metavar="CIDR[:PORT[-PORT]]",
                   help="198.18.0.0/15, 198.18.0.2:5201, 198.51.100.0/24:50000-51000, "
                   "fd00::/64, [fd00::/64]:5201")


"""`tamebpf cap`: at most N TCP streams from a cgroup to a destination,
enforced in the kernel at connect() (see docs/cap.md)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

from tamebpf.cap.book import FollowBook, normal_cgroup
from tamebpf.cap.load import parse_capfile
from tamebpf.cap.plan import (
    Plan,
    auto_target,
    changes_of,
    follow_path,
    plan_apply,
    resolve_spec,
    sync_follows,
)
from tamebpf.cap.readfile import read_whole
from tamebpf.cap.show import (
    UNCHANGED,
    checked_line,
    describe,
    kept_line,
    removed,
    render_table,
    set_json,
)
from tamebpf.cap.spec import (
    CapSpec,
    check_cgroup_text,
    check_follow,
    check_max_streams,
    parse_dest,
)
from tamebpf.cap.table import CapChangeError, CapTable, netns_paths, resolve_cgroup
from tamebpf.cap.view import limit_of
from tamebpf.defaults import CONGESTION
from tamebpf.errors import UsageError
from tamebpf.kernel.flows import FlowReader
from tamebpf.lifecycle import terminate_as_interrupt
from tamebpf.logs import log
from tamebpf.options import ExamplesFormatter, dump_json, parse_fraction
from tamebpf.paths.store import state_dir
from tamebpf.records import Cap
from tamebpf.units import mbps_over
from tamebpf.values import IPERF3_PORT, parse_duration, parse_host_port, rate_bytes_per_s

__all__ = ["auto_target", "register", "render_table", "resolve_spec"]


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
    p.set_defaults(func=lambda _args: _usage(p))
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
    s.add_argument("--follow", action="store_true",
                   help="with --auto: keep the cap on the path as it changes ('tamebpf "
                   "export' recomputes a pace target from a scout stream, a refuse N from "
                   "the streams' goodput, for new connects; docs/paths.md)")
    s.add_argument("--all-processes", action="store_true",
                   help="with --cgroup /: yes, cap every process on the host")
    s.add_argument("--json", action="store_true", help="the cap set, as a JSON object")
    s.add_argument("-v", "--verbose", action="store_true", help="libbpf's debug log on stderr")
    s.set_defaults(func=run_set)

    ls = verbs.add_parser("list", help="caps in force, with live streams, refusals and rate",
                          description="Caps in force: mode, limit (streams or pace target), "
                          "live streams, refused connect()s, and the rate the cap's streams "
                          "send at now (bytes acked over --window, in every namespace).")
    ls.add_argument("--json", action="store_true", help="a JSON array of cap objects")
    ls.add_argument("--window", default="0.5", metavar="SECONDS",
                    help="how long to measure the live rate (default %(default)s; 0: do not)")
    ls.set_defaults(func=run_list)

    rm = verbs.add_parser("rm", help="remove a cap (the last one removes every program)")
    _target_args(rm)
    rm.add_argument("--json", action="store_true", help="the cap removed, as a JSON object")
    rm.set_defaults(func=run_rm)

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
    ap.set_defaults(func=run_apply)


def _target_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cgroup", required=True, metavar="PATH",
                   help="cgroup v2 directory, absolute or below the cgroup2 root "
                   "(not the root itself, unless '/' with --all-processes)")
    p.add_argument("--dest", required=True, metavar="CIDR[:PORT[-PORT]]",
                   help="198.18.0.0/15, 198.18.0.2:5201, 198.51.100.0/24:50000-51000, "
                   "fd00::/64, [fd00::/64]:5201")


def _usage(p: argparse.ArgumentParser) -> int:
    p.print_help(sys.stderr)
    return 2


def spec_from_args(args: argparse.Namespace) -> CapSpec:
    """The cap `cap set` asks for, checked as a caps-file entry is."""
    all_processes = bool(getattr(args, "all_processes", False))
    cgroup = check_cgroup_text(args.cgroup, "--cgroup", all_processes)
    dest = parse_dest(args.dest)
    if args.auto is not None:
        if args.max_impact is None:
            raise UsageError("--auto needs --max-impact PCT")
        parse_host_port(args.auto, "--auto", default_port=IPERF3_PORT)
        parse_fraction(args.max_impact, "--max-impact")
    elif args.max_impact is not None:
        raise UsageError("--max-impact goes with --auto")
    elif args.congestion != "system":
        raise UsageError("--congestion goes with --auto")
    follow = bool(getattr(args, "follow", False))
    if follow:
        check_follow(args.auto is not None, "cap set", "--follow", "--auto HOST")
    common: dict[str, Any] = {"all_processes": all_processes, "congestion": args.congestion,
                              "follow": follow}
    if args.mode == "refuse":
        if args.rate is not None:
            raise UsageError("--rate goes with --mode pace")
        if args.max_streams is None and args.auto is None:
            raise UsageError("give --max-streams N or --auto HOST")
        n = None if args.max_streams is None else check_max_streams(args.max_streams)
        return CapSpec(cgroup, dest, max_streams=n, auto=args.auto,
                       max_impact=args.max_impact, **common)
    if args.max_streams is not None:
        raise UsageError("--max-streams goes with --mode refuse",
                         "a pace cap never refuses a connect(); give --rate or --auto")
    if (args.rate is None) == (args.auto is None):
        raise UsageError("--mode pace needs --rate RATE (e.g. 500M) or --auto HOST")
    if args.rate is not None:
        rate_bytes(args.rate)
    return CapSpec(cgroup, dest, auto=args.auto, max_impact=args.max_impact,
                   mode="pace", rate=args.rate, **common)


def rate_bytes(rate: str, option: str = "--rate") -> int:
    """A pace target in bytes/s from a rate as the CLI and caps files take it."""
    return rate_bytes_per_s(rate, option)


def run_set(args: argparse.Namespace) -> int:
    spec = spec_from_args(args)
    table = CapTable("cap set", verbose=args.verbose)
    # a bad cgroup is refused before the advisor runs
    resolve_cgroup(spec.cgroup, spec.all_processes)
    path = follow_path(spec) if spec.follow else None  # refused before probing
    with terminate_as_interrupt():  # --auto probes: nothing of them left behind
        how = resolve_spec(spec)
    cap = table.add(spec.cgroup, spec.dest, how.max_streams, how.pace_bytes_per_s,
                    spec.all_processes)
    for warning in sync_follows([(spec, cap, path)], []):
        log.warning("%s", warning)
    if args.json:
        dump_json(set_json(cap, how), sys.stdout)
    else:
        print(describe(cap, how))
    return 0


def run_rm(args: argparse.Namespace) -> int:
    # Removing never caps anything: '/' needs no confirmation, but an empty
    # or '.' cgroup is still refused (it names no cap).
    check_cgroup_text(args.cgroup, "--cgroup", all_processes=args.cgroup.strip() == "/")
    dest = parse_dest(args.dest)
    cap = CapTable("cap rm").remove(args.cgroup, dest)
    for warning in sync_follows([], [cap]):
        log.warning("%s", warning)
    if args.json:
        dump_json(cap.to_json(), sys.stdout)
    else:
        print(removed(cap))
    return 0


def run_list(args: argparse.Namespace) -> int:
    window = parse_duration(args.window, "--window", 0, 60)
    caps = CapTable("cap list").list()
    rates = live_rates(caps, window) if caps and window > 0 else {}
    follows = FollowBook(state_dir()).specs()
    by_cap = {s.ident: s for s in follows}

    def follow_of(c: Cap) -> dict[str, Any] | None:
        s = by_cap.get((normal_cgroup(c.cgroup), c.dest))
        return None if s is None else s.to_json()
    if args.json:
        dump_json([{**c.to_json(), "live_mbit": rates.get(c.id), "follow": follow_of(c)}
                   for c in caps], sys.stdout)
    else:
        sys.stdout.write(render_table(caps, rates, follows))
    return 0


def live_rates(caps: Sequence[Cap], window_s: float) -> dict[int, float]:
    """Mbit/s each cap's streams send at now: bytes acked over WINDOW_S."""
    with FlowReader(netns=netns_paths(), command="cap list") as reader:
        before = {f.cookie: f.bytes_acked for f in reader.snapshot() if not f.closed}
        t0 = time.monotonic()
        time.sleep(window_s)
        after = [f for f in reader.snapshot() if not f.closed]
        seconds = time.monotonic() - t0
    rates = dict.fromkeys((c.id for c in caps), 0.0)
    limits = [(c.id, lim) for c in caps if (lim := limit_of(c)) is not None]
    for f in after:
        acked = f.bytes_acked - before.get(f.cookie, 0)  # new since: all of it
        if acked <= 0:
            continue  # idle: nothing to add (and most flows of a busy host are)
        for cap_id, lim in limits:
            if lim.matches([f.cgroup], f.remote_addr) and lim.covers_port(f.remote_port):
                rates[cap_id] += mbps_over(acked, seconds)
    return rates


def read_capfile(path: str) -> str:
    """The text of a caps file, read whole while it held still
    (cap/readfile.py); unreadable, not UTF-8 or changing is a usage error."""
    return read_whole(path).text


def refuse_empty_prune(args: argparse.Namespace, specs: Sequence[CapSpec]) -> None:
    """--prune with a file of no caps removes every cap: a file caught
    mid-rewrite, or the wrong file, must not do that unless asked."""
    if args.prune and not specs and not args.allow_empty:
        raise UsageError(f"{args.file} holds no caps, and --prune would remove every cap in "
                         "force (nothing changed)",
                         "give --allow-empty to mean it: 'tamebpf cap apply --prune "
                         "--allow-empty /dev/null' lifts every cap")


def run_apply(args: argparse.Namespace) -> int:
    specs = parse_capfile(read_capfile(args.file), args.file)
    refuse_empty_prune(args, specs)
    table = CapTable("cap apply", verbose=args.verbose)
    with terminate_as_interrupt():  # auto entries probe: nothing of them left behind
        plan = plan_apply(table, specs, args.prune, args.file, probe=not args.check)
    if args.check:
        if args.json:
            dump_json({"file": args.file, "ok": True, "caps": len(specs)}, sys.stdout)
        else:
            print(checked_line(args.file, len(specs)))
        return 0
    result = execute_plan(table, plan, args.file)
    if args.json:
        dump_json({k: v for k, v in result.items() if k != "lines"}, sys.stdout)
    else:
        for line in result["lines"]:
            print(line)
    return 0


def execute_plan(table: CapTable, plan: Plan, name: str = "caps file") -> dict[str, Any]:
    """Switch the plan in at once; what changed, as text lines and JSON."""
    changes = changes_of(plan)
    owners = [i for i, _ in plan.to_remove] + [i for i, _, _ in plan.to_set]
    try:
        done = table.commit(changes) if changes else []
    except CapChangeError as exc:
        entry = owners[exc.index]
        where = f"cap #{entry}" if entry is not None else "pruning"
        raise UsageError(f"{name}: {where}: {exc.message} (nothing changed)", exc.hint) from None
    for warning in sync_follows([(spec, cap, plan.follow_paths.get(i))
                                 for cap, (i, spec, _) in zip(done, plan.to_set, strict=True)],
                                [cap for _, cap in plan.to_remove],
                                unchanged=[(spec, cap, plan.follow_paths.get(i))
                                           for i, spec, cap in plan.unchanged]):
        log.warning("%s", warning)
    lines = [removed(cap) for _, cap in plan.to_remove]
    lines += [describe(cap, how) for cap, (_, _, how) in zip(done, plan.to_set, strict=True)]
    lines += [kept_line(cap, i, why) for i, cap, why in plan.kept]
    if not lines:
        lines.append(UNCHANGED)
    return {
        "lines": lines,
        "removed": [cap.to_json() for _, cap in plan.to_remove],
        "set": [set_json(cap, how) for cap, (_, _, how) in zip(done, plan.to_set, strict=True)],
        "kept": [{**cap.to_json(), "because": why} for _, cap, why in plan.kept],
    }

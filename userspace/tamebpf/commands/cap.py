"""`tamebpf cap`: at most N TCP streams from a cgroup to a destination,
enforced in the kernel at connect() (see docs/cap.md)."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Any

from tamebpf.capfile import CapSpec, check_max_streams, parse_capfile, parse_dest
from tamebpf.errors import TamebpfError, UsageError
from tamebpf.kernel.abi import TB_CAP_MODE_PACE
from tamebpf.kernel.cap import Cap, CapTable, resolve_cgroup
from tamebpf.options import (
    IPERF3_PORT,
    dump_json,
    parse_fraction,
    parse_host_port,
    parse_rate_mbps,
)

NO_ADVISOR = "--auto needs 'tamebpf advise', not available in this build"


def register(sub: Any) -> None:
    p = sub.add_parser(
        "cap",
        help="cap the TCP streams a cgroup opens to a destination (root)",
        description="Hold a cgroup (with its descendants) to at most N concurrent TCP "
        "streams to a destination network: a connect() over the cap fails at once with "
        "EPERM. Caps stay in force after tamebpf exits (pinned in bpffs, "
        "$TAMEBPF_PIN_DIR or /sys/fs/bpf/tamebpf/cap).",
    )
    p.set_defaults(func=lambda _args: _usage(p))
    verbs = p.add_subparsers(dest="verb", metavar="VERB")

    s = verbs.add_parser("set", help="set a cap", description="Set a cap. Streams to the "
                         "destination that already exist are counted at once.")
    _target_args(s)
    n = s.add_mutually_exclusive_group()
    n.add_argument("--max-streams", metavar="N", help="streams allowed at once (>= 1)")
    n.add_argument("--auto", metavar="HOST[:PORT]",
                   help="N from the advisor: 'tamebpf advise HOST --max-impact PCT'")
    s.add_argument("--max-impact", metavar="PCT",
                   help="with --auto: largest tolerated loss of other traffic, 5%% or 0.05")
    s.add_argument("--mode", choices=("refuse", "pace"), default="refuse",
                   help="refuse: connect()s over N fail with EPERM (default); pace: none "
                   "is refused, the streams together send at most --rate")
    s.add_argument("--rate", metavar="RATE",
                   help="pace mode: the group's target, in Mbit/s or with a unit (500M, 9.4G)")
    s.add_argument("-v", "--verbose", action="store_true", help="libbpf's debug log on stderr")
    s.set_defaults(func=run_set)

    ls = verbs.add_parser("list", help="caps in force, with live streams and refusals")
    ls.add_argument("--json", action="store_true", help="a JSON array of cap objects")
    ls.set_defaults(func=run_list)

    rm = verbs.add_parser("rm", help="remove a cap (the last one removes every program)")
    _target_args(rm)
    rm.set_defaults(func=run_rm)

    ap = verbs.add_parser("apply", help="make the caps of a TOML file be in force",
                          description="Set every cap of FILE (see docs/cap.md); a cap "
                          "already in force with another N is replaced. The whole file is "
                          "checked first: one bad entry and nothing changes.")
    ap.add_argument("file", metavar="FILE", help="TOML file of caps (docs/cap.md)")
    ap.add_argument("--prune", action="store_true",
                    help="also remove caps in force that FILE does not list")
    ap.add_argument("-v", "--verbose", action="store_true", help="libbpf's debug log on stderr")
    ap.set_defaults(func=run_apply)


def _target_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cgroup", required=True, metavar="PATH",
                   help="cgroup v2 directory, absolute or below the cgroup2 root")
    p.add_argument("--dest", required=True, metavar="CIDR[:PORT]",
                   help="198.18.0.0/15, 198.18.0.2:5201, fd00::/64, [fd00::/64]:5201")


def _usage(p: argparse.ArgumentParser) -> int:
    p.print_help(sys.stderr)
    return 2


def auto_num_flows(host: str, max_impact: str) -> int:
    """N from the advisor, if this build has it."""
    try:
        advise = importlib.import_module("tamebpf.advise")
    except ImportError:
        raise TamebpfError(NO_ADVISOR) from None
    fn = getattr(advise, "advise_num_flows", None)
    if fn is None:
        raise TamebpfError(NO_ADVISOR)
    impact = parse_fraction(max_impact, "--max-impact")
    name, port = parse_host_port(host, "--auto", default_port=IPERF3_PORT)
    n = fn(name, impact, port)
    return check_max_streams(int(n), "advised stream count")


def _streams(n: int) -> str:
    return f"{n} TCP stream" if n == 1 else f"{n} TCP streams"


def _resolve_n(spec: CapSpec) -> int:
    if spec.max_streams is not None:
        return spec.max_streams
    assert spec.auto is not None and spec.max_impact is not None
    return auto_num_flows(spec.auto, spec.max_impact)


PACE_NO_LIMIT = 2**32 - 1  # max of a pace cap set without --max-streams


def pace_rate_bytes(args: argparse.Namespace) -> int | None:
    """The pace target in bytes/s, or None in refuse mode; checks the options."""
    if args.mode == "refuse":
        if args.rate is not None:
            raise UsageError("--rate goes with --mode pace")
        if args.max_streams is None and args.auto is None:
            raise UsageError("give --max-streams N or --auto HOST")
        return None
    if args.auto is not None:
        raise UsageError("--mode pace with --auto is not implemented yet: give --rate")
    if args.rate is None:
        raise UsageError("--mode pace needs --rate RATE (e.g. 500M)")
    rate = int(parse_rate_mbps(args.rate, "--rate") * 1e6 / 8)
    if rate < 1:
        raise UsageError(f"--rate {args.rate}: too small")
    return rate


def run_set(args: argparse.Namespace) -> int:
    dest = parse_dest(args.dest)
    pace = pace_rate_bytes(args)
    if pace is not None:
        n = PACE_NO_LIMIT if args.max_streams is None else check_max_streams(args.max_streams)
        table = CapTable("cap set", verbose=args.verbose)
        cap = table.add(args.cgroup, dest, n)
        table.set_mode(cap.id, TB_CAP_MODE_PACE, pace)
        print(f"{cap.cgroup}: streams to {cap.dest} paced at {pace * 8 / 1e6:g} Mbit/s "
              f"together ({cap.streams} open now)")
        return 0
    if args.auto is not None:
        if args.max_impact is None:
            raise UsageError("--auto needs --max-impact PCT")
        # Checked now, not after the cgroup and the BPF maps are opened.
        parse_host_port(args.auto, "--auto", default_port=IPERF3_PORT)
        parse_fraction(args.max_impact, "--max-impact")
        spec = CapSpec(args.cgroup, dest, auto=args.auto, max_impact=args.max_impact)
    else:
        if args.max_impact is not None:
            raise UsageError("--max-impact goes with --auto")
        spec = CapSpec(args.cgroup, dest, max_streams=check_max_streams(args.max_streams))
    table = CapTable("cap set", verbose=args.verbose)
    resolve_cgroup(spec.cgroup)  # a bad cgroup is refused before the advisor runs
    n = _resolve_n(spec)
    cap = table.add(spec.cgroup, dest, n)
    print(f"{cap.cgroup}: at most {_streams(cap.max_streams)} to {cap.dest} "
          f"({cap.streams} open now)")
    return 0


def run_rm(args: argparse.Namespace) -> int:
    dest = parse_dest(args.dest)
    cap = CapTable("cap rm").remove(args.cgroup, dest)
    print(f"{cap.cgroup}: cap of {_streams(cap.max_streams)} to {cap.dest} removed")
    return 0


def run_list(args: argparse.Namespace) -> int:
    caps = CapTable("cap list").list()
    if args.json:
        dump_json([c.to_json() for c in caps], sys.stdout)
    else:
        sys.stdout.write(render_table(caps))
    return 0


def run_apply(args: argparse.Namespace) -> int:
    try:
        with open(args.file, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise UsageError(f"cannot read {args.file}: {exc.strerror}") from None
    specs = parse_capfile(text, args.file)
    table = CapTable("cap apply", verbose=args.verbose)
    plan = plan_apply(table, specs, args.prune, args.file)
    for line in execute_plan(table, plan):
        print(line)
    return 0


Plan = tuple[list[tuple[CapSpec, int]], list[Cap]]


def plan_apply(table: CapTable, specs: Sequence[CapSpec], prune: bool,
               name: str = "caps file") -> Plan:
    """Check every entry against the machine (cgroups exist, advisor runs)
    before changing anything: (caps to set with their N, caps to remove)."""
    current = {(c.cgroup_id, c.dest): c for c in table.list()}
    wanted: dict[tuple[int, str], CapSpec] = {}
    to_set: list[tuple[CapSpec, int]] = []
    to_remove: list[Cap] = []
    for i, spec in enumerate(specs, 1):
        try:
            cg = resolve_cgroup(spec.cgroup)
        except UsageError as exc:
            raise UsageError(f"{name}: cap #{i}: {exc.message.replace('--cgroup ', 'cgroup ')}",
                             exc.hint) from None
        key = (cg.id, str(spec.dest))
        if key in wanted:
            raise UsageError(f"{name}: cap #{i}: {spec.dest} on {cg.rel} is listed twice")
        wanted[key] = spec
        n = _resolve_n(spec)
        have = current.get(key)
        if have is not None and have.max_streams == n:
            continue
        if have is not None:
            to_remove.append(have)
        to_set.append((spec, n))
    if prune:
        to_remove += [c for k, c in current.items() if k not in wanted]
    return to_set, to_remove


def execute_plan(table: CapTable, plan: Plan) -> list[str]:
    to_set, to_remove = plan
    lines = []
    for cap in to_remove:
        table.remove(cap.cgroup, parse_dest(cap.dest))
        lines.append(f"{cap.cgroup}: cap of {_streams(cap.max_streams)} to {cap.dest} removed")
    for spec, n in to_set:
        cap = table.add(spec.cgroup, spec.dest, n)
        lines.append(f"{cap.cgroup}: at most {_streams(n)} to {cap.dest} "
                     f"({cap.streams} open now)")
    if not lines:
        lines.append("caps already as in the file")
    return lines


COLUMNS = (("CGROUP", 28), ("DEST", 24), ("MAX", 6), ("STREAMS", 8), ("REFUSED", 8))


def render_table(caps: Sequence[Cap]) -> str:
    """One cap a line; a removed cgroup is shown by its old path and marked."""
    def row(cells: Sequence[str]) -> str:
        return " ".join(f"{c:<{w}}" if i < 2 else f"{c:>{w}}"
                        for i, (c, (_, w)) in enumerate(zip(cells, COLUMNS, strict=True))).rstrip()

    lines = [row([name for name, _ in COLUMNS])]
    for c in caps:
        name = c.cgroup if c.cgroup_exists else f"{c.cgroup} (removed)"
        lines.append(row([name, c.dest, str(c.max_streams), str(c.streams), str(c.refused)]))
    if not caps:
        lines.append("(no caps)")
    return "\n".join(lines) + "\n"

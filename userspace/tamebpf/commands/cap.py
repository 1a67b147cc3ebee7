"""`tamebpf cap`: at most N TCP streams from a cgroup to a destination,
enforced in the kernel at connect() (see docs/cap.md)."""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tamebpf.capfile import CONGESTION, CapSpec, check_max_streams, parse_capfile, parse_dest
from tamebpf.errors import TamebpfError, UsageError
from tamebpf.kernel.cap import PACE_NO_LIMIT, CapTable, netns_paths, resolve_cgroup
from tamebpf.kernel.caps_view import limit_of
from tamebpf.kernel.flows import FlowReader
from tamebpf.options import (
    IPERF3_PORT,
    dump_json,
    parse_fraction,
    parse_host_port,
    parse_rate_mbps,
)
from tamebpf.present.caps import render_table
from tamebpf.records import Cap
from tamebpf.words import count

NO_ADVISOR = "--auto needs 'tamebpf advise', not available in this build"


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
                         "destination that already exist are counted at once.")
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
    s.add_argument("-v", "--verbose", action="store_true", help="libbpf's debug log on stderr")
    s.set_defaults(func=run_set)

    ls = verbs.add_parser("list", help="caps in force, with live streams, refusals and rate",
                          description="Caps in force: mode, limit (streams or pace target), "
                          "live streams, refused connect()s, and the rate the cap's streams "
                          "send at now (bytes acked over --window, in every namespace).")
    ls.add_argument("--json", action="store_true", help="a JSON array of cap objects")
    ls.add_argument("--window", type=float, default=0.5, metavar="SECONDS",
                    help="how long to measure the live rate (default %(default)s; 0: do not)")
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


def auto_target(host: str, max_impact: str, congestion: str = "system") -> tuple[int, float]:
    """(N, Mbit/s) from the advisor, if this build has it."""
    try:
        advise = importlib.import_module("tamebpf.advise")
    except ImportError:
        raise TamebpfError(NO_ADVISOR) from None
    fn = getattr(advise, "advise_target", None)
    if fn is None:
        raise TamebpfError(NO_ADVISOR)
    impact = parse_fraction(max_impact, "--max-impact")
    name, port = parse_host_port(host, "--auto", default_port=IPERF3_PORT)
    n, mbit = fn(name, impact, port, congestion)
    return check_max_streams(int(n), "advised stream count"), float(mbit)


def _streams(n: int) -> str:
    return count(n, "TCP stream")


def spec_from_args(args: argparse.Namespace) -> CapSpec:
    """The cap `cap set` asks for, checked as a caps-file entry is."""
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
    if args.mode == "refuse":
        if args.rate is not None:
            raise UsageError("--rate goes with --mode pace")
        if args.max_streams is None and args.auto is None:
            raise UsageError("give --max-streams N or --auto HOST")
        n = None if args.max_streams is None else check_max_streams(args.max_streams)
        return CapSpec(args.cgroup, dest, max_streams=n, auto=args.auto,
                       max_impact=args.max_impact, congestion=args.congestion)
    if args.max_streams is not None:
        raise UsageError("--max-streams goes with --mode refuse",
                         "a pace cap never refuses a connect(); give --rate or --auto")
    if (args.rate is None) == (args.auto is None):
        raise UsageError("--mode pace needs --rate RATE (e.g. 500M) or --auto HOST")
    if args.rate is not None:
        rate_bytes(args.rate)
    return CapSpec(args.cgroup, dest, auto=args.auto, max_impact=args.max_impact,
                   mode="pace", rate=args.rate, congestion=args.congestion)


def rate_bytes(rate: str, option: str = "--rate") -> int:
    """A pace target in bytes/s from a rate as the CLI and caps files take it."""
    value = int(parse_rate_mbps(rate, option) * 1e6 / 8)
    if value < 1:
        raise UsageError(f"{option} {rate}: too small", "give at least 8 bit/s")
    return value


@dataclass(frozen=True)
class Resolved:
    """A cap spec made concrete: what goes into the kernel."""

    max_streams: int
    pace_bytes_per_s: int | None = None  # None: refuse mode
    advised: tuple[int, float] | None = None  # the advisor's (N, Mbit/s) with auto


def resolve_spec(spec: CapSpec) -> Resolved:
    """Runs the advisor for an auto cap."""
    advised = None
    if spec.auto is not None:
        assert spec.max_impact is not None
        advised = auto_target(spec.auto, spec.max_impact, spec.congestion)
    if spec.mode == "pace":
        rate = (rate_bytes(spec.rate) if spec.rate is not None
                else max(1, int(advised[1] * 1e6 / 8)) if advised else 0)
        if rate < 1:
            raise UsageError("the advisor gave no throughput to pace at", "give --rate")
        return Resolved(PACE_NO_LIMIT, rate, advised)
    n = spec.max_streams if spec.max_streams is not None else advised[0] if advised else 0
    return Resolved(check_max_streams(n), None, advised)


def describe(cap: Cap, how: Resolved | None = None) -> str:
    """One line for a cap just set."""
    if cap.mode == "pace":
        text = (f"{cap.cgroup}: streams to {cap.dest} paced at "
                f"{cap.rate_bytes_per_s * 8 / 1e6:g} Mbit/s together ({cap.streams} open now)")
    else:
        text = (f"{cap.cgroup}: at most {_streams(cap.max_streams)} to {cap.dest} "
                f"({cap.streams} open now)")
    if how is not None and how.advised is not None:
        text += f"; advised {_streams(how.advised[0])} at {how.advised[1]:.2f} Mbit/s"
    return text


def run_set(args: argparse.Namespace) -> int:
    spec = spec_from_args(args)
    table = CapTable("cap set", verbose=args.verbose)
    resolve_cgroup(spec.cgroup)  # a bad cgroup is refused before the advisor runs
    how = resolve_spec(spec)
    cap = table.add(spec.cgroup, spec.dest, how.max_streams, how.pace_bytes_per_s)
    print(describe(cap, how))
    return 0


def removed(cap: Cap) -> str:
    if cap.mode == "pace":
        return (f"{cap.cgroup}: pacing of the streams to {cap.dest} removed "
                f"({cap.streams} open streams unpaced)")
    return f"{cap.cgroup}: cap of {_streams(cap.max_streams)} to {cap.dest} removed"


def run_rm(args: argparse.Namespace) -> int:
    dest = parse_dest(args.dest)
    print(removed(CapTable("cap rm").remove(args.cgroup, dest)))
    return 0


def run_list(args: argparse.Namespace) -> int:
    if not 0 <= args.window <= 60:
        raise UsageError(f"--window {args.window}: out of range", "give 0..60 seconds")
    caps = CapTable("cap list").list()
    rates = live_rates(caps, args.window) if caps and args.window > 0 else {}
    if args.json:
        dump_json([{**c.to_json(), "live_mbit": rates.get(c.id)} for c in caps], sys.stdout)
    else:
        sys.stdout.write(render_table(caps, rates))
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
            if lim.matches([f.cgroup], f.remote_addr) and lim.port in (None, f.remote_port):
                rates[cap_id] += acked * 8 / seconds / 1e6
    return rates


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


Plan = tuple[list[tuple[CapSpec, Resolved]], list[Cap]]


def plan_apply(table: CapTable, specs: Sequence[CapSpec], prune: bool,
               name: str = "caps file") -> Plan:
    """Check every entry against the machine (cgroups exist, advisor runs)
    before changing anything: (caps to set with their N, caps to remove)."""
    current = {(c.cgroup_id, c.dest): c for c in table.list()}
    wanted: dict[tuple[int, str], CapSpec] = {}
    to_set: list[tuple[CapSpec, Resolved]] = []
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
        how = resolve_spec(spec)
        have = current.get(key)
        if have is not None and (have.max_streams, have.rate_bytes_per_s) == (
                how.max_streams, how.pace_bytes_per_s or 0):
            continue
        if have is not None:
            to_remove.append(have)
        to_set.append((spec, how))
    if prune:
        to_remove += [c for k, c in current.items() if k not in wanted]
    return to_set, to_remove


def execute_plan(table: CapTable, plan: Plan) -> list[str]:
    to_set, to_remove = plan
    lines = []
    for cap in to_remove:
        table.remove(cap.cgroup, parse_dest(cap.dest))
        lines.append(removed(cap))
    for spec, how in to_set:
        cap = table.add(spec.cgroup, spec.dest, how.max_streams, how.pace_bytes_per_s)
        lines.append(describe(cap, how))
    if not lines:
        lines.append("caps already as in the file")
    return lines

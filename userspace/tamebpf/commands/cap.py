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
    check_site,
    parse_dest,
)
from tamebpf.cap.table import CapChangeError, CapTable, netns_paths, resolve_cgroup
from tamebpf.cap.view import limit_of
from tamebpf.common.errors import UsageError
from tamebpf.common.lifecycle import terminate_as_interrupt
from tamebpf.common.logs import log
from tamebpf.common.records import Cap
from tamebpf.common.units import mbps_over
from tamebpf.common.values import (
    IPERF3_PORT,
    parse_duration,
    parse_host_port,
    parse_node,
    parse_url,
    rate_bytes_per_s,
)
from tamebpf.kernel.flows import FlowReader
from tamebpf.options import dump_json, parse_fraction
from tamebpf.paths.store import state_dir
from tamebpf.paths.where import check_url_host

__all__ = ["auto_target", "render_table", "resolve_spec"]


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
    site = getattr(args, "site", None)
    node = getattr(args, "node", None)
    if site is not None:
        check_url_host(parse_url(site, "--site"), "--site host")
        check_site(site, follow, args.mode, "cap set", "--site")
        if node is not None:
            parse_node(node, "--node")
    elif node is not None:
        raise UsageError("--node goes with --site")
    common: dict[str, Any] = {"all_processes": all_processes, "congestion": args.congestion,
                              "follow": follow, "site": site, "node": node}
    if args.mode == "refuse":
        if args.rate is not None:
            raise UsageError("--rate goes with --mode pace")
        if getattr(args, "direction", None) is not None:
            raise UsageError("--direction goes with --mode pace",
                             "a refuse cap counts streams at connect(), whichever way they go")
        if args.max_streams is None and args.auto is None:
            raise UsageError("give --max-streams N or --auto HOST")
        n = None if args.max_streams is None else check_max_streams(args.max_streams)
        return CapSpec(cgroup, dest, max_streams=n, auto=args.auto,
                       max_impact=args.max_impact, **common)
    if args.max_streams is not None:
        raise UsageError("--max-streams goes with --mode refuse",
                         "a pace cap never refuses a connect(); give --rate or --auto")
    direction = getattr(args, "direction", None) or "both"
    if (args.rate is None) == (args.auto is None):
        raise UsageError("--mode pace needs --rate RATE (e.g. 500M) or --auto HOST")
    if args.rate is not None:
        rate_bytes(args.rate)
    return CapSpec(cgroup, dest, auto=args.auto, max_impact=args.max_impact,
                   mode="pace", rate=args.rate, direction=direction, **common)


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
                    spec.all_processes, spec.direction)
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
    """Mbit/s each cap's streams move at now, over WINDOW_S: the bytes they
    had acked and received (a stream goes one way, or one way at a time)."""
    with FlowReader(netns=netns_paths(), command="cap list") as reader:
        before = {f.cookie: f.bytes_acked + f.bytes_received for f in reader.snapshot()
                  if not f.closed}
        t0 = time.monotonic()
        time.sleep(window_s)
        after = [f for f in reader.snapshot() if not f.closed]
        seconds = time.monotonic() - t0
    rates = dict.fromkeys((c.id for c in caps), 0.0)
    limits = [(c.id, lim) for c in caps if (lim := limit_of(c)) is not None]
    for f in after:
        acked = f.bytes_acked + f.bytes_received - before.get(f.cookie, 0)  # new: all of it
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

"""What `cap set` and `cap apply` ask of the kernel: each cap spec made
concrete (the advisor asked for `auto`, its fallback used when it cannot
run), and a caps file turned into one plan of removes and adds that the
kernel switches in at once (CapTable.commit)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from tamebpf.advise import advisor
from tamebpf.cap.book import FollowBook, FollowSpec
from tamebpf.cap.spec import CapSpec, check_max_streams
from tamebpf.cap.table import PACE_NO_LIMIT, Add, CapTable, resolve_cgroup
from tamebpf.common.errors import TamebpfError, UsageError
from tamebpf.common.records import Cap
from tamebpf.common.units import pace_bytes_per_s
from tamebpf.common.values import IPERF3_PORT, parse_fraction, parse_host_port, rate_bytes_per_s
from tamebpf.estimate.record import AdviceRefusal, Target
from tamebpf.groups.passive_fit import LOSS_BASED
from tamebpf.kernel.abi import TB_CAP_CGROUPS_MAX, TB_CAP_RULES_MAX
from tamebpf.paths.entry import PathKey
from tamebpf.paths.statedir import StateFileRefused
from tamebpf.paths.store import PathStore, state_dir
from tamebpf.paths.where import path_key, resolve
from tamebpf.present.advice import refusal_text
from tamebpf.present.progress import ProgressLine


def auto_target(host: str, max_impact: str, congestion: str = "system") -> tuple[int, float]:
    """(N, Mbit/s) from the advisor."""
    impact = parse_fraction(max_impact, "--max-impact")
    name, port = parse_host_port(host, "--auto", default_port=IPERF3_PORT)
    resolve(name, "--auto", port)
    # The default probes run until settled, up to about 30 s: show them.
    progress = ProgressLine()
    try:
        advised = advisor.advise_target(name, impact, port, congestion, on_progress=progress)
    finally:
        progress.clear()
    if isinstance(advised, AdviceRefusal):
        raise TamebpfError(f"the advisor gave no advice for {name}:{port}: "
                           f"{refusal_text(advised)}")
    n, mbit = advised
    return check_max_streams(int(n), "advised stream count"), float(mbit)


def follow_path(spec: CapSpec) -> PathKey:
    """The path whose memory a following cap's target comes from: the auto
    host as `advise` keys it. Checked before anything is probed or set:
    the scout is one unpaced stream, and one BBR stream takes most of a
    shared link (docs/advise.md), so following needs a loss-based one."""
    assert spec.auto is not None
    name, port = parse_host_port(spec.auto, "--auto", default_port=IPERF3_PORT)
    cc, where = advisor.probe_congestion(Target(name, port, congestion=spec.congestion))
    if cc not in LOSS_BASED:
        raise UsageError(f"a cap that follows its path needs a loss-based congestion control; "
                         f"the transfers would run {cc} ({where})",
                         "give --congestion cubic (congestion = \"cubic\" in a caps file) "
                         "and run the transfers with it: one unpaced BBR stream, the scout, "
                         "would take most of a shared link")
    return path_key(name, None, cc)


def sync_follows(set_caps: Sequence[tuple[CapSpec, Cap, PathKey | None]],
                 removed: Sequence[Cap], book: FollowBook | None = None,
                 unchanged: Sequence[tuple[CapSpec, Cap, PathKey | None]] = ()) -> list[str]:
    """The follow book after caps were set or removed: a following cap gets
    its spec (a new one: the agent starts over), any other loses its. A cap
    left as it was keeps its spec and what the agent did, unless the entry
    now asks for another path or limit. Returns a warning for each
    following cap whose path memory holds no capacity: it cannot follow
    until one is stored, and one if the state directory refused the book
    (busy, or a file in it not ours): the caps are in force either way, so
    that is a warning that says what to do, not a traceback."""
    book = book or FollowBook(state_dir())
    try:
        return _sync_follows(book, set_caps, removed, unchanged)
    except StateFileRefused as err:
        return [f"the caps are in force as asked, but the follow book was not updated: "
                f"{err}; run the same cap command again once it is free"]


def _sync_follows(book: FollowBook, set_caps: Sequence[tuple[CapSpec, Cap, PathKey | None]],
                  removed: Sequence[Cap],
                  unchanged: Sequence[tuple[CapSpec, Cap, PathKey | None]]) -> list[str]:
    warnings = []
    for cap in removed:
        book.remove(cap.cgroup, cap.dest)
    for spec, cap, path in unchanged:
        have = book.find(cap.cgroup, cap.dest)
        if spec.follow and have is not None and have.path == path and \
                (have.site, have.node) == (spec.site, spec.node) and \
                spec.max_impact is not None and \
                have.max_impact == parse_fraction(spec.max_impact, "--max-impact"):
            continue
        set_caps = [*set_caps, (spec, cap, path)]
    for spec, cap, path in set_caps:
        if spec.follow and path is not None:
            assert spec.auto is not None and spec.max_impact is not None
            # Path memory is read before the book is written: a read that
            # refuses then leaves the book as it was, as the warning says.
            known = PathStore(book.directory).newest(path, with_capacity=True)
            book.put(FollowSpec(cap.cgroup, cap.dest, path,
                                parse_fraction(spec.max_impact, "--max-impact"), spec.auto,
                                time.time(), site=spec.site, node=spec.node))
            if known is None and spec.site is None:
                warnings.append(
                    f"{cap.cgroup}: the cap to {cap.dest} cannot follow its path yet: path "
                    f"memory has no capacity for {path.dest} (the advisor's ACK-spacing "
                    "estimate was not trusted); the agent ('tamebpf export') samples its "
                    "scout's ACKs for one once two of its streams send, or 'tamebpf advise "
                    f"{spec.auto} --capacity RATE' with the bottleneck's rate stores one")
        else:
            book.remove(cap.cgroup, cap.dest)
    return warnings


@dataclass(frozen=True)
class Resolved:
    """A cap spec made concrete: what goes into the kernel."""

    max_streams: int
    pace_bytes_per_s: int | None = None  # None: refuse mode
    advised: tuple[int, float] | None = None  # the advisor's (N, Mbit/s) with auto
    fallback_because: str | None = None  # auto: why the fallback is used


def resolve_spec(spec: CapSpec) -> Resolved:
    """Runs the advisor for an auto cap."""
    advised = None
    if spec.auto is not None:
        assert spec.max_impact is not None
        advised = auto_target(spec.auto, spec.max_impact, spec.congestion)
    if spec.mode == "pace":
        rate = (rate_bytes_per_s(spec.rate, "--rate") if spec.rate is not None
                else pace_bytes_per_s(advised[1]) if advised else 0)
        if rate < 1:
            raise UsageError("the advisor gave no throughput to pace at", "give --rate")
        return Resolved(PACE_NO_LIMIT, rate, advised)
    n = spec.max_streams if spec.max_streams is not None else advised[0] if advised else 0
    return Resolved(check_max_streams(n), None, advised)


def fallback_of(spec: CapSpec, because: str) -> Resolved:
    """An auto cap's `fallback`, for when the advisor cannot run."""
    assert spec.fallback is not None
    if spec.mode == "pace":
        return Resolved(PACE_NO_LIMIT, rate_bytes_per_s(spec.fallback, "fallback"),
                        fallback_because=because)
    return Resolved(check_max_streams(spec.fallback, "fallback"), fallback_because=because)


@dataclass
class Plan:
    """The changes a caps file makes, to be switched in at once."""

    to_set: list[tuple[int, CapSpec, Resolved]] = field(default_factory=list)  # (entry #, ...)
    to_remove: list[tuple[int | None, Cap]] = field(default_factory=list)  # entry #, or pruned
    kept: list[tuple[int, Cap, str]] = field(default_factory=list)  # auto failed: in force kept
    unchanged: list[tuple[int, CapSpec, Cap]] = field(default_factory=list)  # as written
    follow_paths: dict[int, PathKey] = field(default_factory=dict)  # entry # -> its path


def plan_apply(table: CapTable, specs: Sequence[CapSpec], prune: bool,
               name: str = "caps file", probe: bool = True) -> Plan:
    """Check every entry against the machine (cgroups exist, the advisor
    runs, the limits hold) before changing anything. An auto entry whose
    advisor fails takes its fallback, else keeps the cap in force, else
    fails the file naming it. PROBE False (--check): no advisor is run."""
    current = {(c.cgroup_id, c.dest): c for c in table.list()}
    wanted: dict[tuple[int, str], CapSpec] = {}
    plan = Plan()
    for i, spec in enumerate(specs, 1):
        try:
            cg = resolve_cgroup(spec.cgroup, spec.all_processes, "cgroup")
        except UsageError as exc:
            raise UsageError(f"{name}: cap #{i}: {exc.message}", exc.hint) from None
        key = (cg.id, str(spec.dest))
        if key in wanted:
            raise UsageError(f"{name}: cap #{i}: {spec.dest} on {cg.rel} is listed twice")
        wanted[key] = spec
        have = current.get(key)
        if spec.follow:
            try:
                plan.follow_paths[i] = follow_path(spec)
            except TamebpfError as exc:
                raise type(exc)(f"{name}: cap #{i}: {exc.message}", exc.hint) from None
        if spec.auto is not None and not probe:
            continue  # --check: the entry is well formed; nothing probed
        try:
            how = resolve_spec(spec)
        except TamebpfError as exc:
            if spec.auto is None or isinstance(exc, UsageError):
                raise
            if spec.fallback is not None:
                how = fallback_of(spec, exc.message)
            elif have is not None and have.mode == spec.mode:
                plan.kept.append((i, have, exc.message))
                continue
            else:
                raise TamebpfError(
                    f"{name}: cap #{i} ({spec.dest} on {cg.rel}): the advisor failed "
                    f"({exc.message}), and the entry has no fallback and no cap in force",
                    "add 'fallback = N' (a rate in pace mode) to the entry") from None
        same_way = have is not None and (have.mode == "refuse" or have.direction == spec.direction)
        if have is not None and same_way and (have.max_streams, have.rate_bytes_per_s) == (
                how.max_streams, how.pace_bytes_per_s or 0):
            plan.unchanged.append((i, spec, have))
            continue
        if have is not None:
            plan.to_remove.append((i, have))
        plan.to_set.append((i, spec, how))
    if prune:
        plan.to_remove += [(None, c) for k, c in current.items() if k not in wanted]
    check_limits(current.values(), plan, name)
    return plan


def check_limits(current: Iterable[Cap], plan: Plan, name: str) -> None:
    """The kernel's limits for the whole plan, before anything changes: at
    most TB_CAP_RULES_MAX caps per cgroup, TB_CAP_CGROUPS_MAX cgroups.
    (tb_cap_commit checks them again, under its lock.)"""
    removed = {c.id for _, c in plan.to_remove}
    per_cgroup: Counter[str] = Counter()
    for c in current:
        if c.id not in removed:
            per_cgroup[resolve_key(c.cgroup)] += 1
    for i, spec, _ in plan.to_set:
        key = resolve_key(spec.cgroup)
        per_cgroup[key] += 1
        if per_cgroup[key] > TB_CAP_RULES_MAX:
            raise UsageError(
                f"{name}: cap #{i}: cgroup {spec.cgroup} would have {per_cgroup[key]} caps, "
                f"the most is {TB_CAP_RULES_MAX}", "cap a wider prefix, or a parent cgroup")
    if len(per_cgroup) > TB_CAP_CGROUPS_MAX:
        raise UsageError(f"{name}: {len(per_cgroup)} cgroups would be capped, the most "
                         f"is {TB_CAP_CGROUPS_MAX}")


def resolve_key(cgroup: str) -> str:
    """One spelling per cgroup ('a', '/a' and the absolute path)."""
    try:
        return resolve_cgroup(cgroup, all_processes=cgroup.strip() == "/").rel
    except UsageError:
        return "/" + cgroup.strip("/")  # removed since: as `cap list` shows it


def changes_of(plan: Plan) -> list[Add | Cap]:
    """The plan as CapTable.commit takes it: removes first (a replaced cap's
    destination is then free for its new value)."""
    changes: list[Add | Cap] = [c for _, c in plan.to_remove]
    for _, spec, how in plan.to_set:
        changes.append(Add(spec.cgroup, spec.dest, how.max_streams, how.pace_bytes_per_s,
                           spec.all_processes, spec.direction))
    return changes

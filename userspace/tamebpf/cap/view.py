"""The caps in force as watch and export see them: the kernel's cap table
(tamebpf.cap.table) turned into the core's plain cap limits (groups.caps.CapLimit).

The one place where watch and export learn about caps: empty when the cap
module is absent, no caps are set or they cannot be read, so both work
without it."""

from __future__ import annotations

import functools
from typing import Any

from tamebpf.cap.book import FollowBook, normal_cgroup
from tamebpf.cap.spec import parse_dest
from tamebpf.common.errors import TamebpfError, UsageError
from tamebpf.common.records import Cap
from tamebpf.groups.caps import CapLimit
from tamebpf.paths.store import state_dir


def read_caps(directory: str | None = None) -> list[CapLimit]:
    """Caps in force (`tamebpf cap`), as groups mark them; a cap that
    follows its path at the target the agent set (cap/book.py, in the
    state directory: --state-dir's, else the default)."""
    caps = cap_table()
    follows = {s.ident: s for s in FollowBook(state_dir(directory)).specs()} if caps else {}
    out = []
    for c in caps:
        s = follows.get((normal_cgroup(c.cgroup), c.dest)) if c.mode == "pace" else None
        target = s.target_mbps if s is not None else _kernel_target(c)
        lim = limit_of(c, target, s is not None)
        if lim is not None:
            out.append(lim)
    return out


def _kernel_target(c: Cap) -> float | None:
    """The target a pace cap's streams share as the kernel holds it, when
    something other than the follow book set it (`tamebpf run`'s own
    following and site share: runner/); None: the cap's own rate."""
    table = _cap_table() if c.mode == "pace" else None
    if table is None:
        return None
    try:
        follow = table.follow(c.id)
    except (TamebpfError, OSError):
        return None
    return None if follow is None or follow[1] <= 0 else follow[1] * 8 / 1e6


def limit_of(c: Cap, follow_mbps: float | None = None, follows: bool = False
             ) -> CapLimit | None:
    """The core's view of one cap: who and where it limits, and to what."""
    try:
        dest = parse_dest(c.dest)
    except (UsageError, ValueError):
        return None
    pace = c.rate_bytes_per_s * 8.0 if c.mode == "pace" else None
    if pace is not None and follow_mbps is not None:
        pace = follow_mbps * 1e6
    return CapLimit(c.max_streams, c.cgroup, str(dest.network), dest.port, pace,
                    dest.port_end, follows)


def cap_table() -> list[Cap]:
    """The kernel's caps with their counters, or []."""
    table = _cap_table()
    if table is None:
        return []
    try:
        return list(table.list())
    except (TamebpfError, OSError):
        return []


def cap_kernel() -> Any:
    """The kernel's cap table itself (CapTable), for the follow caps' agent;
    None when the cap module is absent or cannot be opened."""
    return _cap_table()


@functools.cache
def _cap_table() -> Any:
    try:
        from tamebpf.cap.table import CapTable
    except ImportError:
        return None
    try:
        return CapTable(command="watch")
    except (TamebpfError, OSError):
        return None

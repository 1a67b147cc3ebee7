"""The caps in force as watch and export see them: the kernel's cap table
(tamebpf.kernel.cap) turned into the core's plain cap limits (groups.CapLimit).

The one place where watch and export learn about caps: empty when the cap
module is absent, no caps are set or they cannot be read, so both work
without it."""

from __future__ import annotations

import functools
from typing import Any

from tamebpf.capfile import parse_dest
from tamebpf.errors import TamebpfError, UsageError
from tamebpf.groups import CapLimit
from tamebpf.records import Cap


def read_caps() -> list[CapLimit]:
    """Caps in force (`tamebpf cap`), as groups mark them."""
    return [lim for lim in map(limit_of, cap_table()) if lim is not None]


def limit_of(c: Cap) -> CapLimit | None:
    """The core's view of one cap: who and where it limits, and to what."""
    try:
        dest = parse_dest(c.dest)
    except (UsageError, ValueError):
        return None
    pace = c.rate_bytes_per_s * 8.0 if c.mode == "pace" else None
    return CapLimit(c.max_streams, c.cgroup, str(dest.network), dest.port, pace,
                    dest.port_end)


def cap_table() -> list[Cap]:
    """The kernel's caps with their counters, or []."""
    table = _cap_table()
    if table is None:
        return []
    try:
        return list(table.list())
    except (TamebpfError, OSError):
        return []


@functools.cache
def _cap_table() -> Any:
    try:
        from tamebpf.kernel.cap import CapTable
    except ImportError:
        return None
    try:
        return CapTable(command="watch")
    except (TamebpfError, OSError):
        return None

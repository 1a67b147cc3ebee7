"""`tamebpf cap list` as text."""

from __future__ import annotations

from collections.abc import Sequence

from tamebpf.records import Cap

COLUMNS = (("CGROUP", 28), ("DEST", 24), ("MODE", 6), ("LIMIT", 12), ("STREAMS", 8),
           ("REFUSED", 8), ("MBIT/S", 9))


def render_table(caps: Sequence[Cap], rates: dict[int, float] | None = None) -> str:
    """One cap a line; a removed cgroup is shown by its old path and marked.
    LIMIT is N streams (refuse) or the group's target (pace); MBIT/S what
    the cap's streams send at now (- when not measured)."""
    def row(cells: Sequence[str]) -> str:
        return " ".join(f"{c:<{w}}" if i < 3 else f"{c:>{w}}"
                        for i, (c, (_, w)) in enumerate(zip(cells, COLUMNS, strict=True))).rstrip()

    rates = rates or {}
    lines = [row([name for name, _ in COLUMNS])]
    for c in caps:
        name = c.cgroup if c.cgroup_exists else f"{c.cgroup} (removed)"
        limit = (f"{c.rate_bytes_per_s * 8 / 1e6:g} Mbit/s" if c.mode == "pace"
                 else str(c.max_streams))
        live = f"{rates[c.id]:.1f}" if c.id in rates else "-"
        lines.append(row([name, c.dest, c.mode, limit, str(c.streams), str(c.refused), live]))
    if not caps:
        lines.append("(no caps)")
    return "\n".join(lines) + "\n"

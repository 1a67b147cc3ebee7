"""`tamebpf cap` as text and JSON: the `cap list` table, and what `cap set`,
`cap rm` and `cap apply` say they did."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Protocol

from tamebpf.cap.book import FollowSpec, normal_cgroup
from tamebpf.common.records import Cap
from tamebpf.common.units import mbps
from tamebpf.common.words import count

# `cap apply` that changed nothing.
UNCHANGED = "caps already as in the file"


class HowSet(Protocol):
    """How a cap's limit was found (cap/plan.Resolved): the advisor's
    (N, Mbit/s) for an auto cap, or why its fallback is used."""

    @property
    def advised(self) -> tuple[int, float] | None: ...

    @property
    def fallback_because(self) -> str | None: ...


def _streams(n: int) -> str:
    return count(n, "TCP stream")


def describe(cap: Cap, how: HowSet | None = None) -> str:
    """One line for a cap just set."""
    if cap.mode == "pace":
        text = (f"{cap.cgroup}: streams to {cap.dest} paced at "
                f"{mbps(cap.rate_bytes_per_s):g} Mbit/s together, {PACED[cap.direction]} "
                f"({cap.streams} open now)")
    else:
        text = (f"{cap.cgroup}: at most {_streams(cap.max_streams)} to {cap.dest} "
                f"({cap.streams} open now)")
    if how is not None and how.advised is not None:
        text += f"; advised {_streams(how.advised[0])} at {how.advised[1]:.2f} Mbit/s"
    if how is not None and how.fallback_because is not None:
        text += f"; fallback (the advisor failed: {how.fallback_because})"
    return text


def set_json(cap: Cap, how: HowSet | None) -> dict[str, Any]:
    """A cap just set, as JSON."""
    out = cap.to_json()
    if how is not None and how.advised is not None:
        out["advised"] = {"streams": how.advised[0], "mbit": how.advised[1]}
    if how is not None and how.fallback_because is not None:
        out["fallback_because"] = how.fallback_because
    return out


def removed(cap: Cap) -> str:
    """One line for a cap just removed."""
    if cap.mode == "pace":
        return (f"{cap.cgroup}: pacing of the streams to {cap.dest} removed "
                f"({cap.streams} open streams unpaced)")
    return f"{cap.cgroup}: cap of {_streams(cap.max_streams)} to {cap.dest} removed"


def kept_line(cap: Cap, entry: int, why: str) -> str:
    """A caps file's auto cap whose advisor failed, left as in force."""
    return (f"{cap.cgroup}: cap to {cap.dest} kept as in force (cap #{entry}: the advisor "
            f"failed: {why})")


def checked_line(path: str, caps: int) -> str:
    """`cap apply --check` of a valid file."""
    return f"{path}: {count(caps, 'cap')}, all valid (nothing changed)"


COLUMNS = (("CGROUP", 28), ("DEST", 24), ("MODE", 9), ("LIMIT", 12), ("STREAMS", 8),
           ("REFUSED", 8), ("MBIT/S", 9))
# What a pace cap paces, in a line and in the MODE column.
PACED = {"both": "what they send and receive", "send": "what they send",
         "receive": "what they receive"}
MODE_CELL = {"both": "pace", "send": "pace-send", "receive": "pace-recv"}


def render_table(caps: Sequence[Cap], rates: dict[int, float] | None = None,
                 follows: Sequence[FollowSpec] = ()) -> str:
    """One cap a line; a removed cgroup is shown by its old path and marked.
    LIMIT is N streams (refuse) or the group's target (pace; for a cap that
    follows its path, the target the agent set, and a line under it says
    what following did); MBIT/S what the cap's streams send at now (- when
    not measured)."""
    def row(cells: Sequence[str]) -> str:
        return " ".join(f"{c:<{w}}" if i < 3 else f"{c:>{w}}"
                        for i, (c, (_, w)) in enumerate(zip(cells, COLUMNS, strict=True))).rstrip()

    rates = rates or {}
    by_cap = {s.ident: s for s in follows}
    lines = [row([name for name, _ in COLUMNS])]
    for c in caps:
        name = c.cgroup if c.cgroup_exists else f"{c.cgroup} (removed)"
        spec = by_cap.get((normal_cgroup(c.cgroup), c.dest))
        mbit = mbps(c.rate_bytes_per_s)
        if spec is not None and spec.target_mbps is not None and c.mode == "pace":
            mbit = spec.target_mbps
        limit = f"{mbit:.4g} Mbit/s" if c.mode == "pace" else str(c.max_streams)
        live = f"{rates[c.id]:.1f}" if c.id in rates else "-"
        mode = MODE_CELL[c.direction] if c.mode == "pace" else c.mode
        lines.append(row([name, c.dest, mode, limit, str(c.streams), str(c.refused), live]))
        if spec is not None:
            lines.append("  " + follow_line(spec))
    if not caps:
        lines.append("(no caps)")
    return "\n".join(lines) + "\n"


def follow_line(s: FollowSpec, now: float | None = None) -> str:
    """What following did for one cap, in one line."""
    now = time.time() if now is None else now
    text = (f"follows {s.host} ({s.path.congestion}, max impact {s.max_impact:.0%}): ")
    if s.updated is None:
        text += "not read yet (is 'tamebpf export' running?)"
    elif s.target_mbps is None:
        text += f"the cap's own rate; {s.note or 'no reading yet'}"
    else:
        text += f"target {s.target_mbps:.2f} Mbit/s"
        if s.changes:
            last = s.changes[-1]
            text += (f", {s.change_count} change{'s' if s.change_count != 1 else ''}, the last "
                     f"{_ago(now - last.when)} ago")
        if s.competing_flows is not None:
            text += f"; about {s.competing_flows:.1f} competing flows"
        if s.note:
            text += f"; {s.note}"
    if s.updated is not None and now - s.updated > 60:
        text += f" (last read {_ago(now - s.updated)} ago: is 'tamebpf export' running?)"
    return text


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"

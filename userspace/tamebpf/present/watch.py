"""What `tamebpf watch` shows: a screen of text built from plain data (its
JSON lines are present/group_json.py, shared with export).

No terminal I/O here: `render()` returns lines that fit the given width and
height (80x24 is the design size), so the poll loop can draw them with curses
or print them, and tests can compare them with exact text.
"""

from __future__ import annotations

import ipaddress
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from tamebpf.common.units import percent
from tamebpf.common.words import count
from tamebpf.groups.group import Group, GroupKey
from tamebpf.groups.passive_fit import Observation

# Marks after the stream count.
OVER_ADVICE = "!"
OVER_CAP = "^"

SortKey = Literal["goodput", "streams", "loss", "rtt", "owner", "dest"]
SORT_LETTERS: dict[str, SortKey] = {
    "g": "goodput", "n": "streams", "l": "loss", "r": "rtt", "p": "owner", "d": "dest",
}

HELP = (
    "keys",
    "  g n l r p d   sort by goodput, streams, loss, RTT, owner, destination",
    "  /             filter: type text, Enter to apply, Esc to cancel",
    "  Up Down j k   select a group for the details below the table",
    "  a             show idle groups too (no stream sent data)",
    "  space         pause / resume",
    "  h ?           this help;  q  quit",
    "",
    "marks after STRMS",
    f"  {OVER_ADVICE}   more streams than the advice of the passive fit",
    f"  {OVER_CAP}   more streams than a cap (tamebpf cap)",
    "",
    "ADVICE is 'streams Mbit/s impact' from the model fitted to goodput seen",
    "at two or more stream counts (no probes sent); 'seen N' means one count",
    "so far.  Details: docs/watch.md.",
)


@dataclass(frozen=True)
class Frame:
    """Everything one screen shows."""

    groups: Sequence[Group]  # sorted and filtered, as shown
    hidden: int  # groups left out by the filter or as idle
    open_flows: int
    interval_s: float
    clock: str  # wall-clock time of the refresh, e.g. "14:02:11"
    sort: SortKey = "goodput"
    filter: str = ""
    editing: bool = False  # the filter is being typed
    owner_label: str = "PROCESS"  # or "CGROUP"
    selected: GroupKey | None = None
    show_idle: bool = False
    paused: bool = False
    help: bool = False
    dropped: int = 0  # closed flows the kernel could not record
    message: str = ""


def _fit(text: str, width: int) -> str:
    """Cut text to width, marking the cut with '~'."""
    return text if len(text) <= width else text[: max(width - 1, 0)] + "~"


def _mbps(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _pct(value: float | None, digits: int = 2) -> str:
    if value is None:
        return "-"
    return f"{percent(value):.{digits}f}" if value < 0.9995 else "100"


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if value < 10 else f"{value:.1f}"


def marks(g: Group) -> str:
    return (OVER_ADVICE if g.over_advice else "") + (OVER_CAP if g.over_cap else "")


def advice_cell(g: Group) -> str:
    adv = g.advice
    if adv is not None:
        return f"{adv.num_flows} {adv.max_nondisruptive_thru:.0f}M {adv.cross_traffic_impact:.0%}"
    if g.observed:
        return "seen " + ",".join(str(o.streams) for o in g.observed)
    return "-"


# name, width, right-aligned
COLUMNS = (
    ("", 15, False), ("DESTINATION", 15, False), ("DIR", 4, False), ("STRMS", 5, True),
    ("MBIT/S", 7, True), ("LOSS%", 5, True), ("RTT_MS", 7, True), ("CC", 5, False),
    ("ADVICE", 0, False),
)
# DIR: which way a group's bytes go (a receiving group's loss and congestion
# control are the remote senders', so "-").
DIRECTION_CELL = {"send": "send", "receive": "recv"}


def _row(cells: Sequence[str], width: int) -> str:
    parts = []
    used = 0
    for i, (cell, (_, w, right)) in enumerate(zip(cells, COLUMNS, strict=True)):
        if w == 0:
            w = max(width - used, 0)
        text = _fit(cell, w)
        parts.append(text.rjust(w) if right else text.ljust(w))
        used += w + 1
        if i == len(COLUMNS) - 1:
            break
    return " ".join(parts)[:width].rstrip()


def group_row(g: Group, width: int) -> str:
    owner = g.key.owner if g.key.owner is not None else "?"
    streams = f"{g.streams}{marks(g)}"
    return _row(
        (owner, g.remote_addr, DIRECTION_CELL.get(g.direction, g.direction), streams,
         _mbps(g.goodput_mbps), _pct(g.loss_rate), _ms(g.srtt_ms),
         g.congestion_control or "-", advice_cell(g)),
        width,
    )


def _observed_text(obs: Sequence[Observation]) -> str:
    return ", ".join(f"{count(o.streams, 'stream')} {o.goodput_mbps:.1f} Mbit/s" for o in obs)


def details(g: Group, width: int) -> list[str]:
    """A few lines on one group: counts, what was seen, the fit and its advice."""
    owner = g.key.owner if g.key.owner is not None else "(owner unknown)"
    where = []
    if g.comm and g.comm != g.key.owner:
        where.append(f"process {g.comm}")
    if g.cgroup and g.cgroup != g.key.owner:
        where.append(f"cgroup {g.cgroup}")
    arrow = "<-" if g.direction == "receive" else "->"
    title = f"{owner} {arrow} {g.remote_addr}" + (f" ({', '.join(where)})" if where else "")
    lines = [_fit(f"-- {title} ", width).ljust(width, "-")]
    c = g.counters
    retrans = c.total_retrans / c.data_segs_out if c.data_segs_out else None
    moved = f"received {_bytes(c.bytes_received)}" if g.direction == "receive" else \
        f"acked {_bytes(c.bytes_acked)}, retrans {_pct(retrans)}% of {c.data_segs_out} segs"
    lines.append(
        f"{count(g.flows, 'flow')} open, {g.flows_closed} closed; {moved}"
        + (f"; cap {g.cap}" if g.cap is not None else "")
        + (f"; paced at {g.paced_bps / 1e6:.1f} Mbit/s" if g.paced_bps is not None else "")
        + (" (following the path)" if g.paced_follows else "")
    )
    p = g.passive
    if p is None:
        if g.observed:
            lines.append(f"seen at {_observed_text(g.observed)}")
            lines.append("advice: needs goodput at a second stream count (no probes sent)")
        else:
            lines.append("advice: needs goodput at two stream counts (no probes sent)")
        return [_fit(x, width) for x in lines]
    lines.append(f"seen at {_observed_text(p.observations)}")
    adv = p.advice
    lines.append(
        f"advice: {count(adv.num_flows, 'stream')}, {adv.max_nondisruptive_thru:.1f} Mbit/s, "
        f"impact {adv.cross_traffic_impact:.1%} (limited by {adv.limited_by})"
    )
    other = []
    if g.streams:
        other.append(f"at {g.streams} now: {p.fit.throughput(g.streams):.1f} Mbit/s, "
                     f"impact {p.fit.impact(g.streams):.1%}")
    if p.loss_rtt_advice is not None:
        other.append(f"loss x RTT^2 fit: {count(p.loss_rtt_advice.num_flows, 'stream')}")
    if other:
        lines.append("; ".join(other))
    if p.warnings:
        # At most two lines; a longer warning is cut (the JSON has it whole).
        wrapped = textwrap.wrap(f"warning: {p.warnings[0]}", width, subsequent_indent="  ")
        if len(wrapped) > 2:
            rest = " ".join(x.strip() for x in wrapped[1:])
            wrapped = [wrapped[0], _fit("  " + rest, width)]
        lines += wrapped
    return [_fit(x, width) for x in lines]


def _bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{n} B"  # pragma: no cover


def render(frame: Frame, width: int = 80, height: int | None = 24) -> list[str]:
    """The whole screen as at most `height` lines of at most `width` columns;
    height None: every group, no padding (for printing refreshes one after
    another)."""
    width = max(width, 20)
    streams = sum(g.streams for g in frame.groups)
    goodput = sum(g.goodput_mbps or 0.0 for g in frame.groups)
    left = (f"tamebpf watch - {count(len(frame.groups), 'group')}, "
            f"{count(streams, 'stream')}, {goodput:.1f} Mbit/s")
    right = ("PAUSED " if frame.paused else "") + f"every {frame.interval_s:g}s {frame.clock}"
    top = [left + right.rjust(width - len(left))
           if len(left) + len(right) < width else _fit(left, width)]
    flt = frame.filter + ("_" if frame.editing else "") if frame.filter or frame.editing else "-"
    status = (f"sort {frame.sort}  filter {flt}  {frame.open_flows} flows open"
              + (f", {frame.hidden} hidden" if frame.hidden else "")
              + (f"  {frame.dropped} closed flows lost" if frame.dropped else ""))
    keys = "h help  q quit"
    top.append(status + keys.rjust(width - len(status)) if len(status) + len(keys) < width
               else _fit(status, width))
    if frame.help:
        return [_fit(x, width) for x in (top + [""] + list(HELP))[:height]]
    header = _row([frame.owner_label] + [name for name, _, _ in COLUMNS[1:]], width)
    selected = next((g for g in frame.groups if g.key == frame.selected), None)
    if selected is None and frame.groups:
        selected = frame.groups[0]
    info = details(selected, width) if selected else []
    legend = f"{OVER_ADVICE} more streams than advised  {OVER_CAP} over a cap"
    footer = frame.message or (legend if any(marks(g) for g in frame.groups) else "")
    if height is None:
        room = max(len(frame.groups), 1)
    else:
        room = max(height, 6) - len(top) - 1 - (len(info) + 1 if info else 0) - 1
    rows = []
    if not frame.groups:
        rows.append("(no transfers: no TCP flow sent data in the last interval)"
                    if not frame.filter else "(no group matches the filter)")
    else:
        shown = list(frame.groups)
        if len(shown) > room:
            # room - 1 rows and a "more" line, keeping the selected group in view.
            at = shown.index(selected) if selected in shown else 0
            start = 0 if at < room - 1 else min(at - (room - 2), len(shown) - (room - 1))
            shown = shown[start : start + room - 1]
        for g in shown:
            mark = ">" if g is selected and len(frame.groups) > 1 else " "
            rows.append(mark + group_row(g, width - 1))
        if len(shown) < len(frame.groups):
            rows.append(f" ... {len(frame.groups) - len(shown)} more (sort or filter to see them)")
    rows = rows[: max(room, 1)]
    pad = [""] * (max(room - len(rows), 0) if height is not None else 0)
    screen = top + [" " + header] + rows + pad + ([""] + info if info else [])
    if footer or height is not None:
        screen.append(footer)
    return [_fit(x, width) for x in screen[:height]]


def _sort_value(g: Group, key: SortKey) -> tuple[int, float | str]:
    """(missing-last flag, value), arranged so that ascending order is the
    order shown: numbers largest first, names alphabetical."""
    if key == "owner":
        return (g.key.owner is None, g.key.owner or "")
    if key == "dest":
        return (0, _addr_order(g.remote_addr))
    value = {
        "goodput": g.goodput_bps,
        "streams": float(g.streams),
        "loss": g.loss_rate,
        "rtt": g.srtt_us,
    }[key]
    return (1, 0.0) if value is None else (0, -value)


def _addr_order(addr: str) -> str:
    try:
        ip = ipaddress.ip_address(addr)
        return f"{ip.version}{int(ip):040d}"
    except ValueError:
        return "9" + addr


def sort_groups(groups: Iterable[Group], key: SortKey = "goodput") -> list[Group]:
    """Ordered for display; ties broken by owner, then destination."""
    return sorted(
        groups,
        key=lambda g: (_sort_value(g, key), g.key.owner or "~", _addr_order(g.remote_addr)),
    )


def filter_groups(groups: Iterable[Group], text: str = "", active_only: bool = True) -> list[Group]:
    """Groups whose owner, comm, cgroup, destination or congestion control
    contains text (case-insensitive); idle groups only if active_only is off."""
    needle = text.lower()
    out = []
    for g in groups:
        if active_only and not g.active:
            continue
        hay = " ".join(
            x or "" for x in (g.key.owner, g.comm, g.cgroup, g.remote_addr, g.congestion_control)
        )
        if needle and needle not in hay.lower():
            continue
        out.append(g)
    return out


KEY_UP, KEY_DOWN, KEY_ENTER, KEY_ESC, KEY_BACKSPACE = "UP", "DOWN", "ENTER", "ESC", "BACKSPACE"


@dataclass
class ViewState:
    """What the keys change: sort, filter, selection, idle groups, pause, help.
    The poll loop passes key names ("g", "/", "UP", "ENTER", ...) to key()."""

    sort: SortKey = "goodput"
    filter: str = ""
    show_idle: bool = False
    selected: GroupKey | None = None
    paused: bool = False
    help: bool = False
    editing: bool = False
    _before_edit: str = ""

    def select(self, groups: Sequence[Group]) -> list[Group]:
        """The groups to show, filtered and sorted."""
        return sort_groups(filter_groups(groups, self.filter, not self.show_idle), self.sort)

    def key(self, key: str, shown: Sequence[Group]) -> bool:
        """Apply one key; False means quit."""
        if self.editing:
            if key == KEY_ENTER:
                self.editing = False
            elif key == KEY_ESC:
                self.editing, self.filter = False, self._before_edit
            elif key == KEY_BACKSPACE:
                self.filter = self.filter[:-1]
            elif len(key) == 1 and key.isprintable():
                self.filter += key
            return True
        if key == "q":
            return False
        if key in SORT_LETTERS:
            self.sort = SORT_LETTERS[key]
        elif key == "/":
            self.editing, self._before_edit, self.filter = True, self.filter, ""
        elif key == KEY_ESC:
            self.filter, self.help = "", False
        elif key == "a":
            self.show_idle = not self.show_idle
        elif key == " ":
            self.paused = not self.paused
        elif key in ("h", "?"):
            self.help = not self.help
        elif key in (KEY_UP, KEY_DOWN, "k", "j") and shown:
            keys = [g.key for g in shown]
            at = keys.index(self.selected) if self.selected in keys else 0
            at += -1 if key in (KEY_UP, "k") else 1
            self.selected = keys[min(max(at, 0), len(keys) - 1)]
        return True

    def frame(self, shown: Sequence[Group], hidden: int, open_flows: int, interval_s: float,
              clock: str, owner_label: str, dropped: int = 0, message: str = "") -> Frame:
        return Frame(
            groups=shown, hidden=hidden, open_flows=open_flows, interval_s=interval_s,
            clock=clock, sort=self.sort, filter=self.filter, editing=self.editing,
            owner_label=owner_label, selected=self.selected, show_idle=self.show_idle,
            paused=self.paused, help=self.help, dropped=dropped, message=message,
        )

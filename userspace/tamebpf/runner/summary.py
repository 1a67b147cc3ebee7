"""What `tamebpf run` says when CMD ends: one line on stderr, or a JSON
object (--json). Pure: the session hands the numbers down."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from tamebpf.common.units import mbps_over
from tamebpf.common.words import count


@dataclass(frozen=True)
class Destination:
    """One address CMD moved data with."""

    addr: str
    bytes_sent: int  # acked by the peer
    bytes_received: int
    streams: int  # the most connections that moved data together
    impact: float | None = None  # the path's estimated impact at `streams` (path memory)
    advised_streams: int | None = None  # path memory's advice, at --max-impact


@dataclass(frozen=True)
class Learned:
    """A passive entry the run stored for a path (paths/passive.py)."""

    dest: str
    congestion: str
    advised_streams: int
    advised_mbps: float
    capacity_mbps: float | None = None  # the capacity it rests on
    capacity_method: str | None = None  # e.g. 'ack-spacing (transfer)': this run's ACKs
    direction: str = "send"  # "receive": the path of downloads from dest


@dataclass(frozen=True)
class Summary:
    command: str
    exit_status: int
    seconds: float
    destinations: tuple[Destination, ...]
    cap_start_mbps: float | None  # the pace cap's target at the start (None: no cap)
    cap_start_from: str  # where it came from: path memory, --rate, the default
    cap_end_mbps: float | None  # the target when CMD ended
    learning: bool  # --no-learn: False
    learned: tuple[Learned, ...] = ()
    not_learned: str | None = None  # why nothing was learned, when learning
    notes: tuple[str, ...] = field(default=())
    # run --site: the last share decision (node, target_mbps, site, nodes, why)
    site: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        for dest, raw in zip(self.destinations, d["destinations"], strict=True):
            raw["goodput_mbps"] = goodput_mbps(dest, self.seconds)
        return d


def goodput_mbps(dest: Destination, seconds: float) -> float:
    """Over CMD's whole run, in the direction that moved more."""
    return mbps_over(max(dest.bytes_sent, dest.bytes_received), seconds) if seconds > 0 else 0.0


def size(nbytes: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.2f} {unit}"
    return f"{nbytes} B"


def dest_text(d: Destination, seconds: float) -> str:
    moved = size(max(d.bytes_sent, d.bytes_received))
    way = "to" if d.bytes_sent >= d.bytes_received else "from"
    text = (f"{moved} {way} {d.addr} at {goodput_mbps(d, seconds):.1f} Mbit/s over "
            f"{count(d.streams, 'stream')}")
    if d.impact is not None:
        text += f" (estimated impact {d.impact:.1%}"
        if d.advised_streams is not None:
            text += f"; advised {d.advised_streams}"
        text += ")"
    return text


def learned_text(x: Learned) -> str:
    what = f"downloads from {x.dest}" if x.direction == "receive" else \
        f"{x.dest} ({x.congestion})"
    text = (f"{what} advise {count(x.advised_streams, 'stream')} at "
            f"{x.advised_mbps:.1f} Mbit/s")
    if x.capacity_mbps is not None:
        text += f", capacity {x.capacity_mbps:.1f} Mbit/s ({x.capacity_method or '-'})"
    return text


def render(s: Summary) -> str:
    """The one line (no newline)."""
    parts = [f"tamebpf run: {s.command} exited {s.exit_status} after {s.seconds:.1f} s"]
    moved = [d for d in s.destinations if d.bytes_sent or d.bytes_received]
    parts.append("; ".join(dest_text(d, s.seconds) for d in moved) if moved
                 else "no TCP data moved")
    if s.cap_start_mbps is not None:
        cap = f"paced from {s.cap_start_mbps:.1f} Mbit/s ({s.cap_start_from})"
        if s.cap_end_mbps is not None and abs(s.cap_end_mbps - s.cap_start_mbps) > 1e-6:
            cap += f" to {s.cap_end_mbps:.1f}"
        parts.append(cap)
    if not s.learning:
        parts.append("not learning (--no-learn)")
    elif s.learned:
        parts.append("learned: " + ", ".join(learned_text(x) for x in s.learned))
    else:
        parts.append(f"nothing learned ({s.not_learned or 'no steady transfer'})")
    return ": ".join(parts[:2]) + "; " + "; ".join(parts[2:] + list(s.notes))

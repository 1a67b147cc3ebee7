"""`tamebpf flows` as text."""

from __future__ import annotations

from collections.abc import Sequence

from tamebpf.common.records import Flow
from tamebpf.common.units import percent


def _endpoint(addr: str, port: int) -> str:
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


def _opt(value: float | int | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


COLUMNS = (
    ("PID", 7), ("COMM", 15), ("LOCAL", 21), ("REMOTE", 21), ("STATE", 11), ("DIR", 4),
    ("CC", 5), ("RTT_MS", 8), ("RETRANS", 7), ("DATA_SEGS", 9), ("LOSS%", 6), ("MBIT/S", 8),
    ("CWND", 6), ("AGE_S", 7),
)
LEFT = 7  # the first columns, up to CC, are left-aligned
DIRECTION_CELL = {"send": "send", "receive": "recv"}


def render_table(flows: Sequence[Flow]) -> str:
    """Plain text, one flow a line, sorted by process then destination."""
    head = " ".join(f"{name:<{w}}" if i < LEFT else f"{name:>{w}}"
                    for i, (name, w) in enumerate(COLUMNS))
    lines = [head.rstrip()]
    for f in sorted(flows, key=lambda f: (f.comm or "~", f.pid or 0, f.remote_addr,
                                          f.remote_port, f.local_port)):
        # A receiver's delivery-rate sample is of its ACKs: not its transfer.
        receives = f.direction == "receive"
        rate = None if f.delivery_rate_bps is None or receives else f.delivery_rate_bps / 1e6
        rtt = f.rtt_us
        cells = (
            _opt(f.pid, "d"), (f.comm or "-")[:15], _endpoint(f.local_addr, f.local_port),
            _endpoint(f.remote_addr, f.remote_port), f.state + ("*" if f.closed else ""),
            DIRECTION_CELL.get(f.direction, f.direction), (f.congestion_control or "-")[:5],
            _opt(None if rtt is None else rtt / 1000, ".3f"),
            str(f.total_retrans), str(f.data_segs_out),
            _opt(None if f.loss_rate is None else percent(f.loss_rate), ".2f"),
            _opt(rate, ".1f"), str(f.snd_cwnd), _opt(f.age_s, ".1f"),
        )
        widths = [w for _, w in COLUMNS]
        lines.append(" ".join(f"{c:<{w}}" if i < LEFT else f"{c:>{w}}"
                              for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip())
    if len(lines) == 1:
        lines.append("(no TCP flows)")
    lines.append(f"{len(flows)} flows; * closed since the last read; RTT_MS is a receiving "
                 "flow's receiver estimate; MBIT/S is a sending flow's delivery-rate sample")
    return "\n".join(lines) + "\n"

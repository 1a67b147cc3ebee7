"""What a run's connections moved, by the address they went to: the bytes
each way, and how many connections moved data at once (the summary's
stream count)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tamebpf.common.records import Flow

# A connection "moved data" in a step when it moved this share of the busiest
# one's bytes (aggregate.STREAM_SHARE: a control connection beside the data).
STREAM_SHARE = 0.01


@dataclass
class Moved:
    """What the run's connections to one address moved."""

    sent: dict[int, int] = field(default_factory=dict)  # cookie -> bytes acked
    received: dict[int, int] = field(default_factory=dict)
    # Connections that moved data in two readings in a row, at most: a
    # control connection moves a little at the start and at the end (iperf3's
    # results), and in the last reading beside the data streams' tails it
    # counted as one more stream, once in a few runs.
    streams: int = 0
    peak: int = 0  # in one reading, at most: the count of a run read once
    last: int = 0  # in the last reading
    congestion: str | None = None

    @property
    def counted(self) -> int:
        return self.streams or self.peak

    def read(self, amounts: Sequence[int]) -> None:
        """One reading: the bytes each connection that moved any moved."""
        n = sum(1 for a in amounts if a >= max(amounts) * STREAM_SHARE) if amounts else 0
        self.streams, self.peak, self.last = max(self.streams, min(n, self.last)), \
            max(self.peak, n), n


def count(moved: dict[str, Moved], flows: Sequence[Flow]) -> None:
    """One reading into `moved`: bytes per address, and how many
    connections moved data at once."""
    step: dict[str, list[int]] = {}
    for f in flows:
        m = moved.setdefault(f.remote_addr, Moved())
        before = m.sent.get(f.cookie, 0) + m.received.get(f.cookie, 0)
        m.sent[f.cookie] = max(m.sent.get(f.cookie, 0), f.bytes_acked)
        m.received[f.cookie] = max(m.received.get(f.cookie, 0), f.bytes_received)
        delta = m.sent[f.cookie] + m.received[f.cookie] - before
        if delta > 0:
            step.setdefault(f.remote_addr, []).append(delta)
        if f.congestion_control and f.bytes_acked > 0:
            m.congestion = f.congestion_control
    for addr, m in moved.items():
        m.read(step.get(addr, []))

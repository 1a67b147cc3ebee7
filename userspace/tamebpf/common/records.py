"""The records tamebpf reads from the kernel, as plain values: no ctypes, no
I/O. The kernel layer (tamebpf.kernel.flows) makes them; the pure core
(groups), the exporter and the views consume them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, Protocol


@dataclass(frozen=True)
class Flow:
    """One TCP flow; None means the kernel does not know the value (yet)."""

    # In the order of `tamebpf flows --json`: the keys that command promises
    # (FLOW_JSON_KEYS) first. kernel/flows.py flow_row makes tuples of this
    # order, and Flow(*row) takes them as they come.
    cookie: int
    pid: int | None
    comm: str | None
    cgroup_id: int
    cgroup: str | None
    family: str  # "ipv4" or "ipv6" (IPv4-mapped IPv6 sockets count as ipv4)
    local_addr: str
    local_port: int
    remote_addr: str
    remote_port: int
    state: str
    congestion_control: str | None
    srtt_us: int | None
    rttvar_us: int | None
    min_rtt_us: int | None
    segs_out: int
    data_segs_out: int
    total_retrans: int
    bytes_acked: int
    bytes_received: int
    snd_cwnd: int
    snd_ssthresh: int | None
    mss: int
    delivery_rate_bps: int | None
    age_s: float | None  # since SYN sent/received, if tamebpf saw it
    closed: bool
    segs_in: int
    data_segs_in: int
    retrans_out: int
    lost_out: int
    bytes_sent: int
    bytes_retrans: int
    snd_wnd: int
    delivered: int  # segments the peer got (ACKed or SACKed), whole life
    loss_rate: float | None  # total_retrans / data_segs_out
    netns: int
    read_monotonic_ns: int  # CLOCK_MONOTONIC when the counters were read
    # Window reductions (entries into CWR, Recovery or Loss) while tamebpf's
    # flow programs were loaded: the congestion epochs advise's stop rule
    # counts. 0 for a flow that never lost, or when not counted.
    cong_events: int = 0
    # The RTT this end measures as it receives data (None until data came),
    # and the segments that arrived out of order, whole life.
    rcv_rtt_us: int | None = None
    rcv_ooopack: int = 0
    # Which way the flow's bytes went, whole life: "send" (bytes acked by
    # the peer) or "receive" (bytes received) (DIRECTIONS).
    direction: str = "send"

    @property
    def rtt_us(self) -> int | None:
        """The RTT of the flow's own data: srtt for a sender, the receiver's
        estimate for a receiver (its srtt sees only the handshake)."""
        if self.direction == "receive" and self.rcv_rtt_us:
            return self.rcv_rtt_us
        return self.srtt_us

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


DIRECTIONS = ("send", "receive")

# The keys `tamebpf flows --json` promises, first in every object, and the
# whole order (Flow's fields, which start with these; a unit test checks).
FLOW_JSON_KEYS = (
    "cookie", "pid", "comm", "cgroup_id", "cgroup", "family", "local_addr", "local_port",
    "remote_addr", "remote_port", "state", "congestion_control", "srtt_us", "rttvar_us",
    "min_rtt_us", "segs_out", "data_segs_out", "total_retrans", "bytes_acked",
    "bytes_received", "snd_cwnd", "snd_ssthresh", "mss", "delivery_rate_bps", "age_s",
)
FLOW_JSON_ORDER = tuple(f.name for f in fields(Flow))


@dataclass(frozen=True)
class ReaderStats:
    closed_recorded: int
    closed_dropped: int
    owners_dropped: int
    closed_fill: int
    closed_max: int


class FlowSource(Protocol):
    """What reads flows: a FlowReader (kernel), or a fake in the tests."""

    def snapshot(self) -> list[Flow]: ...

    def stats(self) -> ReaderStats: ...


@dataclass(frozen=True)
class FlowChanges:
    """One snapshot as its differences from the one before (FlowReader.changes):
    the flows that are new, changed in anything but their read time, or
    closed; the cookies of the last snapshot's open flows that are gone; how
    many flows are open; and when the kernel read them (CLOCK_MONOTONIC)."""

    changed: Sequence[Flow]  # may decode lazily: use before the next read
    vanished: list[int]
    open_flows: int
    read_ns: int


class ChangeSource(FlowSource, Protocol):
    """A flow source that can also say what changed (the kernel's can)."""

    def changes(self) -> FlowChanges: ...


@dataclass(frozen=True)
class Cap:
    """One cap in force (tamebpf cap), with its counters as read just now."""

    id: int
    cgroup: str  # below the cgroup v2 root, as it was when the cap was set
    cgroup_id: int
    cgroup_exists: bool
    dest: str
    family: str
    port: int | None
    max_streams: int
    streams: int  # live streams now
    refused: int  # connect()s refused, total
    charged: int  # connect()s let through, total
    seeded: int  # streams that existed when the cap was set
    released: int  # streams counted down, total
    mode: str = "refuse"  # "refuse" or "pace"
    rate_bytes_per_s: int = 0  # pace target of the group; 0 in refuse mode
    port_end: int | None = None  # last port of a range (None: just `port`)
    # pace mode: what it paces: "send", "receive" (the streams' receive
    # window) or "both"
    direction: str = "send"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Progress:
    """How far a probe has got (advise/probes.run_probes reports it)."""

    index: int  # 1-based probe number
    total: int
    streams: int
    elapsed_s: float
    duration_s: float
    goodput_mbps: float | None  # over the last sample interval
    # With a stop rule: the stage may end before duration_s, and the median
    # stream's congestion epochs since slow start at the last check.
    until_settled: bool = False
    epochs: float | None = None


@dataclass(frozen=True)
class RxCounts:
    """What one receiving connection's data showed of its sender's losses
    (kernel/acktrain.py reads it): data segments, loss events (a gap
    opening where none was), segments that filled a hole (the sender's
    retransmissions, or reordering), and segments received already."""

    segs: int
    episodes: int
    fills: int
    dups: int


@dataclass(frozen=True)
class AckLog:
    """ACKs that advanced each connection: cookie -> [(t_ns, ack_seq)], in
    arrival order; `lost` > 0: some ACKs came after the log was full (the
    kernel stops counting soon after: not how many). kernel/acktrain.py
    reads it; estimate/acktrain.py estimates the capacity from it."""

    flows: Mapping[int, Sequence[tuple[int, int]]]
    lost: int = 0

    def only(self, cookies: Sequence[int] | None) -> AckLog:
        if not cookies:
            return self
        keep = set(cookies)
        return AckLog({c: v for c, v in self.flows.items() if c in keep}, self.lost)

    def between(self, start_ns: int, end_ns: int | None) -> AckLog:
        """The ACKs that arrived from `start_ns` (before `end_ns`, if given):
        one stage of a staged probe."""
        last = end_ns if end_ns is not None else 1 << 63
        return AckLog({c: [a for a in v if start_ns <= a[0] < last]
                       for c, v in self.flows.items()}, self.lost)

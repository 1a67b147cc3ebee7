"""What the aggregation yields: one Group per (owner, destination,
direction) at each refresh, and a refresh's result (Refresh)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from tamebpf.common.records import Flow
from tamebpf.groups.caps import CapLimit
from tamebpf.groups.counters import Counters
from tamebpf.groups.passive_fit import Observation, PassiveFit
from tamebpf.model import Advice


class GroupKey(NamedTuple):
    owner: str | None  # comm or cgroup path; None when the kernel does not know it
    remote_addr: str
    direction: str = "send"  # which way its flows' bytes go: "send" or "receive"


@dataclass(frozen=True)
class Group:
    """One (owner, destination, direction) at one refresh. For a group that
    receives, goodput is the bytes received, the RTT the receivers'
    estimate, and loss and congestion control are unknown (they are the
    remote senders')."""

    key: GroupKey
    comm: str | None  # the processes' name, if they share one
    cgroup: str | None  # their cgroup, if they share one
    remote_addr: str
    flows: int  # open flows
    streams: int  # established flows that moved data in the last interval (aggregate.STREAM_SHARE)
    goodput_bps: float | None  # bit/s acknowledged (received) in the last interval
    loss_rate: float | None  # retransmitted / data segments sent, last interval
    srtt_us: float | None  # mean over the streams (over open flows if none)
    congestion_control: str | None  # e.g. "cubic", or "bbr,cubic" when mixed
    counters: Counters  # cumulative, monotone while the aggregator lives
    flows_closed: int  # cumulative
    passive: PassiveFit | None
    cap: int | None  # the tightest matching cap, in streams
    interval_s: float | None
    observed: tuple[Observation, ...] = ()  # stream counts seen often enough to fit
    over_cap: bool = False  # a matching cap counts more streams than it allows
    paced_bps: float | None = None  # the tightest matching pace cap's target, bit/s
    paced_follows: bool = False  # ... and that cap follows the path (cap/follow.py)
    # That cap itself: its streams share one target, whichever groups they are in.
    pacer: CapLimit | None = None

    @property
    def direction(self) -> str:
        return self.key.direction

    @property
    def advice(self) -> Advice | None:
        return self.passive.advice if self.passive else None

    @property
    def goodput_mbps(self) -> float | None:
        return None if self.goodput_bps is None else self.goodput_bps / 1e6

    @property
    def srtt_ms(self) -> float | None:
        return None if self.srtt_us is None else self.srtt_us / 1000.0

    @property
    def over_advice(self) -> bool:
        adv = self.advice
        return adv is not None and self.streams > adv.num_flows

    @property
    def active(self) -> bool:
        return self.streams > 0


@dataclass(frozen=True)
class Refresh:
    """What one refresh (Aggregator.refresh_changes or refresh_snapshot)
    read: the groups, how many flows are open, and the open flows themselves
    when asked for."""

    groups: list[Group]
    open_flows: int
    flows: list[Flow]

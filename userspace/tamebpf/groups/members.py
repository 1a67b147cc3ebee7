"""Per-flow bookkeeping behind a group's cumulative counters: each tracked
flow's state, and what a group's tracked flows add up to between snapshots."""

from __future__ import annotations

from collections import Counter as Tally
from dataclasses import dataclass, field

from tamebpf.groups.counters import ZERO, Vec, add, minus
from tamebpf.groups.group import GroupKey


@dataclass(slots=True)  # one per open flow: no per-instance dict
class FlowState:
    """A tracked flow: the group it counts toward, and its counters then."""

    key: GroupKey
    base: Vec  # counters already credited elsewhere (before it joined this group)
    last: Vec
    missing: int = 0
    # As the flow's latest record showed it (counted while present).
    comm: str | None = None
    cgroup: str | None = None
    srtt_us: int | None = None
    present: bool = False


@dataclass
class Members:
    """What a group's tracked flows add up to, kept as flows come, change
    and go so that a snapshot costs in proportion to what changed. Flows
    missing from the snapshots (for up to `grace` of them) still count and
    keep their counters, but not their owner or RTT, as before."""

    flows: int = 0
    live: Vec = ZERO  # sum of last - base
    comms: Tally[str | None] = field(default_factory=Tally)
    cgroups: Tally[str | None] = field(default_factory=Tally)
    srtt_sum: int = 0
    srtt_n: int = 0

    def join(self, st: FlowState) -> None:
        self.flows += 1
        self.live = add(self.live, minus(st.last, st.base))

    def leave(self, st: FlowState) -> None:
        if st.present:
            self.leave_view(st)
        self.flows -= 1
        self.live = minus(self.live, minus(st.last, st.base))

    def enter_view(self, st: FlowState) -> None:
        st.present = True
        self.comms[st.comm] += 1
        self.cgroups[st.cgroup] += 1
        if st.srtt_us is not None:
            self.srtt_sum += st.srtt_us
            self.srtt_n += 1

    def leave_view(self, st: FlowState) -> None:
        st.present = False
        for tally, value in ((self.comms, st.comm), (self.cgroups, st.cgroup)):
            tally[value] -= 1
            if not tally[value]:
                del tally[value]  # owners come and go: keep only those present
        if st.srtt_us is not None:
            self.srtt_sum -= st.srtt_us
            self.srtt_n -= 1

"""The aggregation: successive flow snapshots -> one Group per (owner,
destination, direction), with interval measures and cumulative counters
(the package's docstring, tamebpf/groups/__init__.py, says what each group
gets)."""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Literal

from tamebpf.common.defaults import GROUP_BY
from tamebpf.common.records import Flow, FlowChanges
from tamebpf.groups.caps import CapLimit, cap_marks
from tamebpf.groups.counters import (
    ACKED,
    DATA_SEGS,
    RECEIVED,
    RETRANS,
    SENT,
    ZERO,
    Counters,
    Vec,
    add,
    counters_of,
    highest,
    minus,
)
from tamebpf.groups.group import Group, GroupKey, Refresh
from tamebpf.groups.members import FlowState, Members
from tamebpf.groups.passive_fit import Fitter, Levels
from tamebpf.model import Settings

GroupBy = Literal["comm", "cgroup"]

# A flow that sent less than this share of the bytes its group's busiest flow
# sent in the interval is not counted as a stream (control connections).
STREAM_SHARE = 0.01
# Flows taken for gone without a closed record, remembered in case it comes late.
GONE_MEMORY = 4096
# A flow changes direction (and group) only when an interval moves this many
# times more bytes the other way, and at least TURN_BYTES: a connection
# used both ways (a control connection, a reused data channel) does not
# hop between groups with every request and answer.
TURN_RATIO, TURN_BYTES = 4, 1 << 16
# A flow's record as update() compares it with the last snapshot's: all but
# the read time and the age computed from it.
_same = attrgetter(*(f.name for f in fields(Flow) if f.name not in ("read_monotonic_ns", "age_s")))


@dataclass
class _GroupState:
    key: GroupKey
    acc: Vec = ZERO  # folded counters of flows that left
    closed: int = 0
    last_active_ns: int = 0
    levels: Levels = field(default_factory=Levels)  # for the passive fit


@dataclass
class _Round:
    """One group's sums during one update."""

    delta: Vec = ZERO
    flows: int = 0
    streams: int = 0
    srtt: list[int] = field(default_factory=list)
    srtt_any_sum: int = 0  # over the open flows seen, for when no stream has an RTT
    srtt_any_n: int = 0
    ccs: Tally[str] = field(default_factory=Tally)
    ports: Tally[int] = field(default_factory=Tally)  # streams by remote port
    senders: list[tuple[int, Flow]] = field(default_factory=list)  # (bytes, flow)
    comms: set[str | None] = field(default_factory=set)
    cgroups: set[str | None] = field(default_factory=set)


class Aggregator:
    """Groups successive flow snapshots; keeps what must survive between them.

    settings: the limits for the advice (as `tamebpf predict`).
    history_s: observations older than this are forgotten, so the fit follows
      changes in cross traffic.  samples_per_level: at most this many kept per
      stream count.  min_samples: a stream count joins the fit once it was
      observed this many times.
    retain_s: a group with no open flows is forgotten after this long (None:
      never).  max_groups: at most this many groups; idle ones go first.
    grace: snapshots a flow may be missing without a closed record before its
      last counters are taken as final.
    """

    def __init__(
        self,
        group_by: GroupBy = "comm",
        settings: Settings | None = None,
        *,
        history_s: float = 600.0,
        samples_per_level: int = 30,
        min_samples: int = 3,
        retain_s: float | None = None,
        max_groups: int | None = None,
        grace: int = 1,
    ) -> None:
        if group_by not in GROUP_BY:
            raise ValueError(f"group_by must be one of {GROUP_BY}, got {group_by!r}")
        self.group_by: GroupBy = group_by
        self.fitter = Fitter(settings or Settings(), history_s, samples_per_level, min_samples)
        self.retain_ns = None if retain_s is None else int(retain_s * 1e9)
        self.max_groups = max_groups
        self.grace = grace
        self.evicted = 0  # groups forgotten so far
        self._flows: dict[int, FlowState] = {}
        self._groups: dict[GroupKey, _GroupState] = {}
        self._gone: dict[int, Vec] = {}  # last counters of flows taken for gone
        self._prev_ns: int | None = None
        # Per group, what its tracked flows add up to between snapshots.
        self._by_group: dict[GroupKey, Members] = {}
        self._away: set[int] = set()  # tracked flows missing from the snapshots
        self._last_seen: dict[int, Flow] = {}  # update(): the last open flows given

    def key(self, flow: Flow, direction: str | None = None) -> GroupKey:
        owner = flow.comm if self.group_by == "comm" else flow.cgroup
        return GroupKey(owner, flow.remote_addr, direction or flow.direction)

    def direction(self, cur: Vec, st: FlowState | None, flow: Flow) -> str:
        """Which way a flow's bytes go: its group's way until an interval
        moves clearly more the other way; a new flow's, its whole life's."""
        if st is None:
            return flow.direction
        now = st.key.direction
        sent, received = cur[ACKED] - st.last[ACKED], cur[RECEIVED] - st.last[RECEIVED]
        mine, other = (sent, received) if now == "send" else (received, sent)
        if other >= TURN_BYTES and other > TURN_RATIO * mine:
            return "receive" if now == "send" else "send"
        return now

    @property
    def tracked_flows(self) -> int:
        return len(self._flows)

    def update(self, flows: Sequence[Flow], now_ns: int,
               caps: Sequence[CapLimit] = ()) -> list[Group]:
        """Take one snapshot (open flows, plus flows closed since the last one,
        each exactly once) read at monotonic time now_ns; return every group
        still remembered, in no particular order.

        Works out what changed since the last snapshot given here and hands
        that to `apply`; a reader that knows the changes (the C library
        does: FlowReader.changes) calls `apply` and skips the comparison."""
        prev = self._last_seen
        seen = {f.cookie: f for f in flows}
        changed = [f for f in flows
                   if f.closed or (old := prev.get(f.cookie)) is None or _same(old) != _same(f)]
        vanished = [c for c in prev if c not in seen]
        self._last_seen = {c: f for c, f in seen.items() if not f.closed}
        return self.apply(changed, vanished, now_ns, caps)

    def apply(self, changed: Sequence[Flow], vanished: Iterable[int], now_ns: int,
              caps: Sequence[CapLimit] = ()) -> list[Group]:
        """Take one snapshot as its differences from the one before: the
        flows that are new, changed in anything but their read time, or
        closed (each closed flow once), and the cookies of the previous
        snapshot's open flows that it no longer has. Every other flow is
        taken to be as it was. The work is in proportion to the changes.

        In phases: the vanished flows leave the view, each changed flow is
        taken into its group's round, flows missing too long are taken for
        gone, the groups' held flows join their rounds, and every group is
        finished (then the oldest forgotten)."""
        first = self._prev_ns is None
        dt_ns = None if self._prev_ns is None else now_ns - self._prev_ns
        interval = dt_ns / 1e9 if dt_ns and dt_ns > 0 else None
        rounds: dict[GroupKey, _Round] = {}
        self._leave_view(vanished)
        for f in changed:
            self._take(f, first, rounds)
        self._age_away()
        busy = self._hold(rounds)
        out = self._finish_all(rounds, interval, now_ns, caps)
        self._prev_ns = now_ns
        kept = self._evict(now_ns, busy)
        return [x for x in out if x.key in kept]

    def _leave_view(self, vanished: Iterable[int]) -> None:
        """Flows of the previous snapshot this one lacks: out of view, and
        away until they come back or are taken for gone."""
        for cookie in vanished:
            st = self._flows.get(cookie)
            if st is not None and st.present:
                self._members(st.key).leave_view(st)
                self._away.add(cookie)

    def _state_of(self, f: Flow, key: GroupKey, cur: Vec, first: bool) -> FlowState:
        """The flow's state, made for a flow not tracked, and moved to group
        `key` when the flow's group changed."""
        st = self._flows.get(f.cookie)
        if st is None:
            gone = self._gone.pop(f.cookie, None)
            if gone is not None:
                # Back after being taken for gone (a late closed record):
                # its counters up to then are already in its group.
                st = FlowState(key, gone, gone)
            else:
                # Seen for the first time.  After the first snapshot, a new
                # flow started since the previous one: all its counters are new.
                st = FlowState(key, ZERO, cur if first else ZERO)
            self._flows[f.cookie] = st
            self._members(key).join(st)
            return st
        m = self._members(st.key)
        if st.present:
            m.leave_view(st)
        if st.key != key:
            old = self._group(st.key)
            m.leave(st)
            old.acc = add(old.acc, minus(st.last, st.base))
            st.key, st.base = key, st.last
            self._members(key).join(st)
        return st

    def _take(self, f: Flow, first: bool, rounds: dict[GroupKey, _Round]) -> None:
        """One changed flow: its counters' growth into its group and round;
        a closed flow's final counters into its group's account."""
        cur: Vec = counters_of(f)
        g = self._group(self.key(f, self.direction(cur, self._flows.get(f.cookie), f)))
        key = g.key  # the group's own key object: one per group, not per flow
        r = rounds.get(key)
        if r is None:
            r = rounds[key] = _Round()
        st = self._state_of(f, key, cur, first)
        self._away.discard(f.cookie)
        delta = minus(cur, st.last)
        st.last = highest(st.last, cur)
        st.missing = 0
        m = self._members(key)
        m.live = add(m.live, delta)
        r.delta = add(r.delta, delta)
        r.comms.add(f.comm)
        r.cgroups.add(f.cgroup)
        if f.closed:
            g.acc = add(g.acc, minus(st.last, st.base))
            g.closed += 1
            m.leave(st)
            del self._flows[f.cookie]
            return
        receives = key.direction == "receive"
        st.comm, st.cgroup, st.srtt_us = f.comm, f.cgroup, f.rtt_us if receives else f.srtt_us
        m.enter_view(st)
        if receives:  # what it received: in the interval, or ever at first
            moved = f.bytes_received if first else delta[RECEIVED]
            active = moved > 0
        elif first:  # no interval yet: what the flow ever sent
            moved, active = f.bytes_acked + f.bytes_sent, f.data_segs_out > 0
        else:
            moved = delta[ACKED] + delta[SENT]
            active = delta[DATA_SEGS] > 0 or moved > 0
        if f.state == "ESTABLISHED" and active:
            r.senders.append((moved, f))

    def _age_away(self) -> None:
        """Flows away for more than `grace` snapshots are gone without a
        closed record: their last counters are final."""
        for cookie in list(self._away):
            st = self._flows[cookie]
            st.missing += 1
            if st.missing > self.grace:
                owner = self._group(st.key)
                owner.acc = add(owner.acc, minus(st.last, st.base))
                self._members(st.key).leave(st)
                del self._flows[cookie]
                self._away.discard(cookie)
                self._gone[cookie] = st.last
                if len(self._gone) > GONE_MEMORY:
                    del self._gone[next(iter(self._gone))]

    def _hold(self, rounds: dict[GroupKey, _Round]) -> set[GroupKey]:
        """Each group's tracked flows (changed this time or not) into its
        round; the groups that hold any (a group that holds none is dropped
        from the members' index)."""
        busy = set()
        for key, m in list(self._by_group.items()):
            if not m.flows:
                del self._by_group[key]
                continue
            busy.add(key)
            r = rounds.get(key)
            if r is None:
                r = rounds[key] = _Round()
            r.flows = m.flows
            r.comms.update(m.comms)
            r.cgroups.update(m.cgroups)
            r.srtt_any_sum, r.srtt_any_n = m.srtt_sum, m.srtt_n
        return busy

    def _finish_all(self, rounds: dict[GroupKey, _Round], interval: float | None, now_ns: int,
                    caps: Sequence[CapLimit]) -> list[Group]:
        """Every remembered group as of now: those of a round with it, the
        others with nothing new."""
        out = []
        for key, r in rounds.items():
            self._count_streams(r, key.direction == "receive")
            g = self._group(key)
            g.last_active_ns = now_ns
            held = self._by_group.get(key)
            out.append(self._finish(g, r, held.live if held else ZERO, interval, now_ns, caps))
        for key, g in self._groups.items():
            if key not in rounds:
                out.append(self._finish(g, _Round(), ZERO, interval, now_ns, caps))
        return out

    def refresh_changes(self, ch: FlowChanges, caps: Sequence[CapLimit] = ()) -> Refresh:
        """One reading given as what changed since the last (FlowReader.changes),
        timed by the kernel's read."""
        return Refresh(self.apply(ch.changed, ch.vanished, ch.read_ns, caps), ch.open_flows, [])

    def refresh_snapshot(self, snap: Sequence[Flow], clock_ns: int,
                         caps: Sequence[CapLimit] = (), flows: bool = False) -> Refresh:
        """One reading given whole (FlowReader.snapshot), with the monotonic
        clock of the caller when it was read. The snapshot's time is when the
        kernel read the counters (CLOCK_MONOTONIC, as clock_ns); clock_ns
        only when no flow is open. `flows`: keep the open flows in the result."""
        open_flows = [f for f in snap if not f.closed]
        now_ns = max((f.read_monotonic_ns for f in open_flows), default=clock_ns)
        return Refresh(self.update(snap, now_ns, caps), len(open_flows),
                       open_flows if flows else [])

    def _members(self, key: GroupKey) -> Members:
        m = self._by_group.get(key)
        if m is None:
            m = self._by_group[key] = Members()
        return m

    @staticmethod
    def _count_streams(r: _Round, receives: bool) -> None:
        """Streams: flows that moved data in the interval, leaving out those
        that moved a trifle next to the busiest (a control connection beside
        its transfer's data connections). A receiving stream's RTT is its
        receiver's estimate; its congestion control is the remote
        sender's, unknown here (ours only sends it ACKs)."""
        if not r.senders:
            return
        floor = max(moved for moved, _ in r.senders) * STREAM_SHARE
        for moved, f in r.senders:
            if moved < floor:
                continue
            r.streams += 1
            r.ports[f.remote_port] += 1
            rtt = f.rtt_us if receives else f.srtt_us
            if rtt is not None:
                r.srtt.append(rtt)
            if f.congestion_control and not receives:
                r.ccs[f.congestion_control] += 1

    def _group(self, key: GroupKey) -> _GroupState:
        g = self._groups.get(key)
        if g is None:
            g = self._groups[key] = _GroupState(key)
        return g

    def _finish(
        self,
        g: _GroupState,
        r: _Round,
        live: Vec,
        interval: float | None,
        now_ns: int,
        caps: Sequence[CapLimit],
    ) -> Group:
        d = r.delta
        receives = g.key.direction == "receive"
        goodput = None if interval is None else d[RECEIVED if receives else ACKED] * 8 / interval
        loss = None
        if interval is not None and d[DATA_SEGS] > 0 and not receives:
            loss = min(d[RETRANS] / d[DATA_SEGS], 1.0)
        if r.srtt:
            srtt: float | None = sum(r.srtt) / len(r.srtt)
        else:
            srtt = r.srtt_any_sum / r.srtt_any_n if r.srtt_any_n else None
        # An interval without goodput is no observation (goodput is None without one).
        # A receiving group's losses are the remote sender's: none to fit.
        passive = self.fitter.step(g.levels, r.streams, goodput / 1e6 if goodput else None,
                                   0 if receives else d[RETRANS],
                                   0 if receives else d[DATA_SEGS], r.srtt, now_ns, r.ccs)
        comms = {c for c in r.comms if c is not None}
        cgroups = {c for c in r.cgroups if c is not None}
        caps_say = cap_marks(caps, r.cgroups, g.key.remote_addr, r.streams, r.ports)
        return Group(
            key=g.key,
            comm=next(iter(comms)) if len(comms) == 1 else None,
            cgroup=next(iter(cgroups)) if len(cgroups) == 1 else None,
            remote_addr=g.key.remote_addr,
            flows=r.flows,
            streams=r.streams,
            goodput_bps=goodput,
            loss_rate=loss,
            srtt_us=srtt,
            congestion_control=",".join(sorted(r.ccs)) or None,
            counters=Counters(*add(g.acc, live)),
            flows_closed=g.closed,
            passive=passive,
            cap=caps_say.cap,
            interval_s=interval,
            observed=g.levels.observed,
            over_cap=caps_say.over_cap,
            paced_bps=caps_say.paced_bps,
            paced_follows=caps_say.paced_follows,
            pacer=caps_say.pacer,
        )

    def _evict(self, now_ns: int, busy: set[GroupKey]) -> set[GroupKey]:
        idle = [g for k, g in self._groups.items() if k not in busy]
        drop: list[GroupKey] = []
        if self.retain_ns is not None:
            drop += [g.key for g in idle if now_ns - g.last_active_ns > self.retain_ns]
        if self.max_groups is not None:
            excess = len(self._groups) - len(drop) - self.max_groups
            if excess > 0:
                rest = sorted((g for g in idle if g.key not in drop),
                              key=lambda g: g.last_active_ns)
                drop += [g.key for g in rest[:excess]]
        for k in drop:
            del self._groups[k]
        self.evicted += len(drop)
        return set(self._groups)

"""Flows -> groups: the pure core of `tamebpf watch` and `tamebpf export`.

An `Aggregator` is fed one snapshot of flows at a time (`FlowReader.snapshot()`,
or synthetic `Flow` objects in tests) and returns one `Group` per (owner,
destination), where the owner is the process name (comm) or the cgroup.  No
I/O and no clock: the caller passes the time of each snapshot.

Per refresh, each group gets
- interval measures (from the counter deltas since the previous snapshot):
  streams (established flows that sent data, not counting those that sent a
  trifle next to the group's busiest flow), goodput (bytes acknowledged),
  loss rate (retransmitted / data segments sent), mean smoothed RTT;
- cumulative counters that never go backwards: the final counters of closed
  flows are folded into the group when they arrive (each exactly once), live
  flows add their current counters, and a flow that disappears without a
  closed record (the kernel's map was full) or changes group (its owner became
  known) leaves its last counters behind;
- the passive fit of docs/model.md: goodput observed at two or more distinct
  stream counts, fitted as if they were probes (no probe traffic is sent),
  with its advice, the loss x RTT^2 estimator beside it (section 3), and a
  mark when the group runs more streams than the advice or a cap.
"""

from __future__ import annotations

import ipaddress
import statistics
from collections import Counter as Tally
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from operator import add, attrgetter
from typing import Literal, NamedTuple

from tamebpf.model import (
    DEFAULT_MODEL,
    Advice,
    Fit,
    LossSample,
    ModelInputError,
    Prediction,
    Probe,
    Settings,
    fit_loss_rtt,
    fit_throughput,
    predict,
)
from tamebpf.records import Flow, FlowChanges

GroupBy = Literal["comm", "cgroup"]
GROUP_BY: tuple[GroupBy, ...] = ("comm", "cgroup")

# Congestion controls the square-root law describes (docs/model.md, section 7).
LOSS_BASED = frozenset({"reno", "cubic", "htcp", "highspeed", "scalable", "bic", "westwood"})
# Two advices this far apart (in streams) mean the estimators disagree.
DISAGREEMENT_STREAMS = 2
# A flow that sent less than this share of the bytes its group's busiest flow
# sent in the interval is not counted as a stream (control connections).
STREAM_SHARE = 0.01
# Flows taken for gone without a closed record, remembered in case it comes late.
GONE_MEMORY = 4096


@dataclass(frozen=True)
class Counters:
    """Cumulative TCP counters (the kernel's names)."""

    bytes_acked: int = 0
    bytes_received: int = 0
    bytes_sent: int = 0
    bytes_retrans: int = 0
    segs_out: int = 0
    segs_in: int = 0
    data_segs_out: int = 0
    total_retrans: int = 0


COUNTER_NAMES = tuple(f.name for f in fields(Counters))
# The hot path works on plain tuples in COUNTER_NAMES order: thousands of
# flows per refresh.
_Vec = tuple[int, ...]
_of = attrgetter(*COUNTER_NAMES)
ZERO: _Vec = (0,) * len(COUNTER_NAMES)
_ACKED = COUNTER_NAMES.index("bytes_acked")
_SENT = COUNTER_NAMES.index("bytes_sent")
_DATA_SEGS = COUNTER_NAMES.index("data_segs_out")
_RETRANS = COUNTER_NAMES.index("total_retrans")
# A flow's record as update() compares it with the last snapshot's: all but
# the read time and the age computed from it.
_same = attrgetter(*(f.name for f in fields(Flow) if f.name not in ("read_monotonic_ns", "age_s")))


def _add(a: _Vec, b: _Vec) -> _Vec:
    return tuple(map(add, a, b))


def _minus(a: _Vec, b: _Vec) -> _Vec:
    """Field-wise a - b floored at 0 (counters only grow)."""
    return tuple(x - y if x > y else 0 for x, y in zip(a, b, strict=True))


def _highest(a: _Vec, b: _Vec) -> _Vec:
    return tuple(map(max, a, b))


class GroupKey(NamedTuple):
    owner: str | None  # comm or cgroup path; None when the kernel does not know it
    remote_addr: str


@dataclass(frozen=True)
class CapLimit:
    """A limit on streams set by `tamebpf cap`, as watch and export see it.

    None in cgroup or remote means "any"; cgroup covers its subtree; remote
    is an address or a network (CIDR); port None means every port, and
    port_end the last port of a range (None: just `port`)."""

    streams: int
    cgroup: str | None = None
    remote: str | None = None
    port: int | None = None
    pace_bps: float | None = None  # a pace cap: the group's target, bit/s (streams unused)
    port_end: int | None = None
    follows: bool = False  # a pace cap whose target the agent keeps on the path

    def covers_port(self, port: int) -> bool:
        if self.port is None:
            return True
        return self.port <= port <= (self.port if self.port_end is None else self.port_end)

    def matches(self, cgroups: Iterable[str | None], remote_addr: str) -> bool:
        if self.cgroup is not None and not any(
            c is not None and (c == self.cgroup or c.startswith(self.cgroup.rstrip("/") + "/"))
            for c in cgroups
        ):
            return False
        if self.remote is None:
            return True
        try:
            net = ipaddress.ip_network(self.remote, strict=False)
            return ipaddress.ip_address(remote_addr) in net
        except ValueError:
            return self.remote == remote_addr


@dataclass(frozen=True)
class Observation:
    """What the group showed while it ran `streams` streams (recent refreshes)."""

    streams: int
    goodput_mbps: float  # median over the samples
    loss_rate: float | None  # retransmitted / data segments, over the samples
    srtt_s: float | None  # median
    samples: int


@dataclass(frozen=True)
class PassiveFit:
    """The model fitted to observations instead of probes: the throughput fit
    (whose advice is the group's advice) and the loss x RTT^2 fit beside it."""

    observations: tuple[Observation, ...]
    prediction: Prediction
    loss_rtt: Prediction | None
    warnings: tuple[str, ...]

    @property
    def fit(self) -> Fit:
        return self.prediction.fit

    @property
    def advice(self) -> Advice:
        return self.prediction.advice

    @property
    def loss_rtt_advice(self) -> Advice | None:
        return self.loss_rtt.advice if self.loss_rtt else None


@dataclass(frozen=True)
class Group:
    """One (owner, destination) at one refresh."""

    key: GroupKey
    comm: str | None  # the processes' name, if they share one
    cgroup: str | None  # their cgroup, if they share one
    remote_addr: str
    flows: int  # open flows
    streams: int  # established flows that sent data in the last interval (see STREAM_SHARE)
    goodput_bps: float | None  # bit/s acknowledged in the last interval
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
    paced_follows: bool = False  # ... and that cap follows the path (cap_follow.py)

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
    """What one Aggregator.refresh read: the groups, how many flows are open,
    and the open flows themselves when asked for."""

    groups: list[Group]
    open_flows: int
    flows: list[Flow]


@dataclass(slots=True)  # one per open flow: no per-instance dict
class _FlowState:
    key: GroupKey
    base: _Vec  # counters already credited elsewhere (before it joined this group)
    last: _Vec
    missing: int = 0
    # As the flow's latest record showed it (counted while present).
    comm: str | None = None
    cgroup: str | None = None
    srtt_us: int | None = None
    present: bool = False


@dataclass
class _Members:
    """What a group's tracked flows add up to, kept as flows come, change
    and go so that a snapshot costs in proportion to what changed. Flows
    missing from the snapshots (for up to `grace` of them) still count and
    keep their counters, but not their owner or RTT, as before."""

    flows: int = 0
    live: _Vec = ZERO  # sum of last - base
    comms: Tally[str | None] = field(default_factory=Tally)
    cgroups: Tally[str | None] = field(default_factory=Tally)
    srtt_sum: int = 0
    srtt_n: int = 0

    def join(self, st: _FlowState) -> None:
        self.flows += 1
        self.live = _add(self.live, _minus(st.last, st.base))

    def leave(self, st: _FlowState) -> None:
        if st.present:
            self.leave_view(st)
        self.flows -= 1
        self.live = _minus(self.live, _minus(st.last, st.base))

    def enter_view(self, st: _FlowState) -> None:
        st.present = True
        self.comms[st.comm] += 1
        self.cgroups[st.cgroup] += 1
        if st.srtt_us is not None:
            self.srtt_sum += st.srtt_us
            self.srtt_n += 1

    def leave_view(self, st: _FlowState) -> None:
        st.present = False
        for tally, value in ((self.comms, st.comm), (self.cgroups, st.cgroup)):
            tally[value] -= 1
            if not tally[value]:
                del tally[value]  # owners come and go: keep only those present
        if st.srtt_us is not None:
            self.srtt_sum -= st.srtt_us
            self.srtt_n -= 1


@dataclass
class _Sample:
    at_ns: int
    goodput_mbps: float
    retrans: int
    data_segs: int
    srtt_s: float | None


@dataclass
class _GroupState:
    key: GroupKey
    acc: _Vec = ZERO  # folded counters of flows that left
    closed: int = 0
    last_active_ns: int = 0
    prev_streams: int | None = None
    history: dict[int, deque[_Sample]] = field(default_factory=dict)
    dirty: bool = False  # history changed since the last fit
    observed: tuple[Observation, ...] = ()
    passive: PassiveFit | None = None


@dataclass
class _Round:
    """One group's sums during one update."""

    delta: _Vec = ZERO
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
        self.settings = settings or Settings()
        self.history_ns = int(history_s * 1e9)
        self.samples_per_level = samples_per_level
        self.min_samples = max(1, min_samples)
        self.retain_ns = None if retain_s is None else int(retain_s * 1e9)
        self.max_groups = max_groups
        self.grace = grace
        self.evicted = 0  # groups forgotten so far
        self._flows: dict[int, _FlowState] = {}
        self._groups: dict[GroupKey, _GroupState] = {}
        self._gone: dict[int, _Vec] = {}  # last counters of flows taken for gone
        self._prev_ns: int | None = None
        # Per group, what its tracked flows add up to between snapshots.
        self._by_group: dict[GroupKey, _Members] = {}
        self._away: set[int] = set()  # tracked flows missing from the snapshots
        self._last_seen: dict[int, Flow] = {}  # update(): the last open flows given

    def key(self, flow: Flow) -> GroupKey:
        owner = flow.comm if self.group_by == "comm" else flow.cgroup
        return GroupKey(owner, flow.remote_addr)

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
        taken to be as it was. The work is in proportion to the changes."""
        first = self._prev_ns is None
        dt_ns = None if self._prev_ns is None else now_ns - self._prev_ns
        interval = dt_ns / 1e9 if dt_ns and dt_ns > 0 else None
        rounds: dict[GroupKey, _Round] = {}
        for cookie in vanished:
            st = self._flows.get(cookie)
            if st is not None and st.present:
                self._members(st.key).leave_view(st)
                self._away.add(cookie)
        for f in changed:
            g = self._group(self.key(f))
            key = g.key  # the group's own key object: one per group, not per flow
            r = rounds.get(key)
            if r is None:
                r = rounds[key] = _Round()
            cur: _Vec = _of(f)
            st = self._flows.get(f.cookie)
            if st is None:
                gone = self._gone.pop(f.cookie, None)
                if gone is not None:
                    # Back after being taken for gone (a late closed record):
                    # its counters up to then are already in its group.
                    st = _FlowState(key, gone, gone)
                else:
                    # Seen for the first time.  After the first snapshot, a new
                    # flow started since the previous one: all its counters are new.
                    st = _FlowState(key, ZERO, cur if first else ZERO)
                self._flows[f.cookie] = st
                self._members(key).join(st)
            else:
                m = self._members(st.key)
                if st.present:
                    m.leave_view(st)
                if st.key != key:
                    old = self._group(st.key)
                    m.leave(st)
                    old.acc = _add(old.acc, _minus(st.last, st.base))
                    st.key, st.base = key, st.last
                    self._members(key).join(st)
            self._away.discard(f.cookie)
            delta = _minus(cur, st.last)
            st.last = _highest(st.last, cur)
            st.missing = 0
            m = self._members(key)
            m.live = _add(m.live, delta)
            r.delta = _add(r.delta, delta)
            r.comms.add(f.comm)
            r.cgroups.add(f.cgroup)
            if f.closed:
                g.acc = _add(g.acc, _minus(st.last, st.base))
                g.closed += 1
                m.leave(st)
                del self._flows[f.cookie]
                continue
            st.comm, st.cgroup, st.srtt_us = f.comm, f.cgroup, f.srtt_us
            m.enter_view(st)
            if first:  # no interval yet: what the flow ever sent
                sent, active = f.bytes_acked + f.bytes_sent, f.data_segs_out > 0
            else:
                sent = delta[_ACKED] + delta[_SENT]
                active = delta[_DATA_SEGS] > 0 or sent > 0
            if f.state == "ESTABLISHED" and active:
                r.senders.append((sent, f))
        for cookie in list(self._away):
            st = self._flows[cookie]
            st.missing += 1
            if st.missing > self.grace:
                # Gone without a closed record: its last counters are final.
                owner = self._group(st.key)
                owner.acc = _add(owner.acc, _minus(st.last, st.base))
                self._members(st.key).leave(st)
                del self._flows[cookie]
                self._away.discard(cookie)
                self._gone[cookie] = st.last
                if len(self._gone) > GONE_MEMORY:
                    del self._gone[next(iter(self._gone))]
        out = []
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
        for key, r in rounds.items():
            self._count_streams(r)
            g = self._group(key)
            g.last_active_ns = now_ns
            held = self._by_group.get(key)
            out.append(self._finish(g, r, held.live if held else ZERO, interval, now_ns, caps))
        for key, g in self._groups.items():
            if key not in rounds:
                out.append(self._finish(g, _Round(), ZERO, interval, now_ns, caps))
        self._prev_ns = now_ns
        kept = self._evict(now_ns, busy)
        return [x for x in out if x.key in kept]

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

    def _members(self, key: GroupKey) -> _Members:
        m = self._by_group.get(key)
        if m is None:
            m = self._by_group[key] = _Members()
        return m

    @staticmethod
    def _count_streams(r: _Round) -> None:
        """Streams: flows that sent data in the interval, leaving out those
        that sent a trifle next to the busiest (a control connection beside
        its transfer's data connections)."""
        if not r.senders:
            return
        floor = max(sent for sent, _ in r.senders) * STREAM_SHARE
        for sent, f in r.senders:
            if sent < floor:
                continue
            r.streams += 1
            r.ports[f.remote_port] += 1
            if f.srtt_us is not None:
                r.srtt.append(f.srtt_us)
            if f.congestion_control:
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
        live: _Vec,
        interval: float | None,
        now_ns: int,
        caps: Sequence[CapLimit],
    ) -> Group:
        d = r.delta
        goodput = None if interval is None else d[_ACKED] * 8 / interval
        loss = None
        if interval is not None and d[_DATA_SEGS] > 0:
            loss = min(d[_RETRANS] / d[_DATA_SEGS], 1.0)
        if r.srtt:
            srtt: float | None = sum(r.srtt) / len(r.srtt)
        else:
            srtt = r.srtt_any_sum / r.srtt_any_n if r.srtt_any_n else None
        if interval is not None and goodput:
            self._observe(g, r.streams, goodput / 1e6, d, r.srtt, now_ns)
        else:
            g.prev_streams = r.streams
        self._prune(g, now_ns)
        g.passive = self._fit(g, r.ccs)
        comms = {c for c in r.comms if c is not None}
        cgroups = {c for c in r.cgroups if c is not None}
        matching = [c for c in caps if c.matches(r.cgroups, g.key.remote_addr)]
        pacers = [c for c in matching if c.pace_bps is not None]
        pacer = min(pacers, key=lambda c: c.pace_bps or 0.0) if pacers else None
        matching = [c for c in matching if c.pace_bps is None]  # pace caps refuse nothing
        over_cap = any(
            (r.streams if c.port is None
             else sum(n for p, n in r.ports.items() if c.covers_port(p))) > c.streams
            for c in matching
        )
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
            counters=Counters(*_add(g.acc, live)),
            flows_closed=g.closed,
            passive=g.passive,
            cap=min(c.streams for c in matching) if matching else None,
            interval_s=interval,
            observed=g.observed,
            over_cap=over_cap,
            paced_bps=None if pacer is None else pacer.pace_bps,
            paced_follows=pacer is not None and pacer.follows,
        )

    def _observe(
        self, g: _GroupState, streams: int, mbps: float, d: _Vec, srtt: list[int], now: int
    ) -> None:
        """Keep the interval as an observation if the stream count held steady
        across it (an interval where streams came or went mixes two levels)."""
        stable = streams > 0 and g.prev_streams == streams
        g.prev_streams = streams
        if not stable:
            return
        level = g.history.get(streams)
        if level is None:
            level = g.history[streams] = deque(maxlen=self.samples_per_level)
        rtt = statistics.median(srtt) / 1e6 if srtt else None
        level.append(_Sample(now, mbps, d[_RETRANS], d[_DATA_SEGS], rtt))
        g.dirty = True

    def _prune(self, g: _GroupState, now: int) -> None:
        for n in list(g.history):
            level = g.history[n]
            while level and now - level[0].at_ns > self.history_ns:
                level.popleft()
                g.dirty = True
            if not level:
                del g.history[n]

    def _observations(self, g: _GroupState) -> tuple[Observation, ...]:
        out = []
        for n in sorted(g.history):
            level = g.history[n]
            if len(level) < self.min_samples:
                continue
            segs = sum(s.data_segs for s in level)
            rtts = [s.srtt_s for s in level if s.srtt_s is not None]
            out.append(Observation(
                streams=n,
                goodput_mbps=statistics.median(s.goodput_mbps for s in level),
                loss_rate=min(sum(s.retrans for s in level) / segs, 1.0) if segs else None,
                srtt_s=statistics.median(rtts) if rtts else None,
                samples=len(level),
            ))
        return tuple(out)

    def _fit(self, g: _GroupState, ccs: Tally[str]) -> PassiveFit | None:
        if not g.dirty:
            return g.passive
        g.dirty = False
        obs = g.observed = self._observations(g)
        g.passive = passive_fit(obs, self.settings, ccs) if len(obs) >= 2 else None
        return g.passive

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


def passive_fit(
    obs: Sequence[Observation], settings: Settings, ccs: Iterable[str] = ()
) -> PassiveFit | None:
    """Fit the default model (the one `advise` uses) to observations at >= 2
    stream counts, with the loss x RTT^2 estimator beside it, as a check,
    when loss and RTT were seen."""
    try:
        probes = [Probe(o.streams, o.goodput_mbps) for o in obs]
        pred = predict(fit_throughput(probes, DEFAULT_MODEL), settings)
    except ModelInputError:
        return None
    adv = pred.advice
    warnings = list(pred.warnings)
    top = max(o.streams for o in obs)
    if adv.num_flows > top:
        warnings.insert(0, (
            f"the advice of {adv.num_flows} streams extrapolates beyond the most streams "
            f"seen ({top}): the fit has no observation of congestion there"))
    lr = None
    samples = [
        LossSample(o.streams, o.loss_rate, o.srtt_s, o.goodput_mbps)
        for o in obs
        if o.loss_rate is not None and o.srtt_s is not None and o.srtt_s > 0
    ]
    if len({x.streams for x in samples}) >= 2:
        try:
            lr = predict(fit_loss_rtt(samples), settings)
        except ModelInputError:
            lr = None
    lr_adv = lr.advice if lr else None
    if lr_adv is not None and abs(lr_adv.num_flows - adv.num_flows) >= DISAGREEMENT_STREAMS:
        warnings.append(
            f"the estimators disagree: throughput fit {adv.num_flows} streams, loss x RTT^2 "
            f"fit {lr_adv.num_flows}; an assumption of the model may not hold (receiver "
            "window, non-loss-based congestion control, synchronised losses)"
        )
    other = sorted(set(ccs) - LOSS_BASED)
    if other:
        warnings.append(
            f"congestion control {','.join(other)} is not loss-based: the square-root "
            "law behind the model does not describe it"
        )
    return PassiveFit(tuple(obs), pred, lr, tuple(warnings))

"""A following cap's path capacity from its scout's ACKs.

A following cap reads its path from its scout's share (cap/scout.py), and
that reading says nothing without the path's capacity: a path that no
probe measured has none, so the cap "cannot follow its path yet"
(cap/plan.py). The scout is the one stream of the cap that the kernel
leaves unpaced (bpf/cap_pace.bpf.h). A loss-based sender's bursts leave
the bottleneck one transmission time apart, so the scout's ACKs are spaced
at the bottleneck's rate; the paced streams' ACKs are spaced at our own
pacing rate and are never logged here.

So when path memory holds no capacity for a following cap's path, the
agent (cap/follow.Follower: `export`'s, and `tamebpf run`'s) opens an ACK
window on a new scout alone (kernel/acktrain.AckWindow) as it unpaces it,
and reads the first WINDOW_S of its ACKs (why the first: WINDOW_S) with
the probes' estimator and trust rule (estimate/acktrain.py), pairs at or
above the scout's own goodput over the window, its highest trusted band
(beside other traffic the densest may be a fraction of the link's rate:
estimate/acktrain.CLIMB); an estimate near that goodput may be the scout's
share of a shared path and is not trusted
(estimate/acktrain.capacity_above_own). A trusted
capacity is stored as a passive entry (method METHOD): the capacity fit on
the one stream the scout stands for over the window (cap/scout.py), which
the agent's own readings replace once it follows. Nothing runs per packet
between windows; one window at a time per agent, on a scout's start only,
WINDOWS_PER_HOUR per path.

`tamebpf run` also reads its transfer's first seconds' ACKs (runner/acks.py)
and passes what they measured, by destination address (`measured`). When
path memory has no capacity and the scout's window gave none (or none was
needed: no window opens on a path whose capacity was measured already),
that capacity is stored the same way, with its own method
(paths/passive.MeasuredCapacity.method), the scout's reading taken from
its start to the step that stores it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from tamebpf.cap.book import FollowSpec
from tamebpf.cap.scout import ScoutReading, follow_target
from tamebpf.common.errors import TamebpfError
from tamebpf.common.logs import log
from tamebpf.common.records import AckLog, Flow
from tamebpf.common.units import mbps_over
from tamebpf.estimate.acktrain import CapacityEstimate, capacity_above_own, pair_rates
from tamebpf.groups.passive_fit import LOSS_BASED
from tamebpf.kernel.acktrain import (
    WINDOWS_PER_HOUR,
    AckLogHandle,
    AckWindow,
    OpenWindow,
    WindowsPerHour,
)
from tamebpf.model import Settings
from tamebpf.paths.entry import FitData, PathEntry, PathKey
from tamebpf.paths.passive import Measured, MeasuredCapacity
from tamebpf.paths.store import PathStore
from tamebpf.paths.valid import refusal

METHOD = "ack-spacing (scout)"
# Its first seconds unpaced: a stream paced without a loss has not left slow
# start, so once unpaced it sends bursts at line rate, which the bottleneck
# spaces at its own rate. Later its segments reach the queue at its share's
# rate, interleaved with the other traffic's, and a delayed ACK then spans
# segments that left the queue apart: beside 2 CUBIC flows a scout's first
# 2 s read the link, 5 s can read its own rate, and a window opened seconds
# after it started can read half the link, trusted.
WINDOW_S = 2.0
# A window no step read for this long belongs to a cap that stopped following.
STALE_S = 5 * WINDOW_S


@dataclass
class _Open:
    """The window open now: on which cap's scout, and the cap's streams then."""

    ident: tuple[str, str]
    scout: int
    window: AckLogHandle
    opened: float
    flows: dict[int, Flow]


class ScoutAcks:
    """Opens an ACK window on a following cap's scout as the kernel stops
    pacing it (`begin`), while its path has no capacity, and stores what a
    trusted one measured, else the capacity `measured` holds for the cap's
    destination (`step`, the follower's later steps)."""

    def __init__(self, store: PathStore, netns: str | None = None,
                 open_window: OpenWindow = AckWindow, window_s: float = WINDOW_S,
                 per_hour: int = WINDOWS_PER_HOUR,
                 measured: Measured | None = None) -> None:
        self.store, self.netns = store, netns
        self.open_window, self.window_s = open_window, window_s
        self.per_path: WindowsPerHour[PathKey] = WindowsPerHour(per_hour)
        # The capacities the transfer's own first seconds measured, read
        # as they come (run's Session.measured; export: none).
        self.measured = measured
        # Per cap, with `measured`: its newest scout and the cap's streams as
        # the scout was unpaced (a measured capacity's reading starts there).
        self.scouts: dict[tuple[str, str], tuple[int, dict[int, Flow]]] = {}
        self.now: _Open | None = None
        self.windows = 0  # opened
        self.trusted = 0  # gave a capacity
        self.broken: str | None = None  # why windows stopped (the BPF side failed)

    def begin(self, spec: FollowSpec, scout: int, flows: Mapping[int, Flow],
              now: float) -> None:
        """A new scout, `scout` among the cap's streams `flows`, is unpaced
        now (time.monotonic()) on a path with no capacity: a window opens
        on it, unless the transfer measured the capacity already, one is
        open or the path had per_hour this hour."""
        if self.measured is not None and scout in flows:
            self.scouts[spec.ident] = (scout, dict(flows))
        if (self.now is not None or self.broken is not None
                or self.measured_for(spec) is not None
                or not self.per_path.allows(spec.path, now)
                or scout not in flows or spec.path.congestion not in LOSS_BASED):
            return
        try:
            window = self.open_window([scout], self.netns, False)
        except TamebpfError as err:
            self.broken = str(err)
            log.warning("follow: no capacity from the scouts' ACKs: %s", err,
                        extra={"event": "scout_acks_error"})
            return
        self.per_path.opened(spec.path, now)
        self.windows += 1
        self.now = _Open(spec.ident, scout, window, now, dict(flows))
        log.info("follow: %s to %s: sampling its new scout's ACKs for %g s (path memory has "
                 "no capacity for %s)", spec.cgroup, spec.dest, self.window_s, spec.path.dest,
                 extra={"event": "scout_ack_window", "cookie": scout})

    def step(self, spec: FollowSpec, scout: int, flows: Mapping[int, Flow], now: float,
             needed: bool) -> PathEntry | None:
        """A later follower step of a cap whose scout is `scout` among its
        streams `flows`; `needed`: its path has no capacity in memory. Reads
        the window open on it once window_s have passed; with no window
        open on it, or one that gave none, takes the capacity measured for
        its destination: the entry stored when either gave a capacity."""
        w = self.now
        if w is not None and (now - w.opened >= STALE_S or (w.ident == spec.ident and (
                not needed or w.scout != scout or scout not in flows))):
            self.close()  # not read: the cap moved on
        elif w is not None and w.ident == spec.ident:
            if now - w.opened < self.window_s * 0.999:
                return None  # the scout's own window first
            try:
                acks = w.window.read()
            finally:
                self.close()
            first = min((t for t, _ in acks.flows.get(w.scout, [])), default=0)
            got = self._store(spec, w, acks.between(first, first + int(self.window_s * 1e9)),
                              flows)
            if got is not None:
                return got
        return self._store_measured(spec, scout, flows) if needed else None

    def measured_for(self, spec: FollowSpec) -> MeasuredCapacity | None:
        """The capacity the transfer measured for the cap's destination."""
        if self.measured is None:
            return None
        return self.measured.get((spec.host or spec.path.dest.split("/")[0], "send"))

    def spent(self, path: PathKey, now: float) -> bool:
        """Whether this path's scout was sampled (or could not be) and no
        window is open: a scout already unpaced is not sampled again."""
        return self.now is None and (self.broken is not None
                                     or self.per_path.count(path, now) > 0)

    def close(self) -> None:
        if self.now is not None:
            self.now.window.close()
            self.now = None

    def _store(self, spec: FollowSpec, w: _Open, acks: AckLog,
               flows: Mapping[int, Flow]) -> PathEntry | None:
        """The capacity the window's ACKs gave, stored (None: none trusted)."""
        reading = reading_over(w.flows, flows, w.scout)
        e = scout_capacity(acks, w.scout, flows.get(w.scout), reading)
        entry = None
        if e.trusted and e.goodput_mbps is not None and reading is not None:
            entry = capacity_entry(spec, MeasuredCapacity(e.goodput_mbps, e.low_mbps,
                                                          e.high_mbps, METHOD),
                                   reading, srtt_ms(flows[w.scout]), time.time())
        why = e.reason if entry is None else refusal(entry, time.time())
        if entry is not None and why is None:
            self.store.put(entry)
            self.trusted += 1
            log.info("follow: %s to %s: capacity %.1f Mbit/s from its scout's ACKs",
                     spec.cgroup, spec.dest, e.goodput_mbps,
                     extra={"event": "scout_capacity", "capacity_mbps": e.goodput_mbps})
            return entry
        log.info("follow: %s to %s: no capacity from its scout's ACKs: %s", spec.cgroup,
                 spec.dest, why or "the scout's share left no fit",
                 extra={"event": "scout_no_capacity"})
        return None

    def _store_measured(self, spec: FollowSpec, scout: int,
                        flows: Mapping[int, Flow]) -> PathEntry | None:
        """The capacity the transfer measured for the cap's destination,
        stored as a window's is, on the scout's reading since it was
        unpaced (None: none measured, no reading yet, or no fit: the next
        step's longer reading tries again)."""
        got, start = self.measured_for(spec), self.scouts.get(spec.ident)
        if got is None or start is None or start[0] != scout:
            return None
        reading = reading_over(start[1], flows, scout)
        entry = None if reading is None else \
            capacity_entry(spec, got, reading, srtt_ms(flows[scout]), time.time())
        why = "no reading of the scout yet" if entry is None else refusal(entry, time.time())
        if entry is None or why is not None:
            log.debug("follow: %s to %s: the measured capacity not stored yet: %s",
                      spec.cgroup, spec.dest, why)
            return None
        self.store.put(entry)
        log.info("follow: %s to %s: capacity %.1f Mbit/s (%s)", spec.cgroup, spec.dest,
                 got.mbps, got.method,
                 extra={"event": "measured_capacity", "capacity_mbps": got.mbps})
        return entry


def reading_over(before: Mapping[int, Flow], after: Mapping[int, Flow],
                 scout: int) -> ScoutReading | None:
    """The scout's goodput and the whole cap's between two readings of its
    streams (None: the scout is not in both)."""
    if scout not in before or scout not in after:
        return None
    both = [(before[c], f) for c, f in after.items() if c in before]
    seconds = (after[scout].read_monotonic_ns - before[scout].read_monotonic_ns) / 1e9
    if seconds <= 0:
        return None
    group = sum(max(b.bytes_acked - a.bytes_acked, 0) for a, b in both)
    return ScoutReading(mbps_over(after[scout].bytes_acked - before[scout].bytes_acked, seconds),
                        mbps_over(group, seconds), seconds)


def scout_capacity(acks: AckLog, scout: int, flow: Flow | None,
                   reading: ScoutReading | None) -> CapacityEstimate:
    """The estimate from the scout's ACK pairs at or above its own goodput
    (not trusted near it: on a shared path that may be the scout's share)."""
    if flow is None or reading is None:
        return CapacityEstimate(None, None, None, 0, 0, False,
                                "the scout closed during the window")
    return capacity_above_own(pair_rates(acks.only([scout]), flow.mss), reading.scout_mbps,
                              "scout's")


def srtt_ms(flow: Flow) -> float | None:
    return flow.srtt_us / 1000 if flow.srtt_us else None


def capacity_entry(spec: FollowSpec, capacity: MeasuredCapacity, reading: ScoutReading,
                   rtt_ms: float | None, when: float) -> PathEntry | None:
    """Path memory's entry for a trusted capacity: the capacity fit on the
    one stream the scout stood for over the reading (None: the paced
    streams left it too little to tell)."""
    a = follow_target(reading, capacity.mbps, Settings(max_impact=spec.max_impact))
    if a.prediction is None or a.one_stream_mbps is None:
        return None
    f, adv = a.prediction.fit, a.prediction.advice
    return PathEntry(
        spec.path, when, "passive", "none",
        FitData("capacity", ((1, a.one_stream_mbps),), f.model, f.coeffs, f.evidence_limit,
                f.capacity),
        adv.num_flows, adv.max_nondisruptive_thru, adv.cross_traffic_impact, spec.max_impact,
        capacity_mbps=capacity.mbps, capacity_low_mbps=capacity.low_mbps,
        capacity_high_mbps=capacity.high_mbps, capacity_method=capacity.method,
        competing_flows=a.competing_flows, rtt_ms=rtt_ms, host=spec.host)

"""Pace caps that follow their path (docs/paths.md, "Caps that follow the
path"): the agent's side.

For each cap in the follow book (cap/book.py), every step:
1. the cap's streams are the open flows it matches; one sending stream is
   its scout, left unpaced by the kernel (bpf/cap_pace.bpf.h), the others
   share the follow rate;
2. over the last WINDOW_S (after SETTLE_S of the scout's own start), the
   scout's goodput and the whole cap's give the path's reading
   (cap/scout.py) and, with the capacity path memory holds, the target
   `advise` would give now at the cap's limit;
3. the paced streams get the target less what the scout takes, so the
   cap's streams together stay on the target; a target that moved by more
   than the reading's own noise allows (the path's spread: `decide`) is a
   change: logged, kept in the book (cap list, watch, metrics) and stored in
   path memory as a passive entry, whose pool of scout windows restarts
   there (paths/pool.py).

`decide` is pure; `Follower` reads the kernel and writes.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from tamebpf.cap.book import FollowBook, FollowChange, FollowSpec, normal_cgroup
from tamebpf.cap.scout import FollowAnswer, ScoutReading, follow_target, target_range
from tamebpf.cap.scoutacks import ScoutAcks
from tamebpf.cap.sitecaps import SiteCaps
from tamebpf.cap.spec import parse_dest
from tamebpf.cap.table import Add
from tamebpf.common.logs import log
from tamebpf.common.records import Cap, Flow
from tamebpf.common.units import mbps, mbps_over, pace_bytes_per_s
from tamebpf.estimate.spread import over_window
from tamebpf.groups.caps import CapLimit
from tamebpf.model import (
    ModelInputError,
    Probe,
    Settings,
    competing_flows,
    fit_capacity,
    predict,
)
from tamebpf.paths.entry import FitData, PathEntry
from tamebpf.paths.pool import (
    MIN_WINDOW_S,
    by_count,
    class_spread,
    fit_points,
    points,
    pool_of,
    pooled,
    reading_spread,
    window,
)
from tamebpf.paths.store import PathStore
from tamebpf.paths.valid import refusal

# The scout's share over this long: CUBIC's sawtooth on a 100 ms path is a
# few seconds a cycle; the settled probes of advise took 10-30 s.
WINDOW_S = 20.0
# A new scout starts in slow start, unpaced: its first seconds are not its share.
SETTLE_S = 5.0
# After a decrease the readings start this long after it: what the window
# saw before it is what the decrease answered, and must not raise the
# target again. An increase keeps the window sliding (the reading and the
# paced rate it used come from the same samples, so mixing targets only
# lags; a restart would make every step of a rise wait a whole window, and
# a scout's share rises over tens of seconds after cross traffic leaves:
# docs/cap.md, "Caps that follow the path, measured").
AFTER_CHANGE_S = 2.0
# Decrease fast, increase slow: the last SHORT_S alone may lower the target
# when it reads at least FAST_DROP below the one in force and the one in
# force lies above every target the short reading's noise allows (more
# cross traffic came: every second at the old target is over the limit);
# raising it takes a whole WINDOW_S. The sawtooth moves a short window's
# share by about 30% on the testbed's crowded paths: the noise is the
# path's spread over the short window (estimate/spread.over_window), and
# FAST_DROP the floor where the spread is not known.
SHORT_S = 8.0
FAST_DROP = 0.15
# A target at least this far (relative) from the one in force, and outside
# the targets the reading's noise allows, is a change; nearer is noise.
MIN_CHANGE = 0.05
# The paced streams keep at least this share of the target, whatever the
# scout takes (a scout above the target means the reading is off, not that
# the other streams should stop).
MIN_PACED = 0.1
# A flow sends when it got this many bytes acked since the last step
# (SAMPLE_EVERY_S apart: export's step).
SENDING_BYTES = 64 * 1024
SAMPLE_EVERY_S = 2.0
# The book is rewritten (fsync'd) on a change of target or note, else at
# most this often: often enough for `cap list`'s "last read" (stale after 60 s).
BOOK_EVERY_S = 20.0


class FollowKernel(Protocol):
    """What the follower needs of the kernel's cap table (kernel/cap.CapTable)."""

    def set_follow(self, cap_id: int, scout_cookie: int, rate_bytes_per_s: int) -> None: ...

    def clear_follow(self, cap_id: int) -> None: ...

    def commit(self, changes: Sequence[Add | Cap]) -> list[Cap]: ...


# (monotonic time, bytes acked per stream cookie)
Sample = tuple[float, dict[int, int]]


@dataclass
class Track:
    """The agent's memory of one following cap between steps."""

    scout: int | None = None
    since: float = 0.0  # monotonic: when the scout was chosen
    changed_at: float = -1e18  # monotonic: the last decrease of target
    cap_id: int | None = None  # the pace cap the scout was set on
    target_mbps: float | None = None  # the group's target in force
    samples: deque[Sample] = field(default_factory=deque)

    def record(self, now: float, flows: dict[int, Flow], window_s: float) -> None:
        """One sample of bytes acked per stream; what no window can reach
        any more is dropped."""
        self.samples.append((now, {c: f.bytes_acked for c, f in flows.items()}))
        while self.samples and self.samples[0][0] < now - 2 * window_s - SETTLE_S:
            self.samples.popleft()

    def span(self, start: float, need_s: float) -> tuple[Sample, Sample, float] | None:
        """The first sample at or after start, the newest one and the
        seconds between them (None: less than need_s)."""
        first = next(((t, s) for t, s in self.samples if t >= start - 1e-9), None)
        last = self.samples[-1] if self.samples else None
        if first is None or last is None or last[0] - first[0] < need_s:
            return None
        return first, last, last[0] - first[0]


@dataclass(frozen=True)
class Decision:
    reading: ScoutReading | None = None
    answer: FollowAnswer | None = None
    paced_mbps: float | None = None  # what the paced streams get together
    change: FollowChange | None = None
    note: str | None = None


def members(cap: Cap, limit: CapLimit, flows: Sequence[Flow]) -> dict[int, Flow]:
    return {f.cookie: f for f in flows if not f.closed and limit.matches([f.cgroup], f.remote_addr)
            and limit.covers_port(f.remote_port)}


def reading_of(track: Track, now: float, window_s: float) -> ScoutReading | None:
    """Goodputs over the last window_s, from the samples taken after the
    scout settled (None: not that long yet)."""
    start = max(now - window_s, track.since + SETTLE_S, track.changed_at + AFTER_CHANGE_S)
    if track.scout is None or now - start < window_s * 0.999:
        return None
    span = track.span(start, window_s * 0.5)
    if span is None:
        return None
    first, last, seconds = span
    acked = {c: b - first[1].get(c, 0) for c, b in last[1].items()}
    if track.scout not in last[1] or track.scout not in first[1]:
        return None
    group = mbps_over(sum(max(v, 0) for v in acked.values()), seconds)
    scout = mbps_over(max(acked[track.scout], 0), seconds)
    return ScoutReading(scout, group, seconds)


def noise(reading: ScoutReading, capacity_mbps: float, settings: Settings,
          spread: float | None) -> tuple[float, float] | None:
    """The targets `reading` cannot tell apart, its goodput moved by the
    path's spread over its window (None: the spread is not known)."""
    if spread is None:
        return None
    return target_range(reading, capacity_mbps, settings,
                        over_window(spread, reading.window_s))


def decide(spec: FollowSpec, reading: ScoutReading | None, capacity_mbps: float | None,
           current_mbps: float, now_wall: float, short: ScoutReading | None = None,
           spread: float | None = None) -> Decision:
    """The target from the window's reading, or from the short one when it
    reads lower beyond its noise (decrease fast, increase slow). `spread`:
    how far one reading on the path may lie from another for noise alone
    (paths/pool.reading_spread); None: only the fixed MIN_CHANGE and
    FAST_DROP tell a change from noise."""
    settings = Settings(max_impact=spec.max_impact)
    if capacity_mbps is None:
        return Decision(reading, note=f"path memory has no capacity for {spec.path.dest} "
                        "(a new scout's first ACKs measure one when they can; else run "
                        "'tamebpf advise' to that host, or cap set --auto again)")
    if short is not None and current_mbps > 0:
        fast = follow_target(short, capacity_mbps, settings)
        band = noise(short, capacity_mbps, settings, spread)
        if fast.target_mbps is not None and fast.target_mbps < current_mbps * (1 - FAST_DROP) \
                and (band is None or current_mbps > band[1]):
            long = None if reading is None else follow_target(reading, capacity_mbps, settings)
            if long is None or long.target_mbps is None or fast.target_mbps < long.target_mbps:
                reading = short
    if reading is None:
        return Decision(note="waiting for the scout's first window")
    answer = follow_target(reading, capacity_mbps, settings)
    if answer.target_mbps is None:
        return Decision(reading, answer, note=answer.why_not)
    target = answer.target_mbps
    paced = max(target - reading.scout_mbps, MIN_PACED * target)
    band = noise(reading, capacity_mbps, settings, spread)
    change = None
    if current_mbps <= 0 or (abs(target / current_mbps - 1) > MIN_CHANGE and (
            band is None or not band[0] <= current_mbps <= band[1])):
        m = answer.competing_flows
        others = reading.group_mbps - reading.scout_mbps
        change = FollowChange(
            now_wall, current_mbps or None, target, m,
            f"the scout got {reading.scout_mbps:.2f} Mbit/s beside {others:.2f} "
            f"paced over {reading.window_s:.0f} s: about "
            + (f"{m:.1f} competing flows" if m is not None else "the competing flows unknown")
            + f" on {capacity_mbps:.1f} Mbit/s")
    return Decision(reading, answer, paced, change)


def entry_of(spec: FollowSpec, d: Decision, known: PathEntry, when: float) -> PathEntry | None:
    """What path memory keeps of a follow reading: a passive entry, the
    one stream the scout stands for pooled with the readings before it
    (paths/pool.py; a change of target restarts the pool: the path moved),
    and the fit on the pool's points."""
    a, r = d.answer, d.reading
    if a is None or a.one_stream_mbps is None or r is None:
        return None
    pool = pooled(() if d.change is not None else pool_of(known),
                  [window(1, a.one_stream_mbps, r.window_s)] if r.window_s >= MIN_WINDOW_S
                  else [])
    counts = by_count(pool, {1: a.one_stream_mbps})
    ps = points(counts)
    try:
        pred = fit_points(ps, known.capacity_mbps, Settings(max_impact=spec.max_impact))
    except (ModelInputError, ValueError):
        return None
    f, adv = pred.fit, pred.advice
    return PathEntry(
        key=spec.path, when=when, source="passive", probe_kind="none",
        fit=FitData("throughput" if len(ps) >= 2 else "capacity",
                    tuple((p.streams, p.throughput) for p in ps), f.model, f.coeffs,
                    f.evidence_limit, f.capacity),
        advised_streams=adv.num_flows, advised_mbps=adv.max_nondisruptive_thru,
        advised_impact=adv.cross_traffic_impact, max_impact=spec.max_impact,
        capacity_mbps=known.capacity_mbps, capacity_low_mbps=known.capacity_low_mbps,
        capacity_high_mbps=known.capacity_high_mbps, capacity_method=known.capacity_method,
        link_mbps=known.link_mbps, competing_flows=competing_flows(f), rtt_ms=known.rtt_ms,
        host=spec.host, spread=class_spread(known.rtt_ms), windows=pool)


class Follower:
    """Runs the follow caps of one agent (export's loop calls step)."""

    def __init__(self, book: FollowBook, store: PathStore, kernel: FollowKernel,
                 window_s: float = WINDOW_S, store_every_s: float = 60.0,
                 scout_acks: ScoutAcks | None = None, node: str | None = None) -> None:
        self.book, self.store, self.kernel = book, store, kernel
        # Caps that follow a site's share (cap/sitecaps.py); `node`: the
        # agent's own name there, for a cap set without --node.
        self.sites = SiteCaps(book, store, kernel, node)
        # The capacity of a path memory has none for, from the scout's ACKs.
        self.scout_acks = scout_acks
        self.window_s = window_s
        self.store_every_s = store_every_s
        self.tracks: dict[tuple[str, str], Track] = {}
        self._stored: dict[tuple[str, str], float] = {}
        self.changes = 0

    def step(self, flows: Sequence[Flow], caps: Sequence[Cap], now: float | None = None,
             now_wall: float | None = None, specs: Sequence[FollowSpec] | None = None) -> None:
        """One reading of every following cap; `specs`: the follow book as
        the caller just read it (read here when not given)."""
        from tamebpf.cap.view import limit_of

        now = time.monotonic() if now is None else now
        now_wall = time.time() if now_wall is None else now_wall
        by_ident = {(normal_cgroup(c.cgroup), c.dest): c for c in caps}
        specs = self.book.specs() if specs is None else specs
        for gone in set(self.tracks) - {s.ident for s in specs}:
            del self.tracks[gone]
        self.sites.forget({s.ident for s in specs if s.site is not None})
        for spec in specs:
            cap = by_ident.get(spec.ident)
            limit = limit_of(cap) if cap is not None else None
            if cap is None or limit is None:
                self.tracks.pop(spec.ident, None)
                continue
            if cap.mode == "pace" and spec.site is not None:
                self.sites.step(spec, cap, now_wall)
            elif cap.mode == "pace":
                self._follow(spec, cap, members(cap, limit, flows), now, now_wall)
            else:
                self._follow_refuse(spec, cap, members(cap, limit, flows), now, now_wall)

    def close(self) -> None:
        """The agent stops: no scout any more, every stream of a following
        cap shares the target in force (the cap holds it until an agent
        runs again)."""
        if self.scout_acks is not None:
            self.scout_acks.close()
        for track in self.tracks.values():
            if track.scout is not None and track.cap_id is not None \
                    and track.target_mbps is not None:
                try:
                    self.kernel.set_follow(track.cap_id, 0, pace_bytes_per_s(track.target_mbps))
                except Exception as err:  # noqa: BLE001 - the others still get theirs
                    log.warning("following caps: cap %d keeps its scout: %s", track.cap_id,
                                err)
        self.tracks.clear()

    def _follow_refuse(self, spec: FollowSpec, cap: Cap, flows: dict[int, Flow], now: float,
                       now_wall: float) -> None:
        """A refuse cap: its streams are unpaced, so their goodput at their
        count is a probe point; with the capacity, the capacity fit on it
        gives N. A new N is a new cap (tb_cap_commit), which counts the
        streams already open: it applies to new connects only."""
        track = self.tracks.setdefault(spec.ident, Track(since=now))
        track.record(now, flows, self.window_s)
        span = track.span(max(now - self.window_s, track.changed_at + SETTLE_S, track.since),
                          self.window_s * 0.999)
        if span is None:
            return
        first, last, seconds = span
        sent = {c: b - first[1][c] for c, b in last[1].items() if c in first[1]}
        streams = sum(1 for v in sent.values() if v >= SENDING_BYTES * seconds / SAMPLE_EVERY_S)
        known = self.store.newest(spec.path, with_capacity=True)
        note = None
        if known is None or known.capacity_mbps is None:
            note = f"path memory has no capacity for {spec.path.dest}"
        elif streams == 0:
            note = "no stream of the cap sent over the window"
        if note is not None:
            self.book.update(spec.ident, lambda s: replace(s, updated=now_wall, note=note))
            return
        assert known is not None and known.capacity_mbps is not None
        goodput = mbps_over(sum(max(v, 0) for v in sent.values()), seconds)
        try:
            pred = predict(fit_capacity([Probe(streams, goodput)], known.capacity_mbps),
                           Settings(max_impact=spec.max_impact))
        except ModelInputError as err:
            why = str(err)
            self.book.update(spec.ident, lambda s: replace(s, updated=now_wall, note=why))
            return
        adv = pred.advice
        n = adv.num_flows
        m = competing_flows(pred.fit)
        change = None
        if abs(n - cap.max_streams) >= max(1, round(0.1 * cap.max_streams)):
            self.kernel.commit([cap, Add(cap.cgroup, parse_dest(cap.dest), n, None, False)])
            track.changed_at = now
            change = FollowChange(
                now_wall, spec.target_mbps, adv.max_nondisruptive_thru, m,
                f"{streams} streams got {goodput:.2f} Mbit/s over {seconds:.0f} s of "
                f"{known.capacity_mbps:.1f}: about {m or 0:.1f} competing flows; "
                f"N {cap.max_streams} -> {n} (new connects)")
            self.changes += 1
            log.info("follow: %s to %s: %s", spec.cgroup, spec.dest, change.why,
                     extra={"event": "follow_change", "streams": n})

        def write(s: FollowSpec) -> FollowSpec:
            s = replace(s, updated=now_wall, note=None, competing_flows=m,
                        target_mbps=s.target_mbps or adv.max_nondisruptive_thru)
            return s.changed(change) if change is not None else s
        self.book.update(spec.ident, write)

    def _follow(self, spec: FollowSpec, cap: Cap, flows: dict[int, Flow], now: float,
                now_wall: float) -> None:
        track = self.tracks.setdefault(spec.ident, Track())
        prev = track.samples[-1][1] if track.samples else {}
        track.record(now, flows, self.window_s)
        current = spec.target_mbps or mbps(cap.rate_bytes_per_s)
        if track.scout not in flows:
            sending = [f for c, f in flows.items()
                       if f.bytes_acked - prev.get(c, f.bytes_acked) >= SENDING_BYTES]
            if len(sending) < 2:
                track.scout = None
                return  # one stream or none: nothing to scout beside
            scout = min(sending, key=lambda f: (-(f.age_s or 0.0), f.cookie))
            track.scout, track.since = scout.cookie, now
            track.cap_id, track.target_mbps = cap.id, current
            # Until the first reading, the scout's fair part comes off the target.
            paced = current * (len(sending) - 1) / len(sending)
            self.kernel.set_follow(cap.id, scout.cookie, pace_bytes_per_s(paced))
            if self.scout_acks is not None and \
                    self.store.newest(spec.path, with_capacity=True) is None:
                self.scout_acks.begin(spec, scout.cookie, flows, now)
            self.book.update(spec.ident, lambda s: replace(s, scout_cookie=scout.cookie,
                                                           updated=now_wall))
            log.info("follow: %s to %s: scout is stream %d", spec.cgroup, spec.dest,
                     scout.cookie, extra={"event": "follow_scout", "cookie": scout.cookie})
            return
        known = self.store.newest(spec.path, with_capacity=True)
        if self.scout_acks is not None:
            known = self.scout_acks.step(spec, track.scout, flows, now, known is None) or known
        d = decide(spec, reading_of(track, now, self.window_s),
                   None if known is None else known.capacity_mbps, current, now_wall,
                   reading_of(track, now, min(SHORT_S, self.window_s)),
                   None if known is None else reading_spread(known))
        if d.paced_mbps is not None:
            self.kernel.set_follow(cap.id, track.scout, pace_bytes_per_s(d.paced_mbps))
            track.cap_id = cap.id
            track.target_mbps = d.change.to_mbps if d.change is not None else current
        change = d.change
        m = d.answer.competing_flows if d.answer is not None else None

        def write(s: FollowSpec) -> FollowSpec:
            s = replace(s, updated=now_wall, note=d.note,
                        competing_flows=m if m is not None else s.competing_flows)
            if s.target_mbps is None and d.paced_mbps is not None:
                s = replace(s, target_mbps=current)  # the first reading confirms it
            return s.changed(change) if change is not None else s
        if change is not None or d.note != spec.note or spec.updated is None \
                or (spec.target_mbps is None and d.paced_mbps is not None) \
                or now_wall - spec.updated >= BOOK_EVERY_S:
            self.book.update(spec.ident, write)
        if change is not None:
            self.changes += 1
            if change.from_mbps is not None and change.to_mbps < change.from_mbps:
                track.changed_at = now
            log.info("follow: %s to %s: target %s -> %.2f Mbit/s (%s)", spec.cgroup, spec.dest,
                     "-" if change.from_mbps is None else f"{change.from_mbps:.2f}",
                     change.to_mbps, change.why,
                     extra={"event": "follow_change", "to_mbps": change.to_mbps})
        due = now - self._stored.get(spec.ident, -1e18) >= self.store_every_s
        if known is not None and (change is not None or due):
            entry = entry_of(spec, d, known, now_wall)
            bad = None if entry is None else refusal(entry, now_wall)
            if bad is not None:
                log.debug("follow: not stored for %s: its entry's %s", spec.dest, bad)
            elif entry is not None:
                self.store.put(entry)
                self._stored[spec.ident] = now

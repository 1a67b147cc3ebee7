"""Learning paths from real transfers (docs/paths.md, "Learned from
transfers"): what a group (owner, destination) did at a steady stream count
is a point, as a probe would be, and no probe traffic is sent.

- Two stream counts or more: the group's passive fit (groups.passive_fit,
  the model `advise` uses) becomes a 'passive' entry.
- One count, with the path's capacity known from an earlier entry or
  measured on the transfer's own ACKs (`tamebpf run`: runner/acks.py): the
  capacity fit (model/capacity.fit_capacity) on that one point gives the
  competing flows, and so a curve.
- What a group shows is pooled with what transfers before it showed on
  the path (paths/pool.py): its samples become settled windows (at least
  MIN_WINDOW_S each, every sample once), the entry takes over the pool of
  the newest one and adds them, its points are the pool's medians, and its
  range is made as a probe's is, with the class spread (estimate/spread.py
  says why).
- A settled point outside the newest entry's interval (its predicted
  goodput at that count, times or over 1 + the spread one reading may show
  around it, pool.change_tolerance) marks the path changed: the
  next `advise` probes again (DualPats' re-probe rule), and nothing more is
  learned for the path until it has; the next pool starts empty.

`learn` is pure; `PathLearner` applies it to a store, at most once per
path per STORE_EVERY_S unless the points changed (PathLearner._due).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from tamebpf.common.logs import log
from tamebpf.groups.group import Group, GroupKey
from tamebpf.groups.passive_fit import LOSS_BASED, Observation
from tamebpf.model import ModelInputError, Settings, competing_flows
from tamebpf.paths.entry import REMOTE_CC, FitData, PathEntry, PathKey, Window
from tamebpf.paths.pool import (
    by_count,
    change_tolerance,
    class_spread,
    fit_points,
    fresh_windows,
    points,
    pool_of,
    pooled,
)
from tamebpf.paths.recall import expected_mbps
from tamebpf.paths.store import PathStore
from tamebpf.paths.valid import refusal

STORE_EVERY_S = 60.0
# advise's probes run in cgroups named so (kernel/probe.py): their start-up
# is no transfer's goodput, and their advice is stored by advise itself.
PROBE_CGROUP = "tamebpf-probe-"
# A paced group whose goodput stayed under this share of its cap's target
# was not held back by the cap: its goodput is the path's (a `tamebpf run`
# started at a rate above what the path gives).
UNBOUND_SHARE = 0.8


@dataclass(frozen=True)
class MeasuredCapacity:
    """The bottleneck's capacity (TCP goodput, Mbit/s) that a transfer's own
    ACK spacing gave (a trusted estimate: estimate/acktrain.py); a
    download's, its data segments' spacing (method RECEIVED_METHOD)."""

    mbps: float
    low_mbps: float | None
    high_mbps: float | None
    method: str = "ack-spacing (transfer)"


RECEIVED_METHOD = "data-spacing (transfer)"


# The capacities transfers measured, by (destination address, direction):
# a path can be faster one way than the other.
Measured = Mapping[tuple[str, str], MeasuredCapacity]


@dataclass(frozen=True)
class Learned:
    """What one group taught about its path: a new entry, a changed mark
    (with why), or neither."""

    key: PathKey
    entry: PathEntry | None = None
    changed: str | None = None


class Capacity(NamedTuple):
    """The capacity a new entry rests on, from an entry or measured."""

    mbps: float
    low_mbps: float | None
    high_mbps: float | None
    method: str | None
    link_mbps: float | None


# A transfer writes its path's entry at least every STORE_EVERY_S while it
# teaches: entries further apart than this came from different transfers.
TRANSFER_GAP_S = 2 * STORE_EVERY_S


def transfers(times: Sequence[float]) -> tuple[int, float]:
    """(how many transfers, over how many seconds) stored the passive
    entries made at `times` (oldest first): runs of entries no more than
    TRANSFER_GAP_S apart count as one transfer (two back to back count as
    one)."""
    if not times:
        return 0, 0.0
    n = 1 + sum(1 for a, b in zip(times, times[1:], strict=False) if b - a > TRANSFER_GAP_S)
    return n, times[-1] - times[0]


def group_key(group: Group, netns: str) -> PathKey | None:
    """The path a group's transfers ran on (None: mixed congestion controls
    or an address that is not one). A receiving group's path is kept under
    REMOTE_CC: its senders' congestion control is not known here."""
    try:
        dest = str(ipaddress.ip_network(group.remote_addr))
    except ValueError:
        return None
    if group.direction == "receive":
        return PathKey(dest, netns, REMOTE_CC, "receive")
    cc = group.congestion_control
    if not cc or "," in cc:
        return None
    return PathKey(dest, netns, cc)


def outside(known: PathEntry, obs: Observation, settings: Settings) -> str | None:
    """Why this point lies outside the entry's interval (None: inside)."""
    try:
        expected = expected_mbps(known, obs.streams, Settings(max_impact=settings.max_impact))
    except (ModelInputError, ValueError):
        return None
    ratio = obs.goodput_mbps / expected
    off = ratio - 1.0
    tolerance = 1.0 + change_tolerance(known)
    if not 1.0 / tolerance <= ratio <= tolerance:
        return (f"a transfer at {obs.streams} streams got {obs.goodput_mbps:.2f} Mbit/s, "
                f"{off:+.0%} from the {expected:.2f} the entry predicts")
    return None


def held_by_its_cap(group: Group, known: PathEntry | None,
                    measured: MeasuredCapacity | None) -> bool:
    """Whether a pace cap held the group, so that its goodput says what we
    chose rather than what the path gives: the target is under the path's
    capacity (the entry's, else the one its ACKs gave), and either the
    goodput reached UNBOUND_SHARE of it or it is no higher than the entry
    expects at the group's count (within the entry's change tolerance).

    A target at or above the capacity holds nothing: the group cannot get
    more than the path carries, and each stream's pace, target / n, is
    above what it gets beside any other flow. `tamebpf run` starts at 100
    Mbit/s: on a path of 96, 8 streams can get 83, over 0.8 of the target,
    yet unheld.

    A target no higher than the entry's expectation makes any goodput under
    that expectation the cap's doing as much as the path's: each stream
    gets the lesser of its pace and its share, so beside crowded cross
    traffic a paced group falls short of its target (and a goodput over the
    expectation cannot happen). A following cap sets its target from the
    entry (cap/follow.py), so its group is held so; its scout, unpaced,
    reads the path instead."""
    if group.paced_bps is None:
        return False
    capacity = known.capacity_mbps if known is not None and known.capacity_mbps else \
        measured.mbps if measured is not None else None
    if capacity is not None and group.paced_bps >= capacity * 1e6:
        return False
    return any(o.goodput_mbps * 1e6 >= UNBOUND_SHARE * group.paced_bps
               or _at_most_expected(known, o, group.paced_bps) for o in group.observed)


def _at_most_expected(known: PathEntry | None, obs: Observation, paced_bps: float) -> bool:
    """Whether a pace target is within what `known` expects at the
    observation's count, times 1 + its change tolerance (the top of the
    interval outside() tests)."""
    if known is None:
        return False
    try:
        expected = expected_mbps(known, obs.streams, Settings())
    except (ModelInputError, ValueError):
        return False
    return paced_bps <= expected * 1e6 * (1.0 + change_tolerance(known))


def learn(group: Group, netns: str, now: float, settings: Settings,
          known: PathEntry | None, measured: MeasuredCapacity | None = None,
          fresh: Sequence[Window] = (), relearn: bool = False) -> Learned | None:
    """What the group teaches; `measured`: the capacity its own ACKs gave,
    used when no entry holds one (one stream count then makes a curve);
    `fresh`: the settled windows its samples make that no entry pooled yet
    (pool.fresh_windows); `relearn`: a path marked changed is learned anew
    (one no probe ever answered: PathLearner)."""
    key = group_key(group, netns)
    obs = group.observed
    if key is None or not obs or PROBE_CGROUP in (group.cgroup or ""):
        return None
    if known is not None and known.changed and relearn:
        # No probe will come for a path only transfers taught (no server
        # answered there): what transfers show from now on is its new
        # entry, a fresh pool on the marked entry's capacity (a change of
        # the cross traffic, not of the link, is what marks most paths).
        if measured is None and known.capacity_mbps is not None:
            measured = MeasuredCapacity(known.capacity_mbps, known.capacity_low_mbps,
                                        known.capacity_high_mbps,
                                        known.capacity_method or MeasuredCapacity.method)
        known = None
    if held_by_its_cap(group, known, measured):
        # A pace cap holds the group to its target: its goodput is what we
        # chose, not what the path gives (a following cap reads the path
        # from its scout instead: cap/follow.py).
        return Learned(key)
    if known is not None and known.changed:
        # Marked changed: the next advise probes; until then a fit that
        # mixes points from before the change is no answer.
        return Learned(key)
    if known is not None:
        for o in obs:
            why = outside(known, o, settings)
            if why is not None:
                return Learned(key, changed=why)
    if key.congestion not in LOSS_BASED and key.congestion != REMOTE_CC:
        # The loss law's fits do not describe BBR. A download's senders
        # are taken to be loss-based: what they run is not known here.
        return Learned(key)
    rtts = [o.srtt_s for o in obs if o.srtt_s is not None]
    rtt_ms = min(rtts) * 1000 if rtts else None
    pool = pooled(pool_of(known), fresh)
    # A count the pool has no window for yet: what the transfer shows so far.
    counts = by_count(pool, {o.streams: o.goodput_mbps for o in obs})
    ps = points(counts)
    capacity: Capacity | None = None
    if len(ps) < 2:
        if known is not None and known.capacity_mbps is not None:
            capacity = Capacity(known.capacity_mbps, known.capacity_low_mbps,
                                known.capacity_high_mbps, known.capacity_method,
                                known.link_mbps)
        elif measured is not None:
            capacity = Capacity(measured.mbps, measured.low_mbps, measured.high_mbps,
                                measured.method, None)
        else:
            return Learned(key)
    try:
        pred = fit_points(ps, None if capacity is None else capacity.mbps, settings)
    except ModelInputError:
        return Learned(key)
    f, a = pred.fit, pred.advice
    fit = FitData("throughput" if capacity is None else "capacity",
                  tuple((p.streams, p.throughput) for p in ps), f.model, f.coeffs,
                  f.evidence_limit, f.capacity)
    entry = PathEntry(
        key=key, when=now, source="passive", probe_kind="none", rtt_ms=rtt_ms,
        host=group.remote_addr, spread=class_spread(rtt_ms), windows=pool,
        fit=fit, advised_streams=a.num_flows,
        advised_mbps=a.max_nondisruptive_thru, advised_impact=a.cross_traffic_impact,
        max_impact=settings.max_impact,
        capacity_mbps=None if capacity is None else capacity.mbps,
        capacity_low_mbps=None if capacity is None else capacity.low_mbps,
        capacity_high_mbps=None if capacity is None else capacity.high_mbps,
        capacity_method=None if capacity is None else capacity.method,
        link_mbps=None if capacity is None else capacity.link_mbps,
        competing_flows=competing_flows(pred.fit) if capacity is not None else None)
    return Learned(key, entry=entry)


class PathLearner:
    """Feeds one reader's groups into path memory (export's agent loop)."""

    def __init__(self, store: PathStore, netns: str, settings: Settings,
                 store_every_s: float = STORE_EVERY_S) -> None:
        self.store, self.netns, self.settings = store, netns, settings
        self.store_every_s = store_every_s
        # Per path: when its last passive entry was stored, and from which points.
        self._stored: dict[PathKey, tuple[float, tuple[tuple[int, int], ...]]] = {}
        # Per group, by stream count: its samples taken when a stored entry
        # last pooled them (each sample joins the pool once).
        self._pooled: dict[GroupKey, dict[int, int]] = {}
        self.entries = 0
        self.changed = 0
        # Why this learner marked each path changed (the run's summary says it).
        self.why_changed: dict[PathKey, str] = {}

    def newest(self, groups: Sequence[Group]) -> dict[PathKey, PathEntry]:
        """Path memory's newest entry of each path, in one read (none read
        when no group has a steady stream count: nothing would use them)."""
        if not any(g.observed for g in groups):
            return {}
        return {e.key: e for e in self.store.latest()}

    def observe(self, groups: list[Group], now: float,
                measured: Measured | None = None,
                newest: Mapping[PathKey, PathEntry] | None = None) -> None:
        """`measured`: capacities the transfers' own ACKs gave;
        `newest`: self.newest(groups) when the caller read it for this
        reading already (export's sampler uses the same read)."""
        seen = [g for g in groups if g.observed]
        for gone in set(self._pooled) - {g.key for g in seen}:
            del self._pooled[gone]  # its aggregator's samples went with it
        if not seen:
            return
        if newest is None:
            newest = self.newest(seen)  # one read per reading
        for g in seen:
            key = group_key(g, self.netns)
            if key is None:
                continue
            known = newest.get(key)
            fresh = fresh_windows(g.observed, g.interval_s, self._pooled.get(g.key, {}))
            relearn = known is not None and known.changed and not self.store.probed(key)
            got = learn(g, self.netns, now, self.settings, known,
                        (measured or {}).get((g.remote_addr, g.direction)),
                        [w for w, _ in fresh.values()], relearn)
            if got is None:
                continue
            if got.changed is not None:
                marked = self.store.mark_changed(key)
                self.changed += marked
                if marked:
                    self.why_changed[key] = got.changed
                    self._stored.pop(key, None)  # a new entry is due at once
                    log.info("path memory: %s (%s) marked changed: %s", key.dest,
                             key.congestion, got.changed,
                             extra={"event": "path_changed", "dest": key.dest})
                continue
            if got.entry is None:
                continue
            bad = refusal(got.entry, now)
            if bad is not None:
                # What transfers taught goes through the check what is read
                # back goes through: an absurd point is not stored.
                log.debug("not stored for %s: its entry's %s", key, bad)
                continue
            held = tuple((o.streams, o.samples) for o in g.observed)
            if not self._due(key, held, now):
                continue
            self.store.put(got.entry)
            self._stored[key] = (now, held)
            self._pooled.setdefault(g.key, {}).update({n: t for n, (_, t) in fresh.items()})
            self.entries += 1

    def _due(self, key: PathKey, points: tuple[tuple[int, int], ...], now: float) -> bool:
        """Store again when the stream counts changed, when some count has
        twice the samples it had (its median is firmer), or after
        store_every_s: a long transfer writes a few rows, not one a reading."""
        last = self._stored.get(key)
        if last is None or now - last[0] >= self.store_every_s:
            return True
        before = dict(last[1])
        if set(before) != {n for n, _ in points}:
            return True
        return any(k >= 2 * before[n] for n, k in points)

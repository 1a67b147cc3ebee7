"""export's path capacity from the transfers' own ACKs.

Path memory makes a curve from one steady stream count only with the
path's capacity (paths/passive.learn), and a path no probe ever measured
has none. So when a group that learn could use is loss-based and its
path's newest entry holds no capacity, export samples one: it marks that
group's established connections and logs their ACKs for WINDOW_S
(kernel/acktrain.AckWindow), then detaches the log and drops the marks.
The probes' ACK-spacing estimator with its trust rule
(estimate/acktrain.py) decides whether the window gave a capacity; a
trusted one goes to learn as `measured`, as `tamebpf run`'s first seconds
do (runner/acks.py).

A steady window mostly reads the connections' own rate: on the testbed,
ten windows on an unshared 20 Mbit/s path gave its 19.1 Mbit/s, and one on
a 40 Mbit/s path shared with 2 CUBIC flows gave 19.2, the 2-stream
transfer's share (its delayed ACKs each cover segments that left the
queue apart, interleaved with the cross traffic's). The two cannot be told
apart, so an estimate under SHARE_MARGIN times the connections' own
goodput is not trusted (estimate/acktrain.capacity_above_own), nor one far
above what they got through (estimate/reach.py); and export
samples only when asked (--ack-sampling): the windows that pass these
checks are not yet shown to read the link often enough to sample by
default.

A loss-based sender's bursts (after a loss, while its window grows) leave
the bottleneck one transmission time apart. Paced streams do not: a pace
cap or BBR spaces them at the pacing rate, so such groups are never
sampled, nor advise's probe cgroups or `tamebpf run`'s (run samples its
own). Nothing runs per packet between windows: the ACK hook is attached
only while one is open. At most one window at a time (one thread opens
them), and at most WINDOWS_PER_HOUR per path.

A group that downloads is sampled by its data segments' arrivals, as
advise --reverse reads a download's capacity; its senders are taken to be
loss-based, as path memory takes them (paths/passive.learn).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from tamebpf.common.errors import TamebpfError
from tamebpf.common.logs import log
from tamebpf.common.records import AckLog, Flow
from tamebpf.common.units import mbps_over
from tamebpf.estimate.acktrain import CapacityEstimate, capacity_above_own, pair_rates
from tamebpf.estimate.advice import received_words
from tamebpf.estimate.reach import peak_acked_mbps, reach_refused
from tamebpf.groups.group import Group, GroupKey
from tamebpf.groups.passive_fit import LOSS_BASED
from tamebpf.kernel.acktrain import HOUR_S, WINDOWS_PER_HOUR, AckWindow, OpenWindow, WindowsPerHour
from tamebpf.kernel.run_cgroups import PREFIX as RUN_CGROUP
from tamebpf.paths.entry import REMOTE_CC, PathEntry, PathKey
from tamebpf.paths.passive import PROBE_CGROUP, RECEIVED_METHOD, MeasuredCapacity, group_key

WINDOW_S = 5.0  # about 4,000 ACKs at 20 Mbit/s: enough pairs for the trust rule
# A capacity measured this long ago is not the path's now (advise's --max-age).
MEASURED_MAX_AGE_S = HOUR_S


@dataclass(frozen=True)
class Candidate:
    """A group to sample: its path and its established connections."""

    key: PathKey
    group: Group
    flows: tuple[Flow, ...]


def _loss_based(key: PathKey) -> bool:
    """Whether the path's senders are loss-based (a download's are taken to be)."""
    return key.congestion in LOSS_BASED or key.congestion == REMOTE_CC


def _ours(cgroup: str | None) -> bool:
    """A connection of advise's probes or of `tamebpf run`: not sampled here."""
    return cgroup is not None and (PROBE_CGROUP in cgroup or RUN_CGROUP in cgroup)


class AckSampler:
    """Opens export's sampling windows, one at a time, and keeps what they
    measured by destination address (what PathLearner.observe takes)."""

    def __init__(self, netns_key: str, netns: str | None = None,
                 open_window: OpenWindow = AckWindow, window_s: float = WINDOW_S,
                 per_hour: int = WINDOWS_PER_HOUR) -> None:
        self.netns_key, self.netns = netns_key, netns
        self.open_window, self.window_s = open_window, window_s
        self.per_path: WindowsPerHour[PathKey] = WindowsPerHour(per_hour)
        self._measured: dict[tuple[str, str], tuple[float, MeasuredCapacity]] = {}
        self.windows = 0  # opened
        self.trusted = 0  # gave a capacity
        self.broken: str | None = None  # why sampling stopped (the BPF side failed)

    def counts(self) -> dict[str, int]:
        """Windows that gave a capacity, and those that did not (or were cut short)."""
        return {"capacity": self.trusted, "none": self.windows - self.trusted}

    def measured(self, now: float) -> dict[tuple[str, str], MeasuredCapacity]:
        """The capacities windows measured within MEASURED_MAX_AGE_S, by
        (address, direction) (`now`, here and below: time.monotonic())."""
        self._measured = {k: (when, m) for k, (when, m) in self._measured.items()
                          if now - when < MEASURED_MAX_AGE_S}
        return {k: m for k, (_, m) in self._measured.items()}

    def wanted(self, groups: Sequence[Group], newest: Mapping[PathKey, PathEntry],
               now: float) -> list[tuple[PathKey, Group]]:
        """The groups to sample, best first: those learn could use (a steady
        stream count), loss-based, not paced, not ours, whose path has no
        capacity in memory (`newest`: path memory's newest entry of each
        path, the learner's read of this step) nor a fresh one measured, and
        had fewer than per_hour windows in the last hour; the least sampled,
        then the fastest."""
        fresh = self.measured(now)
        found: list[tuple[int, float, PathKey, Group]] = []
        for g in groups:
            key = group_key(g, self.netns_key)
            if (key is None or not g.observed or not _loss_based(key)
                    or g.paced_bps is not None or _ours(g.cgroup)
                    or (g.remote_addr, g.direction) in fresh or not self.per_path.allows(key, now)):
                continue
            known = newest.get(key)
            if known is not None and (known.changed or known.capacity_mbps is not None):
                continue
            found.append((self.per_path.count(key, now), -(g.goodput_bps or 0.0), key, g))
        found.sort(key=lambda x: x[:2])
        return [(key, g) for _, _, key, g in found]

    def candidate(self, groups: Sequence[Group], newest: Mapping[PathKey, PathEntry],
                  flows_now: Callable[[], Sequence[Flow]], key_of: Callable[[Flow], GroupKey],
                  now: float) -> Candidate | None:
        """The first wanted group with established loss-based connections
        (flows are read only when some group is wanted)."""
        wanted = self.wanted(groups, newest, now)
        if not wanted:
            return None
        flows = flows_now()
        for key, g in wanted:
            # A receiver's own congestion control is not its data's.
            mine = tuple(f for f in flows if key_of(f) == g.key and f.state == "ESTABLISHED"
                         and not f.closed and not _ours(f.cgroup)
                         and (g.direction == "receive" or f.congestion_control in LOSS_BASED))
            if mine:
                return Candidate(key, g, mine)
        return None

    def sample(self, groups: Sequence[Group], newest: Mapping[PathKey, PathEntry],
               flows_now: Callable[[], Sequence[Flow]], key_of: Callable[[Flow], GroupKey],
               wait: Callable[[float], bool], now: float) -> CapacityEstimate | None:
        """One window on the candidate, if there is one: open, `wait`
        window_s (True: stop now, nothing estimated), read, close. The
        estimate, trusted or not (None: no window)."""
        if self.broken is not None:
            return None
        c = self.candidate(groups, newest, flows_now, key_of, now)
        if c is None:
            return None
        self.per_path.opened(c.key, now)
        cookies = [f.cookie for f in c.flows]
        try:
            window = self.open_window(cookies, self.netns, c.group.direction == "receive")
        except TamebpfError as err:
            self.broken = str(err)
            log.warning("export: no capacity from the transfers' ACKs: %s", err,
                        extra={"event": "ack_window_error"})
            return None
        self.windows += 1
        what = "data" if c.group.direction == "receive" else "ACKs"
        way = "from" if c.group.direction == "receive" else "to"
        log.info("export: sampling the %s of %d connections to %s for %g s (its path has "
                 "no capacity in memory)", what, len(cookies), c.group.remote_addr,
                 self.window_s, extra={"event": "ack_window", "dest": c.group.remote_addr})
        try:
            stopped = wait(self.window_s)
            acks = window.read()
        finally:
            window.close()
        if stopped:
            return None
        e = self._estimate(c, acks, flows_now())
        if c.group.direction == "receive" and e.reason:
            e = replace(e, reason=received_words(e.reason))
        if e.trusted and e.goodput_mbps is not None:
            self.trusted += 1
            got = MeasuredCapacity(e.goodput_mbps, e.low_mbps, e.high_mbps)
            if c.group.direction == "receive":
                got = MeasuredCapacity(e.goodput_mbps, e.low_mbps, e.high_mbps,
                                       RECEIVED_METHOD)
            self._measured[(c.group.remote_addr, c.group.direction)] = (now, got)
            log.info("export: capacity %.1f Mbit/s from the %s %s %s", e.goodput_mbps, what,
                     way, c.group.remote_addr,
                     extra={"event": "ack_capacity", "dest": c.group.remote_addr})
        else:
            log.info("export: no capacity from the %s %s %s: %s", what, way, c.group.remote_addr,
                     e.reason, extra={"event": "ack_no_capacity", "dest": c.group.remote_addr})
        return e

    def _estimate(self, c: Candidate, acks: AckLog, after: Sequence[Flow]) -> CapacityEstimate:
        """The estimate from the pairs at or above the connections' own
        goodput over the window (bytes acked from open to close)."""
        later = {f.cookie: f for f in after}
        both = [(f, later[f.cookie]) for f in c.flows if f.cookie in later]
        if not both:
            return CapacityEstimate(None, None, None, 0, 0, False,
                                    "the connections closed during the window")
        if c.group.direction == "receive":
            acked = sum(b.bytes_received - a.bytes_received for a, b in both)
        else:
            acked = sum(b.bytes_acked - a.bytes_acked for a, b in both)
        seconds = max(b.read_monotonic_ns - a.read_monotonic_ns for a, b in both) / 1e9
        mine = acks.only([f.cookie for f in c.flows])
        rates = pair_rates(mine, max(f.mss for f in c.flows))
        return reach_refused(capacity_above_own(rates, mbps_over(acked, max(seconds, 1e-3))),
                             peak_acked_mbps(mine))

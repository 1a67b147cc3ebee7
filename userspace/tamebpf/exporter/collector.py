"""Prometheus metrics from the kernel's flow telemetry, read at scrape time.

`TamebpfCollector` is a custom prometheus_client collector: every scrape
takes one snapshot from the flow source (a FlowReader, or a fake in tests),
feeds the aggregator of tamebpf.groups and yields metric families.  It is
registered on a registry the caller passes in, so tests scrape it with
`generate_latest(registry)` and no server.  docs/metrics.md lists every
metric this module can emit; a unit test checks the two agree.  Given a
node name, every series carries it as the label `node`.

Counters never go backwards while the collector lives: per group they are
the final counters of the flows that closed plus the current counters of
the open ones (tamebpf.groups explains the bookkeeping).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import CollectorRegistry

from tamebpf import __version__
from tamebpf.common.logs import log
from tamebpf.common.records import Cap as CapRecord
from tamebpf.common.records import Flow, FlowSource, ReaderStats
from tamebpf.common.units import bytes_per_s
from tamebpf.groups.aggregate import Aggregator
from tamebpf.groups.caps import CapLimit
from tamebpf.groups.group import Group
from tamebpf.paths.entry import PathEntry
from tamebpf.refresh import refresh_groups
from tamebpf.site.nodepaths import node_paths

PREFIX = "tamebpf_"
# The BPF programs a FlowReader keeps attached (bpf/flows.bpf.c).
FLOW_PROGRAMS = ("dump_flows", "on_state", "claim_owners")
# Scrapes closer together than this reuse the last reading.
MIN_REFRESH_S = 0.2


@dataclass(frozen=True)
class Reading:
    """One refresh: the groups and what the exporter knows about itself."""

    groups: list[Group]
    flows: list[Flow]  # open flows, only with per_flow (one series each)
    stats: ReaderStats | None
    duration_s: float
    time_s: float  # wall clock
    ok: bool
    open_flows: int = 0


# (name without prefix, help, Group -> value); counters get _total on exposition.
GROUP_COUNTERS: tuple[tuple[str, str, str], ...] = (
    ("group_acked_bytes", "Bytes of data sent and acknowledged by the peer (goodput).",
     "bytes_acked"),
    ("group_sent_bytes", "Bytes of data sent, retransmissions included.", "bytes_sent"),
    ("group_retransmitted_bytes", "Bytes of data retransmitted.", "bytes_retrans"),
    ("group_received_bytes", "Bytes of data received.", "bytes_received"),
    ("group_sent_segments", "TCP segments sent, pure ACKs included.", "segs_out"),
    ("group_sent_data_segments", "TCP segments sent that carried data.", "data_segs_out"),
    ("group_retransmitted_segments", "TCP segments retransmitted.", "total_retrans"),
    ("group_received_segments", "TCP segments received.", "segs_in"),
)

FLOW_COUNTERS: tuple[tuple[str, str, str], ...] = (
    ("flow_acked_bytes", "Bytes of data sent and acknowledged by the peer.", "bytes_acked"),
    ("flow_sent_bytes", "Bytes of data sent, retransmissions included.", "bytes_sent"),
    ("flow_received_bytes", "Bytes of data received.", "bytes_received"),
    ("flow_sent_data_segments", "TCP segments sent that carried data.", "data_segs_out"),
    ("flow_retransmitted_segments", "TCP segments retransmitted.", "total_retrans"),
)
FLOW_LABELS = ("cookie", "comm", "cgroup", "local_port", "remote_addr", "remote_port")


class FollowedCap(Protocol):
    """What the cap-follow metrics read of a cap that follows its path: the
    follow book's entries (cap/book.FollowSpec) are passed in from above."""

    @property
    def cgroup(self) -> str: ...
    @property
    def dest(self) -> str: ...
    @property
    def target_mbps(self) -> float | None: ...
    @property
    def change_count(self) -> int: ...
    @property
    def competing_flows(self) -> float | None: ...
    @property
    def updated(self) -> float | None: ...


class TamebpfCollector:
    """Reads the flow source at scrape time; safe to scrape from several
    threads (one reading at a time).

    per_flow: also one series per open flow (unbounded cardinality: ask for
    it explicitly).  caps: returns the caps in force (tamebpf cap).
    cap_table: returns the kernel's cap records (for the cap metrics).
    paths: returns path memory's newest entry per path (docs/paths.md).
    follows: returns the caps that follow their path (cap/book.py's
    FollowSpec, as a FollowedCap). ack_windows: returns how many ACK
    sampling windows gave a capacity and how many none (exporter/acksampling.py).
    node: the label `node` of every series (None: no such label)."""

    def __init__(
        self,
        source: FlowSource,
        agg: Aggregator,
        *,
        node: str | None = None,
        per_flow: bool = False,
        caps: Callable[[], list[CapLimit]] = list,
        cap_table: Callable[[], Sequence[CapRecord]] = list,
        programs: Sequence[str] = FLOW_PROGRAMS,
        paths: Callable[[], Sequence[PathEntry]] = list,
        follows: Callable[[], Sequence[FollowedCap]] = list,
        ack_windows: Callable[[], Mapping[str, int]] = dict,
    ) -> None:
        self.source, self.agg, self.node, self.per_flow = source, agg, node, per_flow
        self.caps, self.cap_table, self.programs = caps, cap_table, tuple(programs)
        self.paths, self.follows, self.ack_windows = paths, follows, ack_windows
        self.labels = ("comm" if agg.group_by == "comm" else "cgroup", "remote_addr",
                       "direction")
        self._lock = threading.Lock()
        self._last: Reading | None = None
        self._last_mono = 0.0
        self.read_errors = 0
        self.scrapes = 0

    def describe(self) -> list[Any]:
        # No samples at registration: reading the kernel is for scrapes.
        return []

    def open_flows(self) -> list[Flow]:
        """Every open flow now, read under the lock the scrapes take (the
        follow caps' agent: cap/follow.py)."""
        with self._lock:
            return [f for f in self.source.snapshot() if not f.closed]

    def read(self, max_age_s: float = MIN_REFRESH_S) -> Reading:
        """A fresh reading, or the last one if it is younger than max_age_s."""
        with self._lock:
            now = time.monotonic()
            if self._last is not None and now - self._last_mono < max_age_s:
                return self._last
            start = time.perf_counter()
            ok = True
            stats: ReaderStats | None
            try:
                got = refresh_groups(self.agg, self.source, self.caps(), flows=self.per_flow)
                stats = self.source.stats()
                groups, open_flows, count = got.groups, got.flows, got.open_flows
            except Exception as err:  # noqa: BLE001 - a scrape must answer; count and go on
                self.read_errors += 1
                log.warning("reading the kernel failed (%s); serving the previous reading",
                            err, extra={"event": "read_error", "read_errors": self.read_errors})
                ok = False
                prev = self._last
                groups = prev.groups if prev else []
                open_flows = prev.flows if prev else []
                count = prev.open_flows if prev else 0
                stats = prev.stats if prev else None
            self._last = Reading(groups, open_flows, stats, time.perf_counter() - start,
                                 time.time(), ok, count)
            self._last_mono = now
            return self._last

    def collect(self) -> Iterator[Any]:
        reading = self.read()
        self.scrapes += 1
        for family in self._families(reading):
            if self.node is not None:
                family.samples = [s._replace(labels={**s.labels, "node": self.node})
                                  for s in family.samples]
            yield family

    def _families(self, reading: Reading) -> Iterator[Any]:
        yield from self._group_metrics(reading.groups)
        yield from self._site_path_metrics(reading.groups)
        if self.per_flow:
            yield from self._flow_metrics(reading.flows)
        yield from self._cap_metrics()
        yield from self._path_metrics(reading.time_s)
        yield from self._health(reading)

    def _key(self, g: Group) -> list[str]:
        return [g.key.owner or "", g.remote_addr, g.direction]

    def _group_metrics(self, groups: Sequence[Group]) -> Iterator[Any]:
        labels = self.labels
        for name, doc, attr in GROUP_COUNTERS:
            c = CounterMetricFamily(PREFIX + name, doc, labels=labels)
            for g in groups:
                c.add_metric(self._key(g), getattr(g.counters, attr))
            yield c
        closed = CounterMetricFamily(PREFIX + "group_flows_closed",
                                     "TCP flows of the group that closed.", labels=labels)
        flows = GaugeMetricFamily(PREFIX + "group_flows", "Open TCP flows of the group.",
                                  labels=labels)
        streams = GaugeMetricFamily(
            PREFIX + "group_streams",
            "Established flows of the group that sent data since the previous reading.",
            labels=labels)
        srtt = GaugeMetricFamily(PREFIX + "group_srtt_seconds",
                                 "Mean smoothed round-trip time of the group's streams.",
                                 labels=labels)
        levels = GaugeMetricFamily(
            PREFIX + "group_observed_stream_counts",
            "Distinct stream counts the group was seen at (the passive fit needs 2).",
            labels=labels)
        for g in groups:
            key = self._key(g)
            closed.add_metric(key, g.flows_closed)
            flows.add_metric(key, g.flows)
            streams.add_metric(key, g.streams)
            levels.add_metric(key, len(g.observed))
            if g.srtt_us is not None:
                srtt.add_metric(key, g.srtt_us / 1e6)
        yield from (closed, flows, streams, srtt, levels)
        yield from self._advice_metrics(groups)

    def _advice_metrics(self, groups: Sequence[Group]) -> Iterator[Any]:
        labels = self.labels
        adv_streams = GaugeMetricFamily(
            PREFIX + "group_advice_streams",
            "Streams the passive fit advises (present once a fit exists).", labels=labels)
        adv_rate = GaugeMetricFamily(
            PREFIX + "group_advice_throughput_bytes_per_second",
            "Predicted aggregate throughput at the advised streams.", labels=labels)
        adv_impact = GaugeMetricFamily(
            PREFIX + "group_advice_impact_ratio",
            "Predicted relative throughput loss of cross traffic at the advised streams.",
            labels=labels)
        over = GaugeMetricFamily(
            PREFIX + "group_over_advice",
            "1 if the group runs more streams than advised, else 0 (with a fit).",
            labels=labels)
        cap = GaugeMetricFamily(
            PREFIX + "group_cap_streams",
            "Tightest stream cap (tamebpf cap) matching the group.", labels=labels)
        over_cap = GaugeMetricFamily(
            PREFIX + "group_over_cap",
            "1 if a matching cap counts more of the group's streams than it allows, else 0.",
            labels=labels)
        paced = GaugeMetricFamily(
            PREFIX + "group_pace_target_bytes_per_second",
            "Target of the tightest pace cap (tamebpf cap --mode pace) matching the group: "
            "its streams together send at most this.", labels=labels)
        for g in groups:
            key = self._key(g)
            adv = g.advice
            if adv is not None:
                adv_streams.add_metric(key, adv.num_flows)
                adv_rate.add_metric(key, bytes_per_s(adv.max_nondisruptive_thru))
                adv_impact.add_metric(key, adv.cross_traffic_impact)
                over.add_metric(key, 1.0 if g.over_advice else 0.0)
            if g.cap is not None:
                cap.add_metric(key, g.cap)
                over_cap.add_metric(key, 1.0 if g.over_cap else 0.0)
            if g.paced_bps is not None:
                paced.add_metric(key, g.paced_bps / 8)
        yield from (adv_streams, adv_rate, adv_impact, over, cap, over_cap, paced)

    def _site_path_metrics(self, groups: Sequence[Group]) -> Iterator[Any]:
        """Per site path (site/prefix.py), what this node runs there: the
        series a site's nodes read of each other."""
        labels = ("dest", "direction")
        streams = GaugeMetricFamily(PREFIX + "site_path_streams",
                                    "Streams of this node's groups on the site path.",
                                    labels=labels)
        goodput = GaugeMetricFamily(PREFIX + "site_path_goodput_bytes_per_second",
                                    "Goodput of this node's groups on the site path, "
                                    "last interval.", labels=labels)
        target = GaugeMetricFamily(PREFIX + "site_path_pace_target_bytes_per_second",
                                   "Sum of the targets of the pace caps holding this node's "
                                   "groups on the site path (each cap once).", labels=labels)
        for row in node_paths(groups):
            key = [row.dest, row.direction]
            streams.add_metric(key, row.streams)
            if row.goodput_bps is not None:
                goodput.add_metric(key, row.goodput_bps / 8)
            if row.pace_target_bps is not None:
                target.add_metric(key, row.pace_target_bps / 8)
        yield from (streams, goodput, target)

    def _flow_metrics(self, flows: Sequence[Flow]) -> Iterator[Any]:
        def key(f: Flow) -> list[str]:
            return [str(f.cookie), f.comm or "", f.cgroup or "", str(f.local_port),
                    f.remote_addr, str(f.remote_port)]

        for name, doc, attr in FLOW_COUNTERS:
            c = CounterMetricFamily(PREFIX + name, doc, labels=FLOW_LABELS)
            for f in flows:
                c.add_metric(key(f), getattr(f, attr))
            yield c
        srtt = GaugeMetricFamily(PREFIX + "flow_srtt_seconds", "Smoothed round-trip time.",
                                 labels=FLOW_LABELS)
        cwnd = GaugeMetricFamily(PREFIX + "flow_congestion_window_segments",
                                 "Congestion window.", labels=FLOW_LABELS)
        for f in flows:
            if f.srtt_us is not None:
                srtt.add_metric(key(f), f.srtt_us / 1e6)
            cwnd.add_metric(key(f), f.snd_cwnd)
        yield from (srtt, cwnd)

    def _cap_metrics(self) -> Iterator[Any]:
        labels = ("cgroup", "dest")
        limit = GaugeMetricFamily(PREFIX + "cap_max_streams",
                                  "Streams a refuse-mode cap allows (tamebpf cap).",
                                  labels=labels)
        target = GaugeMetricFamily(PREFIX + "cap_pace_target_bytes_per_second",
                                   "What a pace-mode cap's streams may send together "
                                   "(tamebpf cap --mode pace).", labels=labels)
        live = GaugeMetricFamily(PREFIX + "cap_streams", "Streams a cap counts now.",
                                 labels=labels)
        refused = CounterMetricFamily(PREFIX + "cap_refused_connections",
                                      "connect() calls a cap refused.", labels=labels)
        try:
            table = list(self.cap_table())
        except Exception as err:  # noqa: BLE001 - caps are extra; never fail a scrape for them
            log.warning("reading the caps failed (%s); no cap series this scrape", err,
                        extra={"event": "cap_read_error"})
            table = []
        for c in table:
            key = [c.cgroup, c.dest]
            if c.mode == "pace":
                target.add_metric(key, c.rate_bytes_per_s)
            else:
                limit.add_metric(key, c.max_streams)
            live.add_metric(key, c.streams)
            refused.add_metric(key, c.refused)
        yield from (limit, target, live, refused)
        yield from self._follow_metrics()

    def _follow_metrics(self) -> Iterator[Any]:
        """Caps that follow their path (docs/paths.md): the target the agent
        set, how often it changed, what it read of the path."""
        labels = ("cgroup", "dest")
        target = GaugeMetricFamily(PREFIX + "cap_follow_target_bytes_per_second",
                                   "The target a following pace cap's streams are held to "
                                   "now (the scout included).", labels=labels)
        changes = CounterMetricFamily(PREFIX + "cap_follow_changes",
                                      "Times a following cap's target changed.", labels=labels)
        flows = GaugeMetricFamily(PREFIX + "cap_follow_competing_flows",
                                  "The competing flows the cap's scout last read.",
                                  labels=labels)
        updated = GaugeMetricFamily(PREFIX + "cap_follow_updated_timestamp_seconds",
                                    "Unix time the agent last read the cap's path.",
                                    labels=labels)
        try:
            specs = list(self.follows())
        except Exception as err:  # noqa: BLE001 - never fail a scrape for extras
            log.warning("reading the follow book failed (%s)", err,
                        extra={"event": "follow_read_error"})
            specs = []
        for s in specs:
            key = [s.cgroup, s.dest]
            if s.target_mbps is not None:
                target.add_metric(key, bytes_per_s(s.target_mbps))
            changes.add_metric(key, s.change_count)
            if s.competing_flows is not None:
                flows.add_metric(key, s.competing_flows)
            if s.updated is not None:
                updated.add_metric(key, s.updated)
        yield from (target, changes, flows, updated)

    def _path_metrics(self, now: float) -> Iterator[Any]:
        """Path memory: one series per path (destination prefix, namespace,
        congestion control, direction), bounded by the store's row cap."""
        labels = ("dest", "netns", "congestion", "direction")
        info = GaugeMetricFamily(PREFIX + "path_info", "A remembered path (value 1): where "
                                 "its newest advice came from and how it was probed.",
                                 labels=(*labels, "source", "probes"))
        age = GaugeMetricFamily(PREFIX + "path_age_seconds",
                                "Age of the path's newest advice.", labels=labels)
        when = GaugeMetricFamily(PREFIX + "path_learned_timestamp_seconds",
                                 "Unix time of the path's newest advice.", labels=labels)
        streams = GaugeMetricFamily(PREFIX + "path_advice_streams",
                                    "Streams the path's newest advice advises.", labels=labels)
        rate = GaugeMetricFamily(PREFIX + "path_advice_throughput_bytes_per_second",
                                 "Predicted throughput at the advised streams.", labels=labels)
        limit = GaugeMetricFamily(PREFIX + "path_max_impact_ratio",
                                  "The impact limit the advice was computed for.",
                                  labels=labels)
        capacity = GaugeMetricFamily(PREFIX + "path_capacity_bytes_per_second",
                                     "The bottleneck's TCP goodput the advice rests on "
                                     "(when known).", labels=labels)
        fit = GaugeMetricFamily(PREFIX + "path_fit_info",
                                "The path's fit (value 1), in the label fit as path memory "
                                "keeps it: what another node's advise --paths-from "
                                "recomputes the advice from.",
                                labels=(*labels, "source", "probes", "fit"))
        changed = GaugeMetricFamily(PREFIX + "path_changed",
                                    "1 if real transfers showed the path changed since its "
                                    "advice (the next advise probes), else 0.", labels=labels)
        try:
            entries = list(self.paths())
        except Exception as err:  # noqa: BLE001 - path memory is extra; never fail a scrape
            log.warning("reading path memory failed (%s); no path series this scrape", err,
                        extra={"event": "paths_read_error"})
            entries = []
        for e in entries:
            key = [e.key.dest, e.key.netns, e.key.congestion, e.key.direction]
            info.add_metric([*key, e.source, e.probe_kind], 1)
            fit.add_metric([*key, e.source, e.probe_kind, e.fit.to_json()], 1)
            age.add_metric(key, e.age_s(now))
            when.add_metric(key, e.when)
            streams.add_metric(key, e.advised_streams)
            rate.add_metric(key, bytes_per_s(e.advised_mbps))
            limit.add_metric(key, e.max_impact)
            if e.capacity_mbps is not None:
                capacity.add_metric(key, bytes_per_s(e.capacity_mbps))
            changed.add_metric(key, 1.0 if e.changed else 0.0)
        yield from (info, fit, age, when, streams, rate, limit, capacity, changed)

    def _health(self, r: Reading) -> Iterator[Any]:
        info = GaugeMetricFamily(PREFIX + "build_info", "tamebpf version (value 1).",
                                 labels=("version",))
        info.add_metric([__version__], 1)
        yield info
        yield GaugeMetricFamily(PREFIX + "programs_attached",
                                "BPF programs the exporter keeps attached.",
                                value=len(self.programs))
        yield GaugeMetricFamily(PREFIX + "up", "1 if the last reading of the kernel worked.",
                                value=1 if r.ok else 0)
        yield CounterMetricFamily(PREFIX + "read_errors",
                                  "Readings of the kernel that failed.", value=self.read_errors)
        yield GaugeMetricFamily(PREFIX + "read_duration_seconds",
                                "Time the last reading took (snapshot and aggregation).",
                                value=r.duration_s)
        yield GaugeMetricFamily(PREFIX + "flows", "Open TCP flows seen.", value=r.open_flows)
        yield GaugeMetricFamily(PREFIX + "groups", "Groups held (open flows or counters kept).",
                                value=len(r.groups))
        yield CounterMetricFamily(PREFIX + "groups_evicted",
                                  "Idle groups forgotten to bound the series (--max-groups).",
                                  value=self.agg.evicted)
        st = r.stats
        fill = GaugeMetricFamily(PREFIX + "map_entries", "Entries in a BPF map now.",
                                 labels=("map",))
        size = GaugeMetricFamily(PREFIX + "map_max_entries", "Capacity of a BPF map.",
                                 labels=("map",))
        dropped = CounterMetricFamily(
            PREFIX + "events_dropped",
            "Kernel events lost: closed-flow records (map full) or flow owners (no storage).",
            labels=("event",))
        recorded = CounterMetricFamily(PREFIX + "closed_flows_recorded",
                                       "Closed flows whose final counters were recorded.")
        if st is not None:
            fill.add_metric(["closed"], st.closed_fill)
            size.add_metric(["closed"], st.closed_max)
            dropped.add_metric(["closed_flow"], st.closed_dropped)
            dropped.add_metric(["owner"], st.owners_dropped)
            recorded.add_metric([], st.closed_recorded)
        yield from (fill, size, dropped, recorded)
        windows = CounterMetricFamily(
            PREFIX + "ack_windows",
            "Sampling windows on transfers' ACKs, by whether they gave the path a capacity.",
            labels=("result",))
        counts = self.ack_windows()
        for result in ("capacity", "none"):
            windows.add_metric([result], counts.get(result, 0))
        yield windows


def make_registry(collector: TamebpfCollector,
                  registry: CollectorRegistry | None = None) -> CollectorRegistry:
    """Register the collector on `registry` (a new one by default, not the
    process-wide default, so Python's own metrics stay out)."""
    reg = registry if registry is not None else CollectorRegistry(auto_describe=False)
    reg.register(collector)
    return reg

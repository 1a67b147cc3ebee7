"""refresh_groups: the reading and the clock, taken outside the pure
aggregation and handed to it."""

from __future__ import annotations

from tamebpf.common.records import Flow, FlowChanges, ReaderStats
from tamebpf.groups.aggregate import Aggregator
from tamebpf.refresh import refresh_groups
from tests.unit.groups.test_groups_fakes import SECOND, make_flow


class Snapshots:
    """A source that can only give every flow."""

    def __init__(self, flows: list[Flow]) -> None:
        self.flows = flows

    def snapshot(self) -> list[Flow]:
        return self.flows

    def stats(self) -> ReaderStats:
        return ReaderStats(0, 0, 0, 0, 1024)


class Changes(Snapshots):
    """A source that can also say what changed; counts what it is asked."""

    def __init__(self, flows: list[Flow], read_ns: int) -> None:
        super().__init__(flows)
        self.read_ns = read_ns
        self.asked: list[str] = []

    def snapshot(self) -> list[Flow]:
        self.asked.append("snapshot")
        return self.flows

    def changes(self) -> FlowChanges:
        self.asked.append("changes")
        return FlowChanges(self.flows, [], len(self.flows), self.read_ns)


def test_a_source_that_knows_the_changes_is_asked_only_for_them() -> None:
    src = Changes([make_flow(1, bytes_acked=10, read_monotonic_ns=5)], 7 * SECOND)
    agg = Aggregator()
    got = refresh_groups(agg, src)
    assert src.asked == ["changes"] and (got.open_flows, got.flows) == (1, [])
    assert len(got.groups) == 1, f"expected one group, got {got.groups}"
    got = refresh_groups(agg, src, flows=True)
    assert src.asked == ["changes", "snapshot"], "every open flow needs a snapshot"
    assert [f.cookie for f in got.flows] == [1]


def test_the_snapshot_time_is_the_kernels_and_the_clock_only_a_fallback() -> None:
    agg = Aggregator()
    closed = make_flow(2, closed=True, read_monotonic_ns=99 * SECOND)
    flows = [make_flow(1, read_monotonic_ns=3 * SECOND), closed]
    first = agg.refresh_snapshot(flows, clock_ns=50 * SECOND, flows=True)
    assert (first.open_flows, [f.cookie for f in first.flows]) == (1, [1])
    moved = make_flow(1, bytes_acked=125_000_000, data_segs_out=1,
                      read_monotonic_ns=4 * SECOND)
    g = agg.refresh_snapshot([moved], clock_ns=60 * SECOND).groups[0]
    assert g.interval_s == 1.0, f"the interval is the kernel's read times, got {g.interval_s}"
    g = agg.refresh_snapshot([], clock_ns=6 * SECOND).groups[0]
    assert g.interval_s == 2.0, f"with no open flow the caller's clock times it: {g.interval_s}"
    assert refresh_groups(Aggregator(), Snapshots([])).open_flows == 0

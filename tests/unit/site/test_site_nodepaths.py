"""What a node runs on each site path (site/nodepaths.py): its groups with
open flows, summed per destination /24 (or /64) and direction."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tamebpf.groups.aggregate import Aggregator
from tamebpf.groups.caps import CapLimit
from tamebpf.groups.group import Group
from tamebpf.site.nodepaths import NodePath, node_paths
from tests.unit.groups.test_groups_fakes import SECOND, Transfer


def groups_of(transfers: list[Transfer], caps: list[CapLimit] | None = None,
              steps: int = 3) -> list[Group]:
    """The groups of the last of `steps` one-second readings of the transfers."""
    agg = Aggregator()
    got: list[Group] = []
    for i in range(1, steps + 1):
        flows = [f for t in transfers for f in t.step(1.0, i * SECOND)]
        got = agg.refresh_snapshot(flows, i * SECOND, caps or []).groups
    return got


def test_two_hosts_of_one_24_are_one_path() -> None:
    rows = node_paths(groups_of([Transfer(streams=2, mbps=80.0, remote="198.18.3.2"),
                                 Transfer(streams=3, mbps=40.0, remote="198.18.3.7",
                                          next_cookie=2000)]))
    assert len(rows) == 1, f"expected one path for two hosts of 198.18.3.0/24, got {rows}"
    row = rows[0]
    assert (row.dest, row.direction, row.streams) == ("198.18.3.0/24", "send", 5), row
    assert row.goodput_bps == pytest.approx(120e6, rel=0.01), (
        f"expected 80 + 40 Mbit/s of goodput, got {row.goodput_bps}")
    assert row.pace_target_bps is None, f"no group is paced, got a target {row}"


def test_send_and_receive_are_two_paths() -> None:
    rows = node_paths(groups_of([Transfer(streams=2, mbps=80.0, remote="198.18.3.2"),
                                 Transfer(streams=4, mbps=40.0, remote="198.18.3.9",
                                          receive=True, next_cookie=2000)]))
    got = [(r.dest, r.direction, r.streams) for r in rows]
    assert got == [("198.18.3.0/24", "receive", 4), ("198.18.3.0/24", "send", 2)], got
    receive = rows[0]
    assert receive.goodput_bps == pytest.approx(40e6, rel=0.01), (
        f"a download's goodput is what it receives: 40 Mbit/s, got {receive.goodput_bps}")


def test_pace_targets_add_up_each_cap_once() -> None:
    a = Transfer(streams=2, mbps=80.0, remote="198.18.3.2", cgroup="/a")
    b = Transfer(streams=2, mbps=80.0, remote="198.18.3.7", cgroup="/b", next_cookie=2000)
    c = Transfer(streams=1, mbps=10.0, remote="198.18.3.8", cgroup="/a", next_cookie=3000)
    caps = [CapLimit(2**32 - 1, cgroup="/a", remote="198.18.0.0/15", pace_bps=100e6),
            CapLimit(2**32 - 1, cgroup="/b", remote="198.18.3.0/24", pace_bps=30e6),
            CapLimit(2**32 - 1, cgroup="/b", remote="198.18.3.7", pace_bps=50e6)]
    groups = groups_of([a, b, c], caps)
    assert {g.remote_addr: g.paced_bps for g in groups} == {
        "198.18.3.2": 100e6, "198.18.3.7": 30e6, "198.18.3.8": 100e6}, groups
    (row,) = node_paths(groups)
    # /a's cap holds two groups (198.18.3.2 and .8) whose streams share its
    # 100 Mbit/s; /b's tightest cap is 30.
    assert row.pace_target_bps == pytest.approx(130e6), (
        f"expected 100 + 30 Mbit/s of pace targets, got {row.pace_target_bps}")


def test_paced_groups_set_the_target_and_unpaced_ones_do_not() -> None:
    caps = [CapLimit(2**32 - 1, cgroup="/a", remote="198.18.3.0/24", pace_bps=100e6)]
    rows = node_paths(groups_of([
        Transfer(streams=2, mbps=80.0, remote="198.18.3.2", cgroup="/a"),
        Transfer(streams=2, mbps=80.0, remote="198.18.4.2", cgroup="/a", next_cookie=2000)],
        caps))
    got = {r.dest: r.pace_target_bps for r in rows}
    assert got == {"198.18.3.0/24": 100e6, "198.18.4.0/24": None}, got


def test_only_groups_with_open_flows_and_an_address_count() -> None:
    ended = Transfer(streams=2, mbps=80.0, remote="198.18.5.2")
    live = Transfer(streams=1, mbps=8.0, remote="2001:db8:0:7::2", next_cookie=2000)
    agg = Aggregator()
    agg.refresh_snapshot([f for t in (ended, live) for f in t.step(1.0, SECOND)], SECOND)
    ended.set_streams(0)
    groups = agg.refresh_snapshot([f for t in (ended, live) for f in t.step(1.0, 2 * SECOND)],
                                  2 * SECOND).groups
    assert {g.remote_addr for g in groups} == {"198.18.5.2", "2001:db8:0:7::2"}, groups
    named = replace(next(g for g in groups if g.flows), remote_addr="dtn.example.org")
    rows = node_paths([*groups, named])
    assert [(r.dest, r.streams) for r in rows] == [("2001:db8:0:7::/64", 1)], rows


def test_no_groups_no_rows() -> None:
    assert node_paths([]) == []


def test_a_row_before_any_interval_has_no_goodput() -> None:
    rows = node_paths(groups_of([Transfer(streams=3, mbps=80.0, remote="198.18.3.2")],
                                steps=1))
    assert rows == [NodePath("198.18.3.0/24", "send", 3, None, None)], rows

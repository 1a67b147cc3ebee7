"""export as one node of a site: the label node on every series, and what
the node runs per site path (tamebpf_site_path_*; docs/metrics.md)."""

from __future__ import annotations

import pytest

from tamebpf.exporter.collector import TamebpfCollector
from tamebpf.groups.aggregate import Aggregator
from tamebpf.groups.caps import CapLimit
from tests.unit.groups.test_groups_fakes import Transfer
from tests.unit.present.test_export import FakeReader, Samples, documented, every_series, fresh


def without_node(samples: Samples) -> Samples:
    return {(name, tuple(kv for kv in labels if kv[0] != "node")): v
            for (name, labels), v in samples.items()}


def test_every_family_carries_the_node_and_nothing_else_changes() -> None:
    plain, labelled = every_series(), every_series(node="dtn1")
    names = {name for name, _ in labelled}
    assert names == documented(), (
        f"expected a sample of every metric of docs/metrics.md, missing "
        f"{sorted(documented() - names)}")
    unlabelled = sorted({name for name, labels in labelled if ("node", "dtn1") not in labels})
    assert unlabelled == [], f"series without node=\"dtn1\": {unlabelled}"
    assert without_node(labelled).keys() == plain.keys(), (
        "the node label should be the only difference")
    assert not [k for k in plain if any(name == "node" for name, _ in k[1])], (
        "a collector without a node name adds no node label")


def site(direction: str = "send", dest: str = "198.18.3.0/24") -> tuple[tuple[str, str], ...]:
    return (("dest", dest), ("direction", direction), ("node", "dtn1"))


def test_site_path_series_sum_the_nodes_groups() -> None:
    transfers = [Transfer(streams=2, mbps=80.0, remote="198.18.3.2", cgroup="/a"),
                 Transfer(streams=3, mbps=40.0, remote="198.18.3.7", cgroup="/a",
                          next_cookie=2000),
                 Transfer(streams=1, mbps=16.0, remote="198.18.3.9", receive=True,
                          next_cookie=3000),
                 Transfer(streams=1, mbps=8.0, remote="198.18.4.1", cgroup="/b",
                          next_cookie=4000)]
    caps = [CapLimit(2**32 - 1, cgroup="/a", remote="198.18.3.0/24", pace_bps=100e6)]
    col = TamebpfCollector(FakeReader(transfers), Aggregator(), node="dtn1", caps=lambda: caps)
    fresh(col)
    _, s, _ = fresh(col)
    got = {(name, labels): v for (name, labels), v in s.items()
           if name.startswith("tamebpf_site_path_")}
    send, receive, other = site(), site("receive"), site(dest="198.18.4.0/24")
    assert got[("tamebpf_site_path_streams", send)] == 5
    assert got[("tamebpf_site_path_goodput_bytes_per_second", send)] == pytest.approx(
        120e6 / 8, rel=0.01)
    assert got[("tamebpf_site_path_pace_target_bytes_per_second", send)] == 100e6 / 8, (
        "one cap holds both send groups: its target once")
    assert got[("tamebpf_site_path_streams", receive)] == 1
    assert got[("tamebpf_site_path_goodput_bytes_per_second", receive)] == pytest.approx(
        16e6 / 8, rel=0.01)
    assert got[("tamebpf_site_path_streams", other)] == 1
    unpaced = [k for k in got if k[0] == "tamebpf_site_path_pace_target_bytes_per_second"
               and k[1] in (receive, other)]
    assert unpaced == [], f"a target series for a path no cap paces: {unpaced}"
    assert len(got) == 7, f"expected 3 paths x (streams, goodput) + 1 target, got {sorted(got)}"

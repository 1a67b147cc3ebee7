"""Path memory in `export`: one series per remembered path with its age,
advice, capacity and changed mark (docs/metrics.md, "Paths")."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from tamebpf.exporter.collector import TamebpfCollector
from tamebpf.groups.aggregate import Aggregator
from tamebpf.paths.entry import PathEntry, PathKey
from tests.unit.groups.test_groups_fakes import Transfer
from tests.unit.paths.test_paths_store import an_entry
from tests.unit.present.test_export import FakeReader, fresh

PATH = (("congestion", "cubic"), ("dest", "198.18.3.2/32"), ("direction", "send"),
        ("netns", "tb-snd"))  # sorted


def collector(entries: list[PathEntry] | None = None, fail: bool = False) -> TamebpfCollector:
    def paths() -> list[PathEntry]:
        if fail:
            raise OSError("disk gone")
        return entries or []

    return TamebpfCollector(FakeReader([Transfer(streams=1, mbps=50.0)]), Aggregator(),
                            paths=paths)


def test_each_path_has_its_age_advice_capacity_and_mark() -> None:
    e = an_entry(time.time() - 120)
    other = replace(an_entry(), key=PathKey("2001:db8::1/128", "host", "bbr"), changed=True,
                    source="passive", probe_kind="none", capacity_mbps=None)
    _, s, _ = fresh(collector([e, other]))
    assert s[("tamebpf_path_age_seconds", PATH)] == pytest.approx(120, abs=5)
    assert s[("tamebpf_path_advice_streams", PATH)] == e.advised_streams
    assert s[("tamebpf_path_advice_throughput_bytes_per_second", PATH)] == pytest.approx(
        e.advised_mbps * 1e6 / 8)
    assert e.capacity_mbps is not None
    assert s[("tamebpf_path_capacity_bytes_per_second", PATH)] == pytest.approx(
        e.capacity_mbps * 1e6 / 8)
    assert s[("tamebpf_path_changed", PATH)] == 0
    assert s[("tamebpf_path_info", tuple(sorted((*PATH, ("source", "--capacity"),
                                                 ("probes", "settled")))))] == 1
    v6 = (("congestion", "bbr"), ("dest", "2001:db8::1/128"), ("direction", "send"),
          ("netns", "host"))
    assert s[("tamebpf_path_changed", v6)] == 1
    assert ("tamebpf_path_capacity_bytes_per_second", v6) not in s


def test_a_failing_store_costs_the_path_series_not_the_scrape() -> None:
    _, s, _ = fresh(collector(fail=True))
    assert not [k for k in s if k[0].startswith("tamebpf_path_")]
    assert any(k[0] == "tamebpf_up" for k in s)

"""export's learner step (commands/export.learning) reads path memory once a
step, for its ACK sampler and its learner both: with --ack-sampling on, each
step once read every path's newest entry for the learner and each wanted
group's again for the sampler. Path memory is a real store in a temporary
directory, counting its reads; the readings come from a stand-in for the
exporter's collector, the sampler's window from test_acksampling's fake."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from tamebpf.commands.export import learning
from tamebpf.common.records import Flow
from tamebpf.exporter.acksampling import AckSampler
from tamebpf.exporter.collector import Reading
from tamebpf.groups.group import Group
from tamebpf.model import Settings
from tamebpf.paths.entry import PathEntry, PathKey
from tamebpf.paths.passive import MeasuredCapacity, PathLearner
from tamebpf.paths.store import PathStore
from tests.unit.cli.test_acksampling import DEST, Opener, flows, group, key_of
from tests.unit.paths.test_paths_store import an_entry

STEPS = 3
PATH = PathKey(f"{DEST}/32", "tb-snd", "cubic")


class CountingStore(PathStore):
    """Path memory that counts how often its entries are read."""

    reads = 0

    def newest(self, key: PathKey, with_capacity: bool = False) -> PathEntry | None:
        self.reads += 1
        return super().newest(key, with_capacity)

    def latest(self) -> list[PathEntry]:
        self.reads += 1
        return super().latest()


class CountingLearner(PathLearner):
    """Says when it has observed STEPS readings."""

    def __init__(self, store: PathStore) -> None:
        super().__init__(store, "tb-snd", Settings(max_impact=0.10))
        self.steps = 0
        self.done = threading.Event()

    def observe(self, groups: list[Group], now: float,
                measured: Mapping[str, MeasuredCapacity] | None = None,
                newest: Mapping[PathKey, PathEntry] | None = None) -> None:
        super().observe(groups, now, measured, newest)
        self.steps += 1
        if self.steps >= STEPS:
            self.done.set()


class Collector:
    """What the step uses of export's collector: a reading of one
    loss-based group with a steady stream count, its open connections
    (four, moving 36 Mbit/s) and the aggregator's group key."""

    def __init__(self) -> None:
        self.reads = 0
        self.agg = SimpleNamespace(key=key_of)

    def read(self, max_age_s: float) -> Reading:
        self.reads += 1
        return Reading([group()], [], None, 0.0, 1000.0 + self.reads, True)

    def open_flows(self) -> list[Flow]:
        return flows(10.0 + self.reads)


@pytest.mark.parametrize("memory", ["a capacity", "no capacity"])
def test_a_step_reads_path_memory_once(tmp_path: Path, memory: str) -> None:
    """Whether the path has a capacity in memory (no window: the sampler
    only looks) or not (the first step samples its ACKs)."""
    store = CountingStore(str(tmp_path))
    store.put(replace(an_entry(), key=PATH, **({} if memory == "a capacity" else {
        "capacity_mbps": None, "capacity_low_mbps": None, "capacity_high_mbps": None,
        "capacity_method": None})))
    learner = CountingLearner(store)
    opener = Opener()
    sampler = AckSampler("tb-snd", None, open_window=opener, window_s=0.01)
    collector = Collector()
    store.reads = 0
    with learning(collector, learner, 0.01, sampler):  # type: ignore[arg-type]
        assert learner.done.wait(30), f"{learner.steps} of {STEPS} steps in 30 s"
    # Every step begun has ended (the learner's thread is joined): each read once.
    assert collector.reads >= STEPS
    assert store.reads == collector.reads, \
        f"{store.reads} reads of path memory in {collector.reads} steps, not one a step"
    assert len(opener.opened) == (memory == "no capacity"), opener.opened

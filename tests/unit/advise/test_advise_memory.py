"""advise and path memory (advise/memory.py): when its own memory holds no
answer, the reason advise's refusal gives says which: no entry, or an entry
that cannot answer and why (fresh draw 10's case 9 said "no fresh entry"
for a path its transfer had just taught)."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from tamebpf.advise.memory import AdviceMemory
from tamebpf.estimate.advice import build
from tamebpf.estimate.record import Target
from tamebpf.model import Settings
from tamebpf.paths.entry import PathKey
from tamebpf.paths.recall import entry_from_advice
from tamebpf.paths.store import PathStore
from tamebpf.paths.where import netns_id
from tests.unit.advise.test_advise_report import probe

SETTINGS = Settings(max_impact=0.10)
TARGET = Target("198.18.3.2", netns=None, congestion="cubic")
KEY = PathKey("198.18.3.2/32", netns_id(None), "cubic")


def stored(tmp_path: Path, changed: bool) -> AdviceMemory:
    result = build(TARGET, [probe(1, 40.0), probe(10, 150.0)], SETTINGS, capacity_mbps=200.0)
    entry = entry_from_advice(result, KEY, time.time(), "settled")
    assert entry is not None
    PathStore(str(tmp_path)).put(replace(entry, changed=changed))
    return AdviceMemory(str(tmp_path))


def test_no_entry_is_said_so(tmp_path: Path) -> None:
    memory = AdviceMemory(str(tmp_path))
    assert memory.lookup(TARGET, SETTINGS, 3600.0, False, None) is None
    assert memory.no_answer == "has no entry for that path" and not memory.changed


def test_an_entry_that_cannot_answer_says_why(tmp_path: Path) -> None:
    memory = stored(tmp_path, changed=True)
    assert memory.lookup(TARGET, SETTINGS, 3600.0, False, None) is None
    assert "cannot answer" in memory.no_answer and "changed" in memory.no_answer, \
        memory.no_answer
    assert memory.changed  # advise's hint then names a probe, not a transfer
    # The same entry, not marked: it answers.
    assert stored(tmp_path / "b", changed=False).lookup(TARGET, SETTINGS, 3600.0, False,
                                                        None) is not None

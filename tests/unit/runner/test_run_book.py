"""`tamebpf run`'s follow spec lives in the process (runner/stores.py
MemoryBook, no file): a spec it removes is gone. When the scout's ACKs and
the first seconds gave no capacity, the run removes its spec to hold every
stream at the target; before, FollowBook.remove found no file to change,
so the run went on following and added its "held at the target" note at
every step."""

from __future__ import annotations

import time

from tamebpf.cap.book import FollowSpec
from tamebpf.paths.entry import PathKey
from tamebpf.runner.stores import MemoryBook

KEY = PathKey("198.18.3.2/32", "tb-snd", "cubic")


def spec(cgroup: str, dest: str) -> FollowSpec:
    return FollowSpec(cgroup, dest, KEY, 0.1, "198.18.3.2", time.time(), target_mbps=8.0)


def test_a_removed_spec_is_gone_and_the_others_stay() -> None:
    book = MemoryBook()
    book.put(spec("/tamebpf-run-1", "0.0.0.0/0"))
    book.put(spec("/tamebpf-run-1", "::/0"))
    assert book.remove("/tamebpf-run-1/", "0.0.0.0/0")  # the cgroup as a path names it too
    assert [s.dest for s in book.specs()] == ["::/0"]
    assert not book.remove("/tamebpf-run-1", "0.0.0.0/0")
    assert book.remove("/tamebpf-run-1", "::/0") and book.specs() == []

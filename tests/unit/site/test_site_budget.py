"""The site's budget: the newest usable fit any node holds for the path."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from tamebpf.model import Settings
from tamebpf.site.budget import pick
from tests.unit.paths.test_paths_store import an_entry

S = Settings(max_impact=0.10)


def test_the_newest_entry_sets_the_budget_ties_by_node_name() -> None:
    now = time.time()
    own = an_entry(now - 600)
    theirs = an_entry(now - 60)
    b = pick(own, [("zeta", theirs), ("alpha", theirs)], S, now)
    assert b is not None and b.node == "alpha", b
    assert b.streams >= 1 and b.mbps > 0 and b.curve[0].streams == 1
    one, two = b.curve[0], b.curve[1]
    assert b.impact_at(one.throughput / 2) == one.impact
    assert b.impact_at((one.throughput + two.throughput) / 2) == \
        pytest.approx((one.impact + two.impact) / 2)
    assert b.impact_at(1e9) == b.curve[-1].impact
    mine = pick(own, [("zeta", replace(theirs, when=own.when))], S, now)
    assert mine is not None and mine.node is None, "this node's own first among equals"


def test_changed_old_or_curveless_entries_are_passed_over() -> None:
    now = time.time()
    good = an_entry(now - 900)
    changed = replace(an_entry(now - 10), changed=True)
    old = an_entry(now - 7200)
    b = pick(None, [("a", changed), ("b", old), ("c", good)], S, now)
    assert b is not None and b.node == "c", b
    assert pick(None, [("a", changed), ("b", old)], S, now) is None
    assert pick(None, [], S, now) is None

"""A node's pace target from its share of the site's budget, step by step,
with a stand-in for the site's Prometheus (the real one:
tests/integration/test_site.py)."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tamebpf.site.query import NodeOnPath, SiteDataError, SiteView
from tamebpf.site.share import SiteShare

T0 = 1_800_000_000.0
EVERY = 2.0  # the scrape interval the samples show


class Site:
    """What the stand-in answers: per node, its streams (None: gone), and
    how long ago it was last scraped; or an error to raise."""

    def __init__(self, **streams: int | None) -> None:
        self.streams = streams
        self.age = 1.0
        self.error: Exception | None = None
        self.asked = 0

    def __call__(self, now: float) -> SiteView:
        self.asked += 1
        if self.error is not None:
            raise self.error
        nodes = {n: NodeOnPath(n, s, 10.0 * s, None) for n, s in self.streams.items()
                 if s is not None}
        return SiteView(nodes, EVERY, {n: now - self.age for n in nodes})


def share(site: Site) -> SiteShare:
    return SiteShare("a", "198.18.3.0/24", "send", site)


def test_two_nodes_with_demand_get_half_each_and_the_local_advice_caps_it() -> None:
    s = share(Site(a=8, b=8))
    d = s.step(T0, 120.0, 100.0)
    assert d is not None and d.site and d.target_mbps == 60.0 and d.nodes == ("a", "b"), d
    assert "1 other node with demand on 198.18.3.0/24 (send)" in d.why, d.why
    assert "this node 60.0 of the site's 120.0 Mbit/s" in d.why
    s2 = share(Site(a=8, b=8))
    low = s2.step(T0, 120.0, 40.0)
    assert low is not None and low.target_mbps == 40.0 and "(its local advice)" in low.why


def test_no_decision_before_a_scrape_interval() -> None:
    site = Site(a=8)
    s = share(site)
    assert s.step(T0, 100.0, 100.0) is not None
    assert s.step(T0 + 1.0, 100.0, 100.0) is None and site.asked == 1
    assert s.step(T0 + EVERY, 100.0, 100.0) is not None and site.asked == 2


def test_small_moves_keep_the_target_new_nodes_change_it() -> None:
    site = Site(a=8, b=8)
    s = share(site)
    first = s.step(T0, 120.0, 200.0)
    again = s.step(T0 + EVERY, 124.0, 200.0)  # the budget moved 3%: the same target
    assert first is not None and again is first
    site.streams["c"] = 4
    third = s.step(T0 + 2 * EVERY, 124.0, 200.0)
    assert third is not None and third.target_mbps == pytest.approx(124.0 / 3), third


def test_a_quiet_node_keeps_its_share_a_while_a_gone_one_at_once() -> None:
    site = Site(a=8, b=8)
    s = share(site)
    s.step(T0, 120.0, 200.0)
    site.streams["b"] = 0  # between two files
    t = T0
    for _ in range(3):
        t += EVERY
        d = s.step(t, 120.0, 200.0)
        assert d is not None and d.target_mbps == 60.0, d
    t += 2 * EVERY
    d = s.step(t, 120.0, 200.0)
    assert d is not None and d.target_mbps == 120.0 and d.nodes == ("a",), d
    site.streams["b"] = 8
    s.step(t + EVERY, 120.0, 200.0)
    site.streams["b"] = None  # its export stopped: its series went stale
    d = s.step(t + 2 * EVERY, 120.0, 200.0)
    assert d is not None and d.target_mbps == 120.0, d


@pytest.mark.parametrize(("fault", "said"), [
    (OSError("Connection refused"), "cannot ask the site's Prometheus: Connection refused"),
    (SiteDataError("node 'b': streams -3.0 is not a stream count"), "streams -3.0"),
    ("stale", "the site's data is 30 s old, more than 3 scrape intervals (6 s)"),
    ("no budget", "no node's path memory has a fit for 198.18.3.0/24"),
])
def test_faults_fall_back_to_the_local_advice_with_one_line(
        fault: object, said: str, caplog: pytest.LogCaptureFixture) -> None:
    site = Site(a=8, b=8)
    s = share(site)
    assert s.step(T0, 120.0, 100.0).target_mbps == 60.0  # type: ignore[union-attr]
    budget: float | None = 120.0
    if isinstance(fault, Exception):
        site.error = fault
    elif fault == "stale":
        site.age = 30.0
    else:
        budget = None
    with caplog.at_level(logging.INFO, logger="tamebpf"):
        for k in range(1, 4):
            d = s.step(T0 + k * EVERY, budget, 100.0)
            assert d is not None and not d.site and d.target_mbps == 100.0, d
            assert said in d.why, d.why
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and said in warnings[0].getMessage(), caplog.text
        site.error, site.age = None, 1.0
        back = s.step(T0 + 10 * EVERY, 120.0, 100.0)
    assert back is not None and back.site and back.target_mbps == 60.0, back
    assert "answers again" in caplog.text


@given(budget=st.floats(min_value=0, max_value=1e5), local=st.floats(min_value=0, max_value=1e5),
       others=st.lists(st.integers(min_value=0, max_value=64), max_size=6))
def test_the_target_is_never_above_the_local_advice(budget: float, local: float,
                                                      others: list[int]) -> None:
    site = Site(a=4, **{f"n{k}": n for k, n in enumerate(others)})
    d = share(site).step(T0, budget, local)
    assert d is not None and d.target_mbps <= local * (1 + 1e-9) + 1e-9
    assert d.target_mbps <= budget * (1 + 1e-9) + 1e-9

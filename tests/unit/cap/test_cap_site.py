"""Following pace caps of a site (`cap set --follow --site`): the agent holds
each at this node's share of the site's budget, from the caps file and the
command line to the kernel's target, with the site's Prometheus a stand-in
(the real one: tests/integration/test_site.py)."""

from __future__ import annotations

import functools
import time
from pathlib import Path

import pytest

from tamebpf.cap.book import FollowBook, FollowSpec
from tamebpf.cap.follow import Follower
from tamebpf.cap.load import parse_capfile
from tamebpf.common.errors import UsageError
from tamebpf.paths.store import PathStore
from tamebpf.site.budget import Budget
from tamebpf.site.follow import SiteFollow
from tamebpf.site.query import NodeOnPath, SiteView
from tests.unit.cap.test_cap_follow import Kernel, cap
from tests.unit.cap.test_scout_acks import KEY

URL = "http://prometheus.example:9090"
SPEC = FollowSpec("/dtn", "198.18.3.2/32", KEY, 0.1, "198.18.3.2", 0.0, site=URL)


def others(streams: dict[str, int]) -> object:
    def view(url: str, dest: str, direction: str, now: float, timeout: float) -> SiteView:
        assert (url, dest, direction) == (URL, "198.18.3.0/24", "send")
        return SiteView({n: NodeOnPath(n, s, 1.0, None) for n, s in streams.items()}, 2.0,
                        {n: now - 1 for n in streams})
    return view


def budget(*_: object) -> Budget:
    return Budget(6, 90.0, "b", ())


def follower(tmp: Path, streams: dict[str, int], node: str | None = "a") -> tuple[
        Follower, Kernel]:
    book = FollowBook(str(tmp))
    book.put(SPEC)
    kernel = Kernel()
    f = Follower(book, PathStore(str(tmp)), kernel, node=node)
    f.sites.make = functools.partial(SiteFollow, view_of=others(streams), budget_of=budget)
    return f, kernel


def test_the_cap_is_held_at_this_nodes_share(tmp_path: Path) -> None:
    f, kernel = follower(tmp_path, {"a": 4, "b": 8, "c": 2})
    f.step([], [cap(100.0)], now=10.0, now_wall=time.time())
    assert kernel.follow[7] == (0, int(30.0 * 1e6 / 8)), "a third of 90, no scout"
    spec = f.book.specs()[0]
    assert spec.target_mbps == pytest.approx(30.0) and spec.change_count == 1, spec
    assert "2 other nodes with demand" in spec.changes[-1].why, spec.changes[-1]


def test_the_caps_own_rate_is_its_local_advice(tmp_path: Path) -> None:
    f, kernel = follower(tmp_path, {"b": 8})
    f.step([], [cap(20.0)], now=10.0, now_wall=time.time())
    assert kernel.follow[7] == (0, int(20.0 * 1e6 / 8)), "never above the cap's own 20"


def test_without_a_node_name_it_says_what_to_do(tmp_path: Path) -> None:
    f, kernel = follower(tmp_path, {"b": 8}, node=None)
    f.step([], [cap(100.0)], now=10.0, now_wall=time.time())
    assert kernel.follow == {}
    assert "give --node" in (f.book.specs()[0].note or "")


def test_a_caps_file_takes_site_and_node_for_following_pace_caps_only(tmp_path: Path) -> None:
    entry = ('[[cap]]\ncgroup = "dtn"\ndest = "198.18.3.0/24"\nmode = "pace"\n'
             'auto = "198.18.3.2"\nmax_impact = "10%"\ncongestion = "cubic"\nfollow = true\n')
    specs = parse_capfile(entry + f'site = "{URL}"\nnode = "dtn1"\n', "caps.toml")
    assert (specs[0].site, specs[0].node) == (URL, "dtn1")
    for bad, said in [(entry.replace("follow = true\n", "") + f'site = "{URL}"\n',
                       "site goes with a following pace cap"),
                      (entry + 'site = "ftp://x"\n', "not an http or https URL"),
                      (entry + 'node = "dtn1"\n', "node goes with site"),
                      (entry + f'site = "{URL}"\nnode = "a b"\n', "not a node name")]:
        with pytest.raises(UsageError, match=said):
            parse_capfile(bad, "caps.toml")

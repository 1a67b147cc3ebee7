"""advise --site: this node's count is what the others leave of the site's."""

from __future__ import annotations

from tamebpf.site.advice import site_advice
from tamebpf.site.query import NodeOnPath, SiteView


def view(**streams: int) -> SiteView:
    return SiteView({n: NodeOnPath(n, s, 10.0 * s, None) for n, s in streams.items()}, 2.0, {})


def test_the_others_streams_are_subtracted_from_the_sites_count() -> None:
    a = site_advice(8, view(me=3, b=4, c=2, d=0), "me", "198.18.3.0/24", "send")
    assert (a.streams, a.others_streams, [n.node for n in a.others]) == (2, 6, ["b", "c"])
    assert a.text() == "site: 2 other nodes run 6 streams to 198.18.3.0/24; this node: " \
        "2 of the site's 8"
    j = a.to_json()
    assert (j["site_streams"], j["others_streams"], j["streams"]) == (8, 6, 2)
    assert [n["node"] for n in j["nodes"]] == ["b", "c"]


def test_a_site_at_its_count_leaves_one_stream_and_says_so() -> None:
    a = site_advice(4, view(b=6), "me", "198.18.3.0/24", "receive")
    assert a.streams == 1
    assert a.text().startswith("site: 1 other node runs 6 streams from 198.18.3.0/24; ")
    assert "one stream, the least" in a.text()


def test_alone_on_the_path_this_node_gets_the_sites_count() -> None:
    a = site_advice(5, view(me=5), "me", "198.18.3.0/24", "send")
    assert a.streams == 5 and a.text() == ("site: no other node runs streams to "
                                 "198.18.3.0/24; this node: 5 of the site's 5")

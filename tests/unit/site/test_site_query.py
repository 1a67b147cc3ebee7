"""What the site's Prometheus says the nodes run, checked: query results as
its HTTP API gives them (the real server: tests/integration/test_site.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tamebpf.site.query import SiteDataError, parse, path_query

NOW = 1_800_000_000.0


def series(node: Any, field: str, value: Any) -> dict[str, Any]:
    return {"metric": {"__name__": f"tamebpf_site_path_{field}", "node": node,
                       "dest": "198.18.3.0/24", "direction": "send", "instance": "x:9477"},
            "value": [NOW, value if isinstance(value, str) else str(value)]}


def clock(node: str, every_s: float = 2.0, last_s: float = 1.0, n: int = 5) -> dict[str, Any]:
    return {"metric": {"__name__": "tamebpf_build_info", "node": node},
            "values": [[NOW - last_s - every_s * k, "1"] for k in reversed(range(n))]}


GOOD = [series("a", "streams", 4), series("a", "goodput_bytes_per_second", 5e6),
        series("a", "pace_target_bytes_per_second", 6.25e6),
        series("b", "streams", 0), series("b", "goodput_bytes_per_second", 0)]


def test_the_nodes_their_streams_rates_and_the_scrape_interval() -> None:
    v = parse(GOOD, [clock("a"), clock("b", last_s=1.5)], NOW)
    assert set(v.nodes) == {"a", "b"}
    a, b = v.nodes["a"], v.nodes["b"]
    assert (a.streams, a.goodput_mbps, a.pace_target_mbps) == (4, 40.0, 50.0), a
    assert (b.streams, b.pace_target_mbps) == (0, None), b
    assert v.interval_s == pytest.approx(2.0)
    assert v.age_s("a", NOW) == pytest.approx(1.0)
    assert v.age_s("c", NOW) == pytest.approx(1.0), "not scraped itself: the newest node's"


def test_a_single_scrape_gives_prometheus_default_interval() -> None:
    assert parse(GOOD, [clock("a", n=1)], NOW).interval_s == 15.0
    assert parse([], [], NOW).age_s("a", NOW) is None


@pytest.mark.parametrize(("bad", "said"), [
    (series("b", "streams", -3), "node 'b': streams -3.0 is not a stream count"),
    (series("b", "streams", 2.5), "streams 2.5 is not a stream count"),
    (series("b", "streams", 1e9), "is not a stream count"),
    (series("b", "goodput_bytes_per_second", "NaN"), "goodput nan is not a rate"),
    (series("b", "goodput_bytes_per_second", "+Inf"), "goodput inf is not a rate"),
    (series("b", "pace_target_bytes_per_second", 0), "pace_target 0.0 is not a rate"),
    (series("b", "streams", "many"), "streams 'many'"),
    (series("b\n;drop", "streams", 1), "is not a node's name"),
    (series(None, "streams", 1), "node label None"),
    (series("a", "streams", 3), "node 'a' has two streams series"),
    ({"metric": "x", "value": 1}, "is not a Prometheus series"),
    ("garbage", "is not a Prometheus series"),
])
def test_an_absurd_or_broken_value_is_named(bad: Any, said: str) -> None:
    with pytest.raises(SiteDataError) as err:
        parse([*GOOD, bad], [clock("a")], NOW)
    assert said in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_many_bad_values_are_named_in_one_line() -> None:
    bad = [series(f"n{k}", "streams", -1) for k in range(6)]
    with pytest.raises(SiteDataError) as err:
        parse(bad, [], NOW)
    text = str(err.value)
    assert text.count("is not a stream count") == 3 and "(and 3 more)" in text, text


def test_a_clock_from_the_future_is_refused() -> None:
    with pytest.raises(SiteDataError, match="not a time before now"):
        parse(GOOD, [clock("a", last_s=-3600)], NOW)


def test_the_query_selects_the_path_and_direction() -> None:
    q = path_query("198.18.3.0/24", "receive")
    assert 'dest="198.18.3.0/24"' in q and 'direction="receive"' in q
    assert "tamebpf_site_path_(streams|goodput_bytes_per_second|" in q

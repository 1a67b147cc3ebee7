"""Reading other nodes' path entries from a Prometheus query result
(paths/remote.py); the real Prometheus is in tests/integration/test_paths.py."""

from __future__ import annotations

from tamebpf.paths.remote import parse_result, remote_query
from tests.unit.paths.test_paths_store import an_entry


def series(when: float, instance: str, **labels: str) -> dict[str, object]:
    e = an_entry()
    metric = {"dest": "198.18.3.2/32", "netns": "host", "congestion": "cubic",
              "source": "probe", "probes": "settled", "fit": e.fit.to_json(),
              "instance": instance, **labels}
    return {"metric": metric, "value": [when + 1, str(when)]}


def test_newest_first_and_unreadable_series_refused_naming_node_and_field() -> None:
    got = parse_result([series(100.0, "a:9477"), series(300.0, "b:9477"),
                        series(200.0, "c:9477", fit="{not json"),
                        series(250.0, "d:9477", source="gossip"),
                        {"metric": {}, "value": [1, "1"]}], "198.18.3.2/32", "cubic", 1000.0)
    assert [(r.node, r.entry.when) for r in got.entries] == [("b:9477", 300.0),
                                                              ("a:9477", 100.0)]
    assert [(node, r.field) for node, r in got.refused] == [
        ("c:9477", "fit"), ("d:9477", "source"), ("?", "instance")]
    e = got.entries[0].entry
    assert e.key.dest == "198.18.3.2/32" and e.fit == an_entry().fit
    assert e.capacity_mbps == an_entry().fit.capacity


def test_the_query_asks_for_one_path_and_leaves_changed_ones_out() -> None:
    q = remote_query("2001:db8::1/128", "bbr")
    assert q.count('dest="2001:db8::1/128", congestion="bbr"') == 3
    assert "unless" in q and "tamebpf_path_changed" in q and "== 1" in q


def test_a_node_is_named_by_its_node_label_else_its_instance() -> None:
    got = parse_result([series(100.0, "10.0.0.5:9477", node="dtn1"),
                        series(200.0, "10.0.0.6:9477"),
                        series(300.0, "10.0.0.7:9477", node="x" * 5000)],
                       "198.18.3.2/32", "cubic", 1000.0)
    assert [r.node for r in got.entries] == ["10.0.0.6:9477", "dtn1"], got.entries
    assert [(node, r.field) for node, r in got.refused] == [("?", "node")], got.refused


def test_the_query_joins_a_nodes_series_on_its_node_too() -> None:
    q = remote_query("198.18.3.2/32", "cubic")
    assert q.count("on (instance, job, node, dest, netns, congestion, direction)") == 2, q

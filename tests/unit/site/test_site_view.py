"""`tamebpf site`'s table and JSON, from a view as the site's Prometheus
gives it."""

from __future__ import annotations

import json

import pytest

from tamebpf.model.advice import CurvePoint
from tamebpf.present.site import SitePath, render, to_json
from tamebpf.site.budget import Budget
from tamebpf.site.query import NodeOnPath, SiteView

NOW = 1_800_000_000.0
VIEW = SiteView({"a": NodeOnPath("a", 8, 10.1, 10.1), "b": NodeOnPath("b", 8, 9.8, 10.1)}, 2.0,
                {"a": NOW - 1, "b": NOW - 2})
CURVE = tuple(CurvePoint(n, 10.0 * n, 0.05 * (n - 1)) for n in range(1, 33))


def test_each_path_its_nodes_budget_and_impact() -> None:
    p = SitePath("198.18.3.0/24", "send", VIEW, Budget(2, 20.2, "a", CURVE))
    assert (p.streams, round(p.goodput_mbps, 1)) == (16, 19.9)
    assert p.impact == pytest.approx(0.05 * 0.99), "between 1 and 2 streams' 10 and 20"
    text = render("http://prom:9090", "a", [p])
    assert "198.18.3.0/24               send      2       16     19.9       2     20.2     4.9%" \
        in text, text
    assert "  a (this node): 8 streams, 10.1 Mbit/s, paced at 10.1 Mbit/s" in text
    assert "budget from a's fit" in text
    out = json.loads(json.dumps(to_json("http://prom:9090", "a", [p], NOW)))
    path = out["paths"][0]
    assert (path["budget"]["streams"], path["budget"]["from_node"]) == (2, "a")
    assert [n["node"] for n in path["nodes"]] == ["a", "b"] and path["nodes"][1]["age_s"] == 2.0


def test_no_budget_and_no_paths_say_why() -> None:
    p = SitePath("198.18.3.0/24", "receive", VIEW, None, "the nodes' fits: timed out")
    text = render("http://prom:9090", "z", [p])
    assert " recv " in text and "no budget: the nodes' fits: timed out" in text
    assert p.impact is None
    assert "is 'tamebpf export' running" in render("http://prom:9090", "z", [])

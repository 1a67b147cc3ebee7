"""export as one node of a site: the label node on every series
(docs/metrics.md)."""

from __future__ import annotations

from tests.unit.present.test_export import Samples, documented, every_series


def without_node(samples: Samples) -> Samples:
    return {(name, tuple(kv for kv in labels if kv[0] != "node")): v
            for (name, labels), v in samples.items()}


def test_every_family_carries_the_node_and_nothing_else_changes() -> None:
    plain, labelled = every_series(), every_series(node="dtn1")
    names = {name for name, _ in labelled}
    assert names == documented(), (
        f"expected a sample of every metric of docs/metrics.md, missing "
        f"{sorted(documented() - names)}")
    unlabelled = sorted({name for name, labels in labelled if ("node", "dtn1") not in labels})
    assert unlabelled == [], f"series without node=\"dtn1\": {unlabelled}"
    assert without_node(labelled).keys() == plain.keys(), (
        "the node label should be the only difference")
    assert not [k for k in plain if any(name == "node" for name, _ in k[1])], (
        "a collector without a node name adds no node label")

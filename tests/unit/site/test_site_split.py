"""The site budget's split: examples, and its properties over any nodes,
budgets and limits."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tamebpf.site.split import split

NAMES = st.text(alphabet="abcdefgh0123-.", min_size=1, max_size=6)
RATES = st.floats(min_value=0.0, max_value=1e11, allow_nan=False)


def test_equal_shares_without_limits() -> None:
    assert split(120.0, ["b", "a", "c"]) == {"a": 40.0, "b": 40.0, "c": 40.0}


def test_a_limited_node_leaves_the_rest_to_the_others() -> None:
    assert split(120.0, ["a", "b", "c"], {"a": 10.0}) == {"a": 10.0, "b": 55.0, "c": 55.0}


def test_limits_above_the_share_do_not_matter() -> None:
    assert split(100.0, ["a", "b"], {"a": 80.0, "b": 70.0}) == {"a": 50.0, "b": 50.0}


def test_no_nodes_no_shares_and_a_bad_budget_is_refused() -> None:
    assert split(100.0, []) == {}
    with pytest.raises(ValueError):
        split(-1.0, ["a"])


@given(budget=RATES, nodes=st.lists(NAMES, max_size=12),
       limits=st.dictionaries(NAMES, RATES, max_size=12))
def test_shares_never_sum_above_the_budget_nor_any_above_its_limit(
        budget: float, nodes: list[str], limits: dict[str, float]) -> None:
    shares = split(budget, nodes, limits)
    assert set(shares) == set(nodes)
    assert sum(shares.values()) <= budget * (1 + 1e-9) + 1e-6, shares
    for n, s in shares.items():
        assert s >= 0.0
        if n in limits:
            assert s <= limits[n] * (1 + 1e-9) + 1e-6, (n, s, limits[n])


@given(budget=RATES, nodes=st.lists(NAMES, min_size=1, max_size=12),
       limits=st.dictionaries(NAMES, RATES, max_size=12))
def test_the_budget_is_used_unless_every_node_is_at_its_limit(
        budget: float, nodes: list[str], limits: dict[str, float]) -> None:
    shares = split(budget, nodes, limits)
    if any(n not in limits for n in shares):
        assert sum(shares.values()) == pytest.approx(budget, rel=1e-9, abs=1e-6)
    # no node under its limit gets less than one at its limit or without one
    free = [s for n, s in shares.items() if n not in limits or s < limits[n] * (1 - 1e-9)]
    if free:
        assert max(free) - min(free) <= max(free) * 1e-9 + 1e-6, shares


@given(budget=RATES, nodes=st.lists(NAMES, max_size=12),
       limits=st.dictionaries(NAMES, RATES, max_size=12))
def test_every_node_computes_the_same_split_whatever_the_order(
        budget: float, nodes: list[str], limits: dict[str, float]) -> None:
    assert split(budget, nodes, limits) == split(budget, list(reversed(nodes)), limits)

"""A site budget's shares among the nodes that want it.

Pure: every node runs split() on the same query answer and gets the same
shares, with no leader and nothing written anywhere but its own export.
Equal shares, water-filled: a node held under its share by a limit of its
own (its local advice, where known) leaves the rest to the others, in
equal parts. Nodes are taken in name order, so that float rounding is the
same on every node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def split(budget: float, nodes: Iterable[str],
          limits: Mapping[str, float] | None = None) -> dict[str, float]:
    """Each node's share of `budget` (>= 0): equal, none above its limit
    (`limits`: per node, None or absent: no limit of its own); what the
    limited nodes leave goes to the others. The shares sum to at most the
    budget, and to the budget unless every node is at its limit."""
    if budget < 0:
        raise ValueError(f"a site budget must be at least 0, got {budget!r}")
    limits = limits or {}
    left = sorted(set(nodes))
    shares: dict[str, float] = {}
    remaining = float(budget)
    # Fix the nodes whose limit is under an equal part of what remains,
    # smallest limit first; the rest split what they leave.
    while left:
        part = remaining / len(left)
        held = [n for n in left if n in limits and limits[n] < part]
        if not held:
            for n in left:
                shares[n] = part
            break
        n = min(held, key=lambda x: (limits[x], x))
        shares[n] = max(0.0, limits[n])
        remaining = max(0.0, remaining - shares[n])
        left.remove(n)
    return shares

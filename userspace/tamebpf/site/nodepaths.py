"""What one node runs on each site path: its groups with open flows,
summed per destination prefix and direction (prefix.py). The exporter
publishes these rows (tamebpf_site_path_*), and the site's other nodes
read them back from Prometheus.

Pure: groups in, rows out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tamebpf.groups.caps import CapLimit
from tamebpf.groups.group import Group, GroupKey
from tamebpf.site.prefix import site_prefix


@dataclass(frozen=True)
class NodePath:
    """One site path as this node runs it."""

    dest: str  # the destination prefix, e.g. "198.18.3.0/24"
    direction: str  # "send" or "receive"
    streams: int
    goodput_bps: float | None  # bit/s; None when no group has an interval yet
    # The pace caps' targets, bit/s, each cap once; None when no group is paced.
    pace_target_bps: float | None


def node_paths(groups: Iterable[Group]) -> list[NodePath]:
    """The groups with open flows, summed per site path, sorted by path.
    A group whose address is no IP address has no site path and is left out.

    A pace cap's streams share its target whichever groups they are in (two
    hosts of one /24 under one cap are two groups): each cap's target counts
    once per path. A cap that covers several paths counts in each."""
    streams: dict[tuple[str, str], int] = {}
    goodput: dict[tuple[str, str], float] = {}
    pacers: dict[tuple[str, str], dict[CapLimit | GroupKey, float]] = {}
    for g in groups:
        if g.flows <= 0:
            continue
        try:
            key = (site_prefix(g.remote_addr), g.direction)
        except ValueError:
            continue
        streams[key] = streams.get(key, 0) + g.streams
        if g.goodput_bps is not None:
            goodput[key] = goodput.get(key, 0.0) + g.goodput_bps
        if g.paced_bps is not None:
            # A group that does not name its cap counts on its own.
            pacers.setdefault(key, {})[g.pacer or g.key] = g.paced_bps
    rows = []
    for key, n in sorted(streams.items()):
        targets = pacers.get(key)
        rows.append(NodePath(*key, n, goodput.get(key),
                             None if targets is None else sum(targets.values())))
    return rows

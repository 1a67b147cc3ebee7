"""`advise --site`: the model's count is the site's on the path; this node
is advised what the other nodes leave of it (what they run now, as the
site's Prometheus holds it), one stream at least."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tamebpf.common.words import count
from tamebpf.site.query import NodeOnPath, SiteView


@dataclass(frozen=True)
class SiteAdvice:
    dest: str  # the site path's prefix
    direction: str
    node: str  # this node
    site_streams: int  # the model's count for the site as a whole
    others: tuple[NodeOnPath, ...]  # the other nodes running streams on the path
    streams: int  # this node's

    @property
    def others_streams(self) -> int:
        return sum(n.streams for n in self.others)

    def text(self) -> str:
        """E.g. 'site: 2 other nodes run 6 streams to 198.18.3.0/24; this
        node: 2 of the site's 8'."""
        way = "from" if self.direction == "receive" else "to"
        others = f"no other node runs streams {way} {self.dest}" if not self.others else (
            f"{count(len(self.others), 'other node')} run{'s' if len(self.others) == 1 else ''}"
            f" {count(self.others_streams, 'stream')} {way} {self.dest}")
        said = f"site: {others}; this node: {self.streams} of the site's {self.site_streams}"
        if self.others_streams >= self.site_streams:
            said += " (the others run the site's count already: one stream, the least)"
        return said

    def to_json(self) -> dict[str, Any]:
        return {"dest": self.dest, "direction": self.direction, "node": self.node,
                "site_streams": self.site_streams, "others_streams": self.others_streams,
                "streams": self.streams,
                "nodes": [{"node": n.node, "streams": n.streams, "goodput_mbps": n.goodput_mbps}
                          for n in self.others]}


def site_advice(site_streams: int, view: SiteView, node: str, dest: str,
                direction: str) -> SiteAdvice:
    others = tuple(sorted((n for name, n in view.nodes.items()
                           if name != node and n.streams > 0), key=lambda n: n.node))
    left = site_streams - sum(n.streams for n in others)
    return SiteAdvice(dest, direction, node, site_streams, others, max(1, left))

"""Following pace caps of a site (`cap set --follow --site URL`): the
agent holds each at this node's share of the site's advised rate on its
path (site/follow.py), every stream at it, no scout: the share is the
site's reading of the path, not one stream's. The cap's own rate (the
advisor's when it was set) is its local advice, which no share exceeds."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

from tamebpf.cap.book import FollowBook, FollowChange, FollowSpec
from tamebpf.common.logs import log
from tamebpf.common.records import Cap
from tamebpf.common.units import mbps, pace_bytes_per_s
from tamebpf.model import Settings
from tamebpf.paths.store import PathStore
from tamebpf.site.follow import SiteFollow


class SetFollow(Protocol):
    def set_follow(self, cap_id: int, scout_cookie: int, rate_bytes_per_s: int) -> None: ...


class SiteCaps:
    def __init__(self, book: FollowBook, store: PathStore, kernel: SetFollow,
                 node: str | None, make: Callable[..., SiteFollow] = SiteFollow) -> None:
        self.book, self.store, self.kernel, self.node = book, store, kernel, node
        self.make = make  # a SiteFollow (tests: one with their own site)
        self.follows: dict[tuple[str, str], SiteFollow] = {}
        self.changes = 0

    def forget(self, keep: set[tuple[str, str]]) -> None:
        """Drop the state of caps no longer in the book."""
        for gone in set(self.follows) - keep:
            del self.follows[gone]

    def step(self, spec: FollowSpec, cap: Cap, now_wall: float) -> None:
        assert spec.site is not None
        node = spec.node or self.node
        if node is None:
            note = "no node name for the site: give --node to 'cap set' or to 'tamebpf export'"
            if spec.note != note:
                self.book.update(spec.ident, lambda s: replace(s, updated=now_wall, note=note))
            return
        follow = self.follows.get(spec.ident)
        if follow is None or (follow.url, follow.node) != (spec.site, node):
            follow = self.make(spec.site, node, Settings(max_impact=spec.max_impact),
                               self.store)
            follow.start(spec.path, spec.path.dest.split("/")[0])
            self.follows[spec.ident] = follow
        before = follow.last
        d = follow.step(now_wall, mbps(cap.rate_bytes_per_s))
        if d is None or (before is not None and d.target_mbps == before.target_mbps):
            return
        self.kernel.set_follow(cap.id, 0, pace_bytes_per_s(d.target_mbps))
        change = FollowChange(now_wall, spec.target_mbps, d.target_mbps, None, d.why)
        self.book.update(spec.ident, lambda s: replace(
            s, updated=now_wall, note=None if d.site else d.why).changed(change))
        self.changes += 1
        log.info("follow: %s to %s: target %.2f Mbit/s (%s)", spec.cgroup, spec.dest,
                 d.target_mbps, d.why, extra={"event": "site_target", "to_mbps": d.target_mbps,
                                             "nodes": list(d.nodes)})

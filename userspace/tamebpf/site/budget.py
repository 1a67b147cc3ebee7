"""The site's budget on a path: the model's advice for the site as a whole,
from the newest fit any node holds for the path (this node's path memory,
or another's as the site's Prometheus exports it: paths/remote.py, checked
as `advise --paths-from` checks it). Every node picks the same entry from
the same answer (the newest, ties by node name), so they agree on the
budget without talking to each other."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from tamebpf.common.logs import log
from tamebpf.model import ModelInputError, Settings
from tamebpf.model.advice import CurvePoint
from tamebpf.paths import remote
from tamebpf.paths.entry import PathEntry, PathKey
from tamebpf.paths.recall import recall_curve, usable
from tamebpf.paths.store import PathStore

# A fit older than this is not the path's now (advise's --max-age).
MAX_AGE_S = 3600.0


@dataclass(frozen=True)
class Budget:
    """The site's advice: `streams` in all at `mbps`, from `node`'s entry
    (None: this node's own), and the curve it rests on."""

    streams: int
    mbps: float
    node: str | None
    curve: tuple[CurvePoint, ...]

    def impact_at(self, mbps: float) -> float | None:
        """The curve's impact where its throughput is `mbps`, interpolated
        between counts (None: no curve): the site's streams are paced, so
        what they take is their rate, not their count. At or under one
        stream's throughput the impact is none, as the curve's baseline."""
        points = sorted(self.curve, key=lambda c: c.streams)
        if not points:
            return None
        if mbps <= points[0].throughput:
            return points[0].impact
        for a, b in zip(points, points[1:], strict=False):
            if mbps <= b.throughput:
                span = b.throughput - a.throughput
                return a.impact if span <= 0 else \
                    a.impact + (b.impact - a.impact) * (mbps - a.throughput) / span
        return points[-1].impact


def pick(own: PathEntry | None, others: Sequence[tuple[str, PathEntry]],
         settings: Settings, now: float) -> Budget | None:
    """The budget from the newest usable entry (ties by node name; this
    node's own first among equals), or None when none makes a curve."""
    ranked = sorted([*([("", own)] if own is not None else []), *others],
                    key=lambda x: (-x[1].when, x[0]))
    for node, entry in ranked:
        if usable(entry, now, MAX_AGE_S, True, None) is not None:
            continue
        try:
            curve, advice = recall_curve(entry, settings)
        except (ModelInputError, ValueError) as err:
            log.debug("site: %s's fit for %s makes no curve: %s", node or "our", entry.key.dest,
                      err)
            continue
        return Budget(advice.num_flows, advice.max_nondisruptive_thru, node or None, curve)
    return None


def site_budget(store: PathStore, key: PathKey, url: str, settings: Settings,
                timeout: float) -> Budget | None:
    """The budget for `key`'s path from this node's memory and the other
    nodes' entries at `url` (those it cannot read are left out, said at
    debug level: the budget falls back on what it has)."""
    now = time.time()
    own = store.newest(key)
    try:
        answer = remote.fetch(url, key.dest, key.congestion, now, timeout, key.direction)
        others = [(r.node, r.entry) for r in answer.entries]
    except (OSError, ValueError) as err:
        log.debug("site: other nodes' entries for %s not read: %s", key.dest, err)
        others = []
    return pick(own, others, settings, now)

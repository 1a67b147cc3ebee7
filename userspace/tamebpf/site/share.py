"""A node's pace target on one site path: its share of the site's advised
rate, decided at most once a scrape interval from what the site's
Prometheus says the other nodes run.

- The nodes with demand are this one and those that ran streams on the
  path within the last HOLD_INTERVALS scrapes (a node between two files
  keeps its share); a node whose series are gone (its export stopped, so
  Prometheus marked them stale) has none.
- Its share (split.py) is never above `local`, its own advice.
- Hysteresis: with the same nodes, a share that moved less than BAND of
  the budget keeps the target where it was, so two nodes do not chase
  each other's rounding.
- No answer, an answer no share can rest on (query.SiteDataError), data
  older than STALE_INTERVALS scrapes, or no budget: the local advice, with
  one log line as it falls back and one as the site answers again. The
  target is never lifted past the local advice because the site went
  quiet.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tamebpf.common.logs import log
from tamebpf.site.query import SiteDataError, SiteView
from tamebpf.site.split import split

HOLD_INTERVALS = 3
STALE_INTERVALS = 3
BAND = 0.05
# Until an answer shows the scrape interval: ask again after this long.
RETRY_S = 5.0


@dataclass(frozen=True)
class Decision:
    target_mbps: float
    site: bool  # False: the local advice (the site gave no share)
    nodes: tuple[str, ...]  # the nodes with demand, this one among them
    why: str  # one line: the share, or why the local advice


class SiteShare:
    """Decisions for node `node` on path (`dest`, `direction`); `fetch(now)`
    asks the site's Prometheus (query.fetch, bound to its URL and timeout)."""

    def __init__(self, node: str, dest: str, direction: str,
                 fetch: Callable[[float], SiteView]) -> None:
        self.node, self.dest, self.direction, self.fetch = node, dest, direction, fetch
        self.interval_s: float | None = None
        self.last: float | None = None  # when the last decision was made
        self.current: Decision | None = None
        self._demand: dict[str, float] = {}  # node -> when it last ran streams here
        self._fallen: str | None = None  # why the local advice, as last logged

    def due(self, now: float) -> bool:
        return self.last is None or now - self.last >= (self.interval_s or RETRY_S) * 0.99

    def step(self, now: float, budget_mbps: float | None, local_mbps: float) -> Decision | None:
        """A new decision, or None when the last is less than a scrape
        interval old (keep its target). `now`: unix time."""
        if not self.due(now):
            return None
        self.last = now
        try:
            view = self.fetch(now)
        except SiteDataError as err:
            return self._local(local_mbps, str(err))
        except OSError as err:
            return self._local(local_mbps, f"cannot ask the site's Prometheus: {err}")
        self.interval_s = view.interval_s
        age = view.age_s(self.node, now)
        limit = STALE_INTERVALS * view.interval_s
        if age is None or age > limit:
            old = "holds no scrape of any node" if age is None else f"is {age:.0f} s old"
            return self._local(local_mbps, f"the site's data {old}, more than "
                               f"{STALE_INTERVALS} scrape intervals ({limit:g} s)")
        if budget_mbps is None:
            return self._local(local_mbps, f"no node's path memory has a fit for {self.dest}")
        return self._shared(view, now, budget_mbps, local_mbps)

    def _shared(self, view: SiteView, now: float, budget: float, local: float) -> Decision:
        for n, x in view.nodes.items():
            if x.streams > 0:
                self._demand[n] = now
        hold = HOLD_INTERVALS * view.interval_s
        nodes = tuple(sorted({self.node} | {n for n in view.nodes if n != self.node
                                            and now - self._demand.get(n, -1e18) <= hold}))
        share = split(budget, nodes, {self.node: local})[self.node]
        if self._fallen is not None:
            log.info("site: %s (%s) answers again: the share, not the local advice",
                     self.dest, self.direction, extra={"event": "site_back", "dest": self.dest})
            self._fallen = None
        c = self.current
        if c is not None and c.site and c.nodes == nodes and \
                abs(share - c.target_mbps) <= BAND * budget:
            return c
        others = len(nodes) - 1
        self.current = Decision(share, True, nodes, (
            f"site: {others} other node{'s' if others != 1 else ''} with demand on {self.dest} "
            f"({self.direction}); this node {share:.1f} of the site's {budget:.1f} Mbit/s"
            + (" (its local advice)" if share < budget / len(nodes) * (1 - 1e-9) else "")))
        return self.current

    def _local(self, local: float, why: str) -> Decision:
        if self._fallen != why:
            if self._fallen is None:
                log.warning("site: %s (%s): the local advice, %.1f Mbit/s: %s", self.dest,
                            self.direction, local, why,
                            extra={"event": "site_fallback", "dest": self.dest})
            self._fallen = why
        self.current = Decision(local, False, (self.node,), f"the local advice: {why}")
        return self.current

"""A pace cap held at this node's share of the site's advised rate on its
path (share.py), for `run --site` and `cap set --follow --site`: the
cap's target is the share, not the path's own following.

The budget is the site's advice from the newest fit any node holds
(budget.py), read again every BUDGET_EVERY_S; the local advice, which no
share exceeds, is what the cap would pace at alone: path memory's advice
or the rate asked, or, with neither, the site's advice itself.
"""

from __future__ import annotations

from collections.abc import Callable

from tamebpf.common.defaults import PATHS_FROM_TIMEOUT_S
from tamebpf.model import Settings
from tamebpf.paths.entry import PathKey
from tamebpf.paths.store import PathStore
from tamebpf.site import query
from tamebpf.site.budget import Budget, site_budget
from tamebpf.site.prefix import site_prefix
from tamebpf.site.share import Decision, SiteShare

BUDGET_EVERY_S = 30.0

# What the site's Prometheus is asked, as functions (tests pass their own):
# (url, dest, direction, now, timeout) -> the path's view, and
# (store, key, url, settings, timeout) -> the site's budget.
ViewOf = Callable[[str, str, str, float, float], query.SiteView]
BudgetOf = Callable[[PathStore, PathKey, str, Settings, float], "Budget | None"]


class SiteFollow:
    def __init__(self, url: str, node: str, settings: Settings, store: PathStore,
                 timeout: float = PATHS_FROM_TIMEOUT_S, view_of: ViewOf = query.fetch,
                 budget_of: BudgetOf = site_budget) -> None:
        self.url, self.node, self.settings, self.store = url, node, settings, store
        self.timeout = timeout
        self.view_of, self.budget_of = view_of, budget_of
        self.share: SiteShare | None = None
        self.key: PathKey | None = None
        self.budget: Budget | None = None
        self._budget_at = -1e18
        self.last: Decision | None = None

    def start(self, key: PathKey, host: str) -> None:
        """The path the cap's transfers run on, and an address on it."""
        dest = site_prefix(host)
        self.key = key
        self.share = SiteShare(self.node, dest, key.direction, lambda now: self.view_of(
            self.url, dest, key.direction, now, self.timeout))

    def step(self, now: float, local_mbps: float | None) -> Decision | None:
        """A new target, or None (none due yet, or no path yet). `now`: unix
        time; `local_mbps`: the cap's own target (None: it has none but a
        default, so the site's advice stands for it)."""
        if self.share is None or self.key is None or not self.share.due(now):
            return None
        if now - self._budget_at >= BUDGET_EVERY_S:
            self.budget = self.budget_of(self.store, self.key, self.url, self.settings,
                                         self.timeout)
            self._budget_at = now
        budget = None if self.budget is None else self.budget.mbps
        local = local_mbps if local_mbps is not None else budget
        if local is None:
            return None  # nothing to pace by: the cap's rate stands
        d = self.share.step(now, budget, local)
        if d is not None:
            self.last = d
        return d

"""`tamebpf site`'s table and JSON: per path, its nodes and the budget."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tamebpf.common.words import count, printable
from tamebpf.site.budget import Budget
from tamebpf.site.query import SiteView


@dataclass(frozen=True)
class SitePath:
    dest: str
    direction: str
    view: SiteView
    budget: Budget | None
    budget_error: str | None = None  # why no budget could be read

    @property
    def streams(self) -> int:
        return sum(n.streams for n in self.view.nodes.values())

    @property
    def goodput_mbps(self) -> float:
        return sum(n.goodput_mbps for n in self.view.nodes.values())

    @property
    def impact(self) -> float | None:
        """The budget's curve at the rate the site's streams move now."""
        if self.budget is None or self.streams < 1:
            return None
        return self.budget.impact_at(self.goodput_mbps)


def to_json(url: str, node: str, paths: list[SitePath], now: float) -> dict[str, Any]:
    return {"prometheus": url, "node": node, "paths": [{
        "dest": p.dest, "direction": p.direction, "streams": p.streams,
        "goodput_mbps": p.goodput_mbps, "impact": p.impact,
        "budget": None if p.budget is None else {
            "streams": p.budget.streams, "mbps": p.budget.mbps, "from_node": p.budget.node},
        "budget_error": p.budget_error,
        "scrape_interval_s": p.view.interval_s,
        "nodes": [{"node": n.node, "streams": n.streams, "goodput_mbps": n.goodput_mbps,
                   "pace_target_mbps": n.pace_target_mbps,
                   "age_s": None if n.node not in p.view.scraped
                   else now - p.view.scraped[n.node]}
                  for n in sorted(p.view.nodes.values(), key=lambda n: n.node)]}
        for p in paths]}


def _opt(v: float | int | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def render(url: str, node: str, paths: list[SitePath]) -> str:
    lines = [f"site {printable(url)} (this node: {printable(node)})", ""]
    if not paths:
        return "\n".join(lines + ["no node publishes a path (is 'tamebpf export' running on "
                                  "the nodes, and scraped?)"]) + "\n"
    lines.append("path                        dir   nodes  streams   Mbit/s  budget  "
                 "Mbit/s   impact")
    for p in paths:
        b = p.budget
        lines.append(f"{printable(p.dest):<27} {'recv' if p.direction == 'receive' else 'send':<5}"
                     f" {len(p.view.nodes):>5}  {p.streams:>7}  {p.goodput_mbps:>7.1f}  "
                     f"{_opt(None if b is None else b.streams, 'd'):>6}  "
                     f"{_opt(None if b is None else b.mbps, '7.1f'):>7}  "
                     f"{'-' if p.impact is None else format(p.impact, '6.1%'):>7}")
        for n in sorted(p.view.nodes.values(), key=lambda n: n.node):
            me = " (this node)" if n.node == node else ""
            target = "" if n.pace_target_mbps is None else \
                f", paced at {n.pace_target_mbps:.1f} Mbit/s"
            lines.append(f"  {printable(n.node)}{me}: {count(n.streams, 'stream')}, "
                         f"{n.goodput_mbps:.1f} Mbit/s{target}")
        if b is None:
            lines.append(f"  no budget: {p.budget_error or 'no node exports a fit for it'}")
        elif b.node:
            lines.append(f"  budget from {printable(b.node)}'s fit")
    lines += ["", "(budget: the model's advice for the whole site at --max-impact; impact: "
              "its curve's at the rate the site's streams move now)"]
    return "\n".join(lines) + "\n"

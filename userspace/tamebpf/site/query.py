"""What the site's nodes run on a path, as the site's Prometheus holds it
from their exports (`tamebpf_site_path_*`, one series per node, path and
direction), and how fresh that is.

Two instant queries: the path's series (a node whose export stopped
answering is gone from them once Prometheus marks its series stale), and
the last minute of every node's `tamebpf_build_info` samples, whose spacing
is the scrape interval and whose newest is how old the site's data is.
Every value is checked before a share rests on it: an answer that is no
answer, a value that is no stream count or rate, a node named twice,
raises SiteDataError naming what was wrong, in one line.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Any

from tamebpf.common.values import is_node_name
from tamebpf.paths import httpget, remote
from tamebpf.paths.valid import show

METRIC = "tamebpf_site_path_"
FIELDS = {"streams": "streams", "goodput_bytes_per_second": "goodput",
          "pace_target_bytes_per_second": "pace_target"}
CLOCK_WINDOW_S = 60
# Prometheus's default, when the samples do not show one (a single scrape).
DEFAULT_INTERVAL_S = 15.0
# Beyond these a value is not a node's: a bug, or a series someone forged.
MAX_STREAMS = 100_000
MAX_BYTES_PER_S = 1.25e12  # 10 Tbit/s
MAX_SAID = 3  # bad values named in the one line


class SiteDataError(ValueError):
    """The site's Prometheus gave an answer no share can rest on."""


@dataclass(frozen=True)
class NodeOnPath:
    """What one node runs on the path (rates in Mbit/s)."""

    node: str
    streams: int
    goodput_mbps: float
    pace_target_mbps: float | None


@dataclass(frozen=True)
class SiteView:
    """The nodes on the path, the scrape interval the samples show, and
    when each node was last scraped (unix time)."""

    nodes: dict[str, NodeOnPath]
    interval_s: float
    scraped: dict[str, float]

    def age_s(self, node: str, now: float) -> float | None:
        """How old the site's data is: since `node` (this one) was last
        scraped, else the newest scrape of any node (None: none seen)."""
        t = self.scraped.get(node, max(self.scraped.values(), default=None))
        return None if t is None else now - t


def path_query(dest: str | None, direction: str | None) -> str:
    """The path's series (None, None: every path's)."""
    names = "|".join(FIELDS)
    where = "" if dest is None else f', dest="{dest}", direction="{direction}"'
    return f'{{__name__=~"{METRIC}({names})"{where}}}'


def clock_query() -> str:
    return f"tamebpf_build_info[{CLOCK_WINDOW_S}s]"


def fetch(url: str, dest: str, direction: str, now: float, timeout: float) -> SiteView:
    """The view of the path from the Prometheus at `url`, both queries
    within `timeout` seconds in all. Raises OSError when it cannot be
    asked, SiteDataError when its answer is none."""
    end = time.monotonic() + timeout
    series = _query(url, path_query(dest, direction), timeout)
    left = end - time.monotonic()
    if left <= 0:
        raise httpget.FetchError(f"no answer from {url} within {timeout:g} s")
    return parse(series, _query(url, clock_query(), left), now)


def fetch_all(url: str, now: float, timeout: float) -> dict[tuple[str, str], SiteView]:
    """Every path's view, by (dest, direction), as fetch() gives one."""
    end = time.monotonic() + timeout
    series = _query(url, path_query(None, None), timeout)
    left = end - time.monotonic()
    if left <= 0:
        raise httpget.FetchError(f"no answer from {url} within {timeout:g} s")
    clock = _query(url, clock_query(), left)
    paths: dict[tuple[str, str], list[Any]] = {}
    for r in series:
        m = r.get("metric") if isinstance(r, dict) else None
        key = (str(m.get("dest")), str(m.get("direction"))) if isinstance(m, dict) else ("?", "?")
        paths.setdefault(key, []).append(r)
    return {k: parse(rs, clock, now) for k, rs in sorted(paths.items())}


def _query(url: str, query: str, timeout: float) -> list[Any]:
    try:
        return remote.ask(url, query, timeout)
    except ValueError as err:
        raise SiteDataError(f"the site's Prometheus: {err}") from None

def parse(series: list[Any], clock: list[Any], now: float) -> SiteView:
    """The view from the two queries' results (raises SiteDataError)."""
    bad: list[str] = []
    values: dict[str, dict[str, float]] = {}
    for r in series:
        got = _sample(r, bad)
        if got is None:
            continue
        node, field, value = got
        have = values.setdefault(node, {})
        if field in have:
            bad.append(f"node {show(node)} has two {field} series (two exports of one name?)")
        have[field] = value
    scraped, gaps = _clock(clock, now, bad)
    if bad:
        more = f" (and {len(bad) - MAX_SAID} more)" if len(bad) > MAX_SAID else ""
        raise SiteDataError("the site's Prometheus holds values no share can rest on: "
                            + "; ".join(bad[:MAX_SAID]) + more)
    nodes = {n: NodeOnPath(n, int(v.get("streams", 0)), v.get("goodput", 0.0) * 8 / 1e6,
                           None if "pace_target" not in v else v["pace_target"] * 8 / 1e6)
             for n, v in values.items()}
    interval = statistics.median(gaps) if gaps else DEFAULT_INTERVAL_S
    return SiteView(nodes, interval, scraped)


def _node(m: dict[str, Any], bad: list[str]) -> str | None:
    node = m.get("node")
    if not is_node_name(node):
        bad.append(f"node label {show(node)} is not a node's name")
        return None
    return node


def _sample(r: Any, bad: list[str]) -> tuple[str, str, float] | None:
    m = r.get("metric") if isinstance(r, dict) else None
    if not isinstance(m, dict):
        bad.append(f"series {show(r)} is not a Prometheus series")
        return None
    node = _node(m, bad)
    name = m.get("__name__")
    field = FIELDS.get(name[len(METRIC):]) if isinstance(name, str) \
        and name.startswith(METRIC) else None
    if node is None or field is None:
        if field is None:
            bad.append(f"series {show(name)} is not one asked for")
        return None
    raw = r.get("value")
    try:
        value = float(raw[1])
    except (IndexError, TypeError, ValueError, KeyError):
        said = raw[1] if isinstance(raw, list) and len(raw) > 1 else raw
        bad.append(f"node {show(node)}: {field} {show(said)} is not a number")
        return None
    if not _plausible(field, value):
        what = "a stream count" if field == "streams" else "a rate in bytes/s"
        bad.append(f"node {show(node)}: {field} {value!r} is not {what}")
        return None
    return node, field, value


def _plausible(field: str, value: float) -> bool:
    """A stream count is a whole number up to MAX_STREAMS; a rate is at
    least 0 (a pace target above 0) and at most MAX_BYTES_PER_S."""
    if not math.isfinite(value):
        return False
    if field == "streams":
        return 0 <= value <= MAX_STREAMS and value == int(value)
    return (value > 0 if field == "pace_target" else value >= 0) and value <= MAX_BYTES_PER_S


def _clock(clock: list[Any], now: float, bad: list[str]) -> tuple[dict[str, float], list[float]]:
    """Each node's newest scrape and the gaps between scrapes."""
    scraped: dict[str, float] = {}
    gaps: list[float] = []
    for r in clock:
        m = r.get("metric") if isinstance(r, dict) else None
        node = _node(m, bad) if isinstance(m, dict) else None
        points = r.get("values") if isinstance(r, dict) else None
        if node is None or not isinstance(points, list):
            if isinstance(m, dict) and node is not None:
                bad.append(f"node {show(node)}: no samples in its build_info series")
            continue
        try:
            times = sorted(float(p[0]) for p in points)
        except (TypeError, ValueError, IndexError):
            bad.append(f"node {show(node)}: sample times {show(points)} are not times")
            continue
        if not times or not all(math.isfinite(t) for t in times) or times[-1] > now + 60:
            bad.append(f"node {show(node)}: scraped at {show(times[-1:])}, not a time "
                       "before now")
            continue
        scraped[node] = max(scraped.get(node, 0.0), times[-1])
        gaps += [b - a for a, b in zip(times, times[1:], strict=False) if b > a]
    return scraped, gaps

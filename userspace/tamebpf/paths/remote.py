"""Path entries another node exported, read back through Prometheus's HTTP
query API (`advise --paths-from URL`; docs/paths.md, "Shared by a site's
nodes"). No new server: the Prometheus a site already runs is the shared
store, and each node's `export` serves its path memory as `tamebpf_path_*`
series.

One query returns every node's newest fit for a destination, congestion
control and direction that is not marked changed, with its time as the
value. A node from before directions exports uploads only, with no
direction label: an upload's query matches its series, a download's does
not. A node is named by its series' label node (export --node), or, from
before that label, by its instance.
"""

from __future__ import annotations

import ipaddress
import json
import urllib.parse
from dataclasses import dataclass, field, replace
from typing import Any

from tamebpf.common.defaults import PATHS_FROM_MAX_BYTES, PATHS_FROM_TIMEOUT_S
from tamebpf.paths import httpget
from tamebpf.paths.entry import PathEntry
from tamebpf.paths.valid import MAX_TEXT, Refusal, checked_entry, show

_JOIN = "instance, job, node, dest, netns, congestion, direction"
# The labels (and the sample) entry fields are read from, as a refusal names them.
_LABEL_OF = {"probe_kind": "probes", "when": "value (the time)", "host": "dest"}


@dataclass(frozen=True)
class RemoteEntry:
    entry: PathEntry
    node: str  # the node that exported it (printed escaped: words.printable)


@dataclass(frozen=True)
class Answer:
    """A query's entries, newest first, and the series refused: (node, why)."""

    entries: list[RemoteEntry] = field(default_factory=list)
    refused: list[tuple[str, Refusal]] = field(default_factory=list)


def remote_query(dest: str | None, congestion: str | None, direction: str = "send") -> str:
    """Every node's newest unchanged fit for the path (None: any
    destination, any congestion control)."""
    which = 'direction="receive"' if direction == "receive" else 'direction!="receive"'
    labels = [f'{k}="{v}"' for k, v in (("dest", dest), ("congestion", congestion)) if v]
    sel = "{" + ", ".join([*labels, which]) + "}"
    return (f"tamebpf_path_learned_timestamp_seconds{sel} * on ({_JOIN}) group_left (source, "
            f"probes, fit) tamebpf_path_fit_info{sel} unless on ({_JOIN}) "
            f"(tamebpf_path_changed{sel} == 1)")


def parse_result(result: object, dest: str | None, congestion: str | None, now: float,
                 direction: str = "send") -> Answer:
    """The entries of a query result for the path asked about (None: the
    destination, or congestion control, each series names). Every series
    goes through paths/valid.py; one that is no entry for this destination,
    congestion control and direction is refused, naming the node and the
    field."""
    answer = Answer()
    for r in result if isinstance(result, list) else []:
        m = r.get("metric") if isinstance(r, dict) else None
        labels = m if isinstance(m, dict) else {}
        got = _series(r, str(labels.get("dest")) if dest is None else dest,
                      str(labels.get("congestion")) if congestion is None else congestion,
                      direction, now)
        if isinstance(got, RemoteEntry):
            answer.entries.append(got)
        else:
            answer.refused.append(got)
    answer.entries.sort(key=lambda e: -e.entry.when)
    return answer


def _series(r: object, dest: str, congestion: str, direction: str, now: float
            ) -> RemoteEntry | tuple[str, Refusal]:
    m = r.get("metric") if isinstance(r, dict) else None
    if not isinstance(m, dict):
        return "?", Refusal("series", f"is {show(r)}, not a Prometheus series")
    named_by = "node" if m.get("node") else "instance"  # no node label: an older export
    node = m.get(named_by)
    if not isinstance(node, str) or not 0 < len(node) <= MAX_TEXT:
        return "?", Refusal(named_by, f"is {show(node)}, not a node's name")
    got_direction = m.get("direction", "send")  # absent: a node from before directions
    for label, have, want in (("dest", m.get("dest"), dest),
                              ("congestion", m.get("congestion"), congestion),
                              ("direction", got_direction, direction)):
        if have != want:
            return node, Refusal(label, f"is {show(have)}, not the {want} asked about")
    value = r.get("value") if isinstance(r, dict) else None
    try:
        when: object = float(value[1])  # type: ignore[index]
    except (TypeError, ValueError, IndexError, KeyError):
        when = value  # refused below, as not a number
    # The advised numbers are recomputed from the fit (paths/recall.py);
    # these placeholders are never shown.
    raw = {"dest": dest, "congestion": congestion, "direction": direction,
           "netns": m.get("netns"), "host": dest,
           "when": when, "source": m.get("source"), "probe_kind": m.get("probes"),
           "fit": m.get("fit"), "advised_streams": 1, "advised_mbps": 0.0,
           "advised_impact": 0.0, "max_impact": 0.0}
    got = checked_entry(raw, now)
    if isinstance(got, Refusal):
        return node, Refusal(_LABEL_OF.get(got.field, got.field), got.why)
    return RemoteEntry(replace(got, capacity_mbps=got.fit.capacity), node)


def fetch(url: str, dest: str, congestion: str, now: float, timeout: float = PATHS_FROM_TIMEOUT_S,
          direction: str = "send") -> Answer:
    """Every node's entry for the path from the Prometheus at `url`, within
    `timeout` seconds in all. Raises OSError (httpget.FetchError) or
    ValueError when Prometheus cannot be asked or its answer is none."""
    return parse_result(ask(url, remote_query(dest, congestion, direction), timeout),
                        dest, congestion, now, direction)


def fetch_within(url: str, network: str, direction: str, now: float,
                 timeout: float = PATHS_FROM_TIMEOUT_S) -> Answer:
    """Every node's entries for destinations inside `network` (a prefix),
    of any congestion control, checked as fetch() checks them."""
    net = ipaddress.ip_network(network)

    def inside(r: Any) -> bool:
        m = r.get("metric") if isinstance(r, dict) else None
        try:
            return ipaddress.ip_network(str(m.get("dest"))).subnet_of(net)  # type: ignore
        except (AttributeError, TypeError, ValueError):
            return False
    series = [r for r in ask(url, remote_query(None, None, direction), timeout) if inside(r)]
    return parse_result(series, None, None, now, direction)


def ask(url: str, query: str, timeout: float) -> list[Any]:
    """The result list of one instant query to the Prometheus at `url`.
    Raises OSError (httpget.FetchError) or ValueError when it cannot be
    asked or its answer is none."""
    q = urllib.parse.urlencode({"query": query})
    body = httpget.get(url.rstrip("/") + "/api/v1/query?" + q, timeout, PATHS_FROM_MAX_BYTES)
    try:
        data: Any = json.loads(body)
    except (ValueError, RecursionError):
        raise ValueError("the answer is not JSON") from None
    if not isinstance(data, dict) or data.get("status") != "success":
        why = data.get("error") or data.get("status") if isinstance(data, dict) else None
        raise ValueError(f"Prometheus answered {show(why) if why else 'no query result'}")
    result = data.get("data", {}).get("result") if isinstance(data.get("data"), dict) else None
    if not isinstance(result, list):
        raise ValueError("the answer holds no query result")
    return result

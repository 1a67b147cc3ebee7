"""Path entries another node exported, read back through Prometheus's HTTP
query API (`advise --paths-from URL`; docs/paths.md, "Shared by a site's
nodes"). No new server: the Prometheus a site already runs is the shared
store, and each node's `export` serves its path memory as `tamebpf_path_*`
series.

One query returns every node's newest fit for a destination and congestion
control that is not marked changed, with its time as the value.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from tamebpf.paths.entry import SOURCES, FitData, PathEntry, PathKey, ProbeKind, Source

TIMEOUT_S = 3.0
PROBE_KINDS: tuple[ProbeKind, ...] = ("settled", "quick", "fixed", "none")
_JOIN = "instance, job, dest, netns, congestion"


@dataclass(frozen=True)
class RemoteEntry:
    entry: PathEntry
    instance: str  # the node that exported it


def remote_query(dest: str, congestion: str) -> str:
    sel = f'{{dest="{dest}", congestion="{congestion}"}}'
    return (f"tamebpf_path_learned_timestamp_seconds{sel} * on ({_JOIN}) group_left (source, "
            f"probes, fit) tamebpf_path_fit_info{sel} unless on ({_JOIN}) "
            f"(tamebpf_path_changed{sel} == 1)")


def parse_result(result: list[dict[str, Any]], congestion: str) -> list[RemoteEntry]:
    """The entries of a query result, newest first; series that do not read
    as an entry (another version's labels) are skipped."""
    out = []
    for r in result:
        m = r.get("metric", {})
        try:
            fit = FitData.from_json(m["fit"])
            when = float(r["value"][1])
            source, kind = m["source"], m["probes"]
        except (KeyError, ValueError, TypeError, IndexError):
            continue
        if source not in SOURCES or kind not in PROBE_KINDS:
            continue
        src: Source = source
        pk: ProbeKind = kind
        # The advised numbers are recomputed from the fit (paths/recall.py);
        # zeros here are never shown.
        entry = PathEntry(PathKey(m.get("dest", ""), m.get("netns", ""), congestion), when,
                          src, pk, fit, 1, 0.0, 0.0, 0.0,
                          capacity_mbps=fit.capacity, host=m.get("dest", ""))
        out.append(RemoteEntry(entry, m.get("instance", "?")))
    return sorted(out, key=lambda r: -r.entry.when)


def fetch(url: str, dest: str, congestion: str, timeout: float = TIMEOUT_S
          ) -> list[RemoteEntry]:
    """Every node's entry for the path from the Prometheus at `url`.
    Raises OSError or ValueError when Prometheus cannot be asked."""
    q = urllib.parse.urlencode({"query": remote_query(dest, congestion)})
    with urllib.request.urlopen(url.rstrip("/") + "/api/v1/query?" + q,  # noqa: S310
                                timeout=timeout) as resp:
        data = json.loads(resp.read())
    if data.get("status") != "success":
        raise ValueError(f"Prometheus answered {data.get('error') or data.get('status')}")
    return parse_result(data["data"]["result"], congestion)

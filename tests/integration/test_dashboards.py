"""contrib/ against the real thing: the exporter reads the kernel while
iperf3 runs at 1 then 4 streams (so the passive fit gives advice) in a
cgroup under a tamebpf cap, a real Prometheus (the fixture of
test_export.py) scrapes it and evaluates contrib/prometheus/tamebpf-alerts.yml,
and every query of the Grafana dashboard, every recording rule and every
alert's watched expression (its thresholds removed) returns data; every rule
evaluates without error."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.parse

import pytest

from tamebpf.paths.store import PathStore, state_dir
from tests.integration.kernel_fixtures import cgroup, iperf3_available, wait_for
from tests.integration.test_export import (
    TAMEBPF,
    exporter,
    http_get,
    iperf3_run,
    prometheus,
    query,
    value,
)
from tests.packaging.contrib_queries import (
    RULES,
    dashboard_queries,
    read_dashboard,
    read_rules,
    signal,
    substitute,
)
from tests.unit.paths.test_paths_store import an_entry

pytestmark = [
    pytest.mark.root,
    pytest.mark.slow,
    pytest.mark.skipif(not iperf3_available(), reason="iperf3 not installed"),
]


def rule_states(prom: str) -> dict[str, dict[str, object]]:
    """{rule name: its entry in /api/v1/rules} once each was evaluated."""
    data = json.loads(http_get(prom + "/api/v1/rules"))
    assert data["status"] == "success", f"/api/v1/rules: {data}"
    return {r["name"]: r for g in data["data"]["groups"] for r in g["rules"]}


def evaluated(prom: str) -> set[str]:
    """Rules evaluated at least once (never evaluated: year 1)."""
    return {name for name, r in rule_states(prom).items()
            if not str(r.get("lastEvaluation", "0001")).startswith("0001")}


def test_every_dashboard_query_and_rule_returns_data(pins: str) -> None:
    rules = read_rules()
    # A remembered path, as an advise leaves it (the path panels and alert);
    # this test's own state directory (tests/integration/conftest.py).
    PathStore(state_dir()).put(an_entry())
    with cgroup() as cg:
        cap = subprocess.run([*TAMEBPF, "cap", "set", "--cgroup", cg, "--dest", "127.0.0.1/32",
                              "--max-streams", "8"], capture_output=True, text=True, timeout=30)
        assert cap.returncode == 0, f"cap set failed: {cap.stderr}"
        # The JSON-lines sink reads the kernel every second from the start:
        # the 1-stream transfer is seen while Prometheus takes its ~5 s to
        # scrape a first time, the 4-stream one with Prometheus scraping.
        with exporter("--cgroup", cg, "--jsonl", os.devnull, "--interval", "1") as (_, url), \
                prometheus(urllib.parse.urlparse(url).netloc, [str(RULES)]) as prom:
            iperf3_run(cg, streams=1, seconds=5, rate="30M")
            wait_for(lambda: value(prom, 'up{job="tamebpf"}') == 1, 15,
                     "prometheus to scrape the exporter successfully", step=0.3)
            iperf3_run(cg, streams=4, seconds=6, rate="30M")
            wait_for(lambda: bool(query(prom, "tamebpf_group_advice_streams")), 15,
                     "an advice series after 1 and 4 streams", step=0.5)
            wait_for(lambda: evaluated(prom) >= {r.name for r in rules}, 15,
                     "every rule to be evaluated once", step=0.5)

            empty = []
            for q in dashboard_queries(read_dashboard()):
                if not query(prom, substitute(q.expr)):
                    empty.append(f"{q.where}: {substitute(q.expr)}")
            for r in rules:
                expr = r.name if r.kind == "record" else signal(r.expr)
                if not query(prom, expr):
                    empty.append(f"rule {r.name}: {expr}")
            assert not empty, "queries without data:\n  " + "\n  ".join(empty)

            states = rule_states(prom)
            bad = {n: (s.get("health"), s.get("lastError")) for n, s in states.items()
                   if s.get("health") != "ok"}
            assert not bad, f"rules that failed to evaluate: {bad}"
            firing = [a["labels"]["alertname"]
                      for a in json.loads(http_get(prom + "/api/v1/alerts"))["data"]["alerts"]
                      if a["state"] == "firing" and a["labels"]["alertname"] in
                      ("TamebpfExporterDown", "TamebpfExporterAbsent",
                       "TamebpfKernelReadFailing")]
            assert not firing, f"health alerts firing on a healthy exporter: {firing}"

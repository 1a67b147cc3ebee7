"""contrib/: the Prometheus rules pass promtool (syntax and their own unit
tests), and the dashboard and the rules ask only for metrics and labels the
exporter defines.  The exporter's metric families are enumerated from the
collector itself, scraped over fake flows as in test_export.py."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tamebpf.exporter.collector import TamebpfCollector
from tamebpf.groups.aggregate import Aggregator
from tamebpf.groups.caps import CapLimit
from tests.integration.test_export import prometheus_config
from tests.packaging.contrib_queries import (
    DASHBOARD,
    RULES,
    RULES_TEST,
    TARGET_LABELS,
    dashboard_queries,
    metric_names,
    panels,
    read_dashboard,
    read_rules,
    selectors,
    signal,
)
from tests.unit.groups.test_groups_fakes import Transfer
from tests.unit.paths.test_paths_store import an_entry
from tests.unit.present.test_export import FakeReader, cap_rows, fresh


def exported() -> dict[str, set[str]]:
    """{series name as stored (counters with _total): its label names}, for
    every family the collector yields, with both --group-by choices."""
    out: dict[str, set[str]] = {}
    for group_by in ("comm", "cgroup"):
        col = TamebpfCollector(
            FakeReader([Transfer(streams=1, mbps=50.0)]), Aggregator(group_by, min_samples=1),
            per_flow=True, caps=lambda: [CapLimit(1), CapLimit(2**32 - 1, pace_bps=8e6)],
            cap_table=cap_rows, paths=lambda: [an_entry()])
        t = col.source.transfers[0]  # type: ignore[attr-defined]
        for i in range(6):  # two stream counts: the advice families get samples too
            if i == 3:
                t.set_streams(4)
            fresh(col)
        for fam in col.collect():
            name = fam.name + ("_total" if fam.type == "counter" else "")
            labels = out.setdefault(name, set())
            for s in fam.samples:
                labels.update(s.labels)
    return out


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool not installed (Debian package 'prometheus'; make test-deps)")
    return path


def test_the_enumeration_sees_every_family_with_its_labels() -> None:
    names = exported()
    assert names["tamebpf_group_acked_bytes_total"] == {"comm", "cgroup", "remote_addr",
                                                        "direction"}, (
        f"group labels: {names['tamebpf_group_acked_bytes_total']}")
    assert names["tamebpf_events_dropped_total"] == {"event"}
    assert "tamebpf_group_advice_streams" in names and "tamebpf_flow_srtt_seconds" in names
    assert not [n for n, labels in names.items() if not n.endswith("_total") and
                not labels and n.startswith("tamebpf_group_")], "group gauges without labels"


def test_rules_pass_promtool_check_rules() -> None:
    check = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True,
                           text=True, timeout=30)
    out = check.stdout + check.stderr
    assert check.returncode == 0, f"promtool check rules {RULES.name}: rc {check.returncode}\n{out}"
    m = re.search(r"SUCCESS: (\d+) rules found", out)
    assert m, f"no rule count in promtool's output: {out}"
    ours = read_rules()
    assert int(m.group(1)) == len(ours), (
        f"promtool found {m.group(1)} rules, contrib_queries.read_rules {len(ours)}: "
        "keep tamebpf-alerts.yml in the plain layout read_rules understands")


def test_alerts_pass_their_promtool_unit_tests() -> None:
    run = subprocess.run([promtool(), "test", "rules", str(RULES_TEST)], capture_output=True,
                         text=True, timeout=60, cwd=RULES_TEST.parent)
    assert run.returncode == 0, (
        f"promtool test rules {RULES_TEST.name}: rc {run.returncode}\n{run.stdout}{run.stderr}")


def test_every_alert_has_a_unit_test_that_fires_it() -> None:
    tested = set(re.findall(r"^\s+alertname: (\w+)\s*\n\s+exp_alerts:", RULES_TEST.read_text(),
                            re.M))
    alerts = {r.name for r in read_rules() if r.kind == "alert"}
    untested = alerts - tested
    assert not untested, f"alerts never seen firing in {RULES_TEST.name}: {sorted(untested)}"


def all_queries() -> list[tuple[str, str, str]]:
    """(where, expr, legend) of every dashboard query and every rule."""
    out = [(q.where, q.expr, q.legend) for q in dashboard_queries(read_dashboard())]
    out += [(f"rule {r.name}", r.expr, "") for r in read_rules()]
    return out


def unknown_names(expr: str, known: set[str], recorded: set[str]) -> set[str]:
    return {n for n in metric_names(expr) if n not in known and n not in recorded}


def test_the_name_check_catches_a_wrong_name() -> None:
    known = set(exported())
    bad = 'rate(tamebpf_group_acked_bytes{job="tamebpf_x"}[5m]) / tamebpf:nope'
    assert unknown_names(bad, known, set()) == {"tamebpf_group_acked_bytes", "tamebpf:nope"}


def test_every_metric_the_dashboard_and_rules_use_is_exported() -> None:
    known = set(exported())
    recorded = {r.name for r in read_rules() if r.kind == "record"}
    queries = all_queries()
    assert len(queries) > 20, f"expected the dashboard's and rules' queries, got {len(queries)}"
    wrong = {where: unknown_names(expr, known, recorded) for where, expr, _ in queries}
    wrong = {k: v for k, v in wrong.items() if v}
    assert not wrong, f"names the exporter does not define (docs/metrics.md): {wrong}"


def test_labels_in_selectors_and_legends_exist() -> None:
    names = exported()
    for where, expr, legend in all_queries():
        for metric, labels in selectors(expr):
            have = names.get(metric, set()) | TARGET_LABELS
            assert labels <= have, (
                f"{where}: {metric} has no label {sorted(labels - have)} (it has {sorted(have)})")
        if legend:
            have = set(TARGET_LABELS).union(*(names.get(m, set()) for m in metric_names(expr)))
            shown = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", legend))
            assert shown <= have, f"{where}: legend {legend!r} shows labels the series lack"


def test_dashboard_layout() -> None:
    dash = read_dashboard()
    ids = [p["id"] for p in dash["panels"]]  # type: ignore[attr-defined]
    assert len(ids) == len(set(ids)), f"duplicate panel ids: {ids}"
    cells: dict[tuple[int, int], str] = {}
    for p in dash["panels"]:  # type: ignore[attr-defined]
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, f"panel {p['title']!r} outside 24 columns"
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = p["title"]
    for p in panels(dash):
        refs = [t["refId"] for t in p["targets"]]  # type: ignore[attr-defined]
        assert refs and len(refs) == len(set(refs)), f"{p['title']!r}: refIds {refs}"
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, (
            f"{p['title']!r}: datasource {p['datasource']}")
        assert p.get("description"), f"{p['title']!r}: no description"
    titles = " ".join(str(p["title"]).lower() for p in panels(dash))
    for topic in ("goodput", "advice", "loss", "rtt", "exporter"):
        assert topic in titles, f"no panel about {topic} in {DASHBOARD.name}"


def test_signal_drops_thresholds_and_absent() -> None:
    assert signal("tamebpf_map:fill_ratio > 0.8") == "tamebpf_map:fill_ratio"
    assert signal('absent(up{job="tamebpf"})') == 'up{job="tamebpf"}'
    assert signal("a > 0.01 and rate(b[5m]) > 100") == "a and rate(b[5m])"
    assert signal("increase(x[15m]) > 0") == "increase(x[15m])"


def test_alert_signals_and_the_integration_config_pass_promtool(tmp_path: Path) -> None:
    """tests/integration/test_dashboards.py queries each alert's signal and
    loads the rules through prometheus_config(): both must be valid."""
    tool = promtool()
    signals = tmp_path / "signals.yml"
    signals.write_text("groups:\n  - name: signals\n    rules:\n" + "".join(
        f"      - record: signal:{i}\n        expr: {json.dumps(signal(r.expr))}\n"
        for i, r in enumerate(read_rules()) if r.kind == "alert"))
    check = subprocess.run([tool, "check", "rules", str(signals)], capture_output=True,
                           text=True, timeout=30)
    assert check.returncode == 0, f"an alert's signal is not valid PromQL: {check.stderr}"
    config = tmp_path / "prometheus.yml"
    config.write_text(prometheus_config("127.0.0.1:9477", [str(RULES)]))
    check = subprocess.run([tool, "check", "config", str(config)], capture_output=True,
                           text=True, timeout=30)
    assert check.returncode == 0 and "1 rule files found" in check.stdout, (
        f"promtool check config: rc {check.returncode}\n{check.stdout}{check.stderr}")

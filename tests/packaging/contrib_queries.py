"""The PromQL of contrib/: every query of the Grafana dashboard and every
rule of the Prometheus rules file, read without a YAML library (the rules
file keeps to a plain layout; tests/packaging/test_contrib.py checks that the
count read here is promtool's).  Shared by the unit tests and
tests/integration/test_dashboards.py."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "contrib" / "prometheus" / "tamebpf-alerts.yml"
RULES_TEST = ROOT / "contrib" / "prometheus" / "tamebpf-alerts-test.yml"
DASHBOARD = ROOT / "contrib" / "grafana" / "tamebpf-dashboard.json"

# Labels Prometheus adds to every scraped series.
TARGET_LABELS = frozenset({"job", "instance"})


@dataclass(frozen=True)
class Rule:
    kind: str  # "record" or "alert"
    name: str
    expr: str


@dataclass(frozen=True)
class Query:
    where: str  # e.g. 'panel "Goodput" A' or 'variable instance'
    expr: str
    legend: str = ""


def read_rules(path: Path = RULES) -> list[Rule]:
    """Each `- record:`/`- alert:` with its `expr:` (inline or a block scalar)."""
    rules: list[Rule] = []
    lines = path.read_text().splitlines()
    head: tuple[str, str] | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        m = re.match(r"^\s*- (record|alert): (\S+)\s*$", line)
        if m:
            head = (m.group(1), m.group(2))
        m = re.match(r"^(\s*)expr: ?(.*)$", line)
        if m:
            assert head is not None, f"{path.name}:{i + 1}: expr before any record/alert"
            indent, value = len(m.group(1)), m.group(2).strip()
            if value in ("|", "|-", ">", ">-"):
                block = []
                while i + 1 < len(lines) and (not lines[i + 1].strip() or
                                              len(lines[i + 1]) - len(lines[i + 1].lstrip())
                                              > indent):
                    i += 1
                    block.append(lines[i].strip())
                value = " ".join(x for x in block if x)
            elif value[:1] in ("'", '"'):
                value = value[1:-1]
            rules.append(Rule(head[0], head[1], value))
            head = None
        i += 1
    return rules


def read_dashboard(path: Path = DASHBOARD) -> dict[str, object]:
    data: dict[str, object] = json.loads(path.read_text())
    return data


def panels(dashboard: dict[str, object]) -> list[dict[str, object]]:
    """Every panel, those inside collapsed rows included, rows excluded."""
    out: list[dict[str, object]] = []
    for p in dashboard["panels"]:  # type: ignore[attr-defined]
        if p["type"] == "row":
            out += p.get("panels", [])
        else:
            out.append(p)
    return out


def dashboard_queries(dashboard: dict[str, object]) -> list[Query]:
    """Panel targets, and the query variables' label_values() as PromQL."""
    out = []
    for p in panels(dashboard):
        for t in p["targets"]:  # type: ignore[attr-defined]
            out.append(Query(f'panel "{p["title"]}" {t["refId"]}', t["expr"],
                             t.get("legendFormat", "")))
    for v in dashboard["templating"]["list"]:  # type: ignore[index]
        if v["type"] != "query":
            continue
        text = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
        m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", text.strip())
        assert m, f"variable {v['name']}: expected label_values(SELECTOR, LABEL), got {text!r}"
        out.append(Query(f"variable {v['name']}", f"count by ({m.group(2)}) ({m.group(1)})"))
    return out


def without_strings(expr: str) -> str:
    return re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', expr)


def metric_names(expr: str) -> set[str]:
    """The tamebpf series (and tamebpf recording rules) an expression reads."""
    return set(re.findall(r"(?<![\w:])(tamebpf[\w:]*)", without_strings(expr)))


def selectors(expr: str) -> list[tuple[str, set[str]]]:
    """(metric, label names matched in its {...}) for each tamebpf selector."""
    out = []
    for m in re.finditer(r"(?<![\w:])(tamebpf[\w:]*)\s*\{([^}]*)\}", expr):
        labels = set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", without_strings(m.group(2))))
        out.append((m.group(1), labels))
    return out


def substitute(expr: str) -> str:
    """A dashboard expression with Grafana's variables as Prometheus takes it."""
    return (expr.replace("$__rate_interval", "1m").replace("$job", ".*")
            .replace("$instance", ".*"))


def signal(expr: str) -> str:
    """An alert's expression without its thresholds: what it watches, which
    has data whenever the metrics exist (`x > 0.8` -> `x`, `absent(x)` -> `x`)."""
    out = re.sub(r"\s*(?:==|!=|>=|<=|>|<)\s*-?[0-9.]+(?:e-?[0-9]+)?(?=\s|\)|$)", "", expr)
    m = re.fullmatch(r"absent\((.*)\)", out.strip())
    return m.group(1) if m else out

"""contrib/'s provisioning examples: the Prometheus one passes `promtool
check config` with its rule file (where the packages install it, here
pointed at the checkout's copy), and both name the places the packages
install the dashboard and the rules (tests/packaging/test_package.py and
test_rpm.py check the packages hold them there)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

CONTRIB = Path(__file__).resolve().parents[2] / "contrib"
SHARE = "/usr/share/tamebpf"
PROMETHEUS_EXAMPLE = CONTRIB / "prometheus" / "prometheus-example.yml"
GRAFANA_DASHBOARDS = CONTRIB / "grafana" / "provisioning" / "dashboards" / "tamebpf.yaml"


def test_the_prometheus_example_passes_promtool(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package 'prometheus'; make test-deps)")
    text = PROMETHEUS_EXAMPLE.read_text()
    assert f"{SHARE}/prometheus/tamebpf-alerts.yml" in text
    config = tmp_path / "prometheus.yml"
    config.write_text(text.replace(SHARE, str(CONTRIB)))
    res = subprocess.run([promtool, "check", "config", str(config)], capture_output=True,
                         text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS: 1 rule files found" in res.stdout + res.stderr, res.stdout + res.stderr


def test_the_grafana_example_loads_the_installed_dashboard_directory() -> None:
    path = re.search(r"^\s+path:\s*(\S+)\s*$", GRAFANA_DASHBOARDS.read_text(), re.M)
    assert path and path[1] == f"{SHARE}/grafana", GRAFANA_DASHBOARDS.read_text()
    assert (CONTRIB / "grafana" / "tamebpf-dashboard.json").is_file()

"""The systemd units in docs/ are valid, ask for the capabilities the code
checks for, and their default options parse."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tamebpf.cli import build_parser
from tamebpf.kernel import preflight

DOCS = Path(__file__).resolve().parents[2] / "docs"
UNITS = ["tamebpf-export.service", "tamebpf-caps.service"]


@pytest.mark.parametrize("unit", UNITS)
def test_unit_verifies(unit: str, tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze not installed")
    # verify also checks that ExecStart's program exists: point it at this
    # checkout's command, wherever the unit would find it once installed.
    command = str(Path(sys.prefix) / "bin" / "tamebpf")
    text = (DOCS / unit).read_text().replace("/usr/local/bin/tamebpf", command)
    (tmp_path / unit).write_text(text)
    res = subprocess.run([analyze, "verify", str(tmp_path / unit)], capture_output=True,
                         text=True, timeout=60, check=False)
    assert res.returncode == 0 and not res.stderr.strip(), res.stderr


def test_export_unit_grants_what_preflight_checks() -> None:
    text = (DOCS / "tamebpf-export.service").read_text()
    granted = re.search(r"^AmbientCapabilities=(.*)$", text, re.M)
    bounding = re.search(r"^CapabilityBoundingSet=(.*)$", text, re.M)
    assert granted and bounding, "the unit grants no capabilities"
    want = set(preflight.BASE_CAPS)
    assert set(granted[1].split()) == want == set(bounding[1].split()), (granted[1], want)


def test_export_defaults_parse() -> None:
    text = (DOCS / "tamebpf-export.default").read_text()
    m = re.search(r'^TAMEBPF_EXPORT_ARGS="(.*)"$', text, re.M)
    assert m, "no TAMEBPF_EXPORT_ARGS"
    args = build_parser().parse_args(["--log-format", "json", "export", *shlex.split(m[1])])
    assert args.command == "export" and args.log_format == "json"

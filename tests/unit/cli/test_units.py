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

DOCS = Path(__file__).resolve().parents[3] / "docs"
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


# The exposure systemd-analyze may give each unit (issue 31); the installed
# units' scores are printed by tests/packaging/test_package_lifecycle.py.
SECURITY_LIMITS = {"tamebpf-export.service": 2.5, "tamebpf-caps.service": 5.0}


@pytest.mark.parametrize("unit", UNITS)
def test_unit_is_hardened(unit: str, tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze not installed")
    (tmp_path / unit).write_text((DOCS / unit).read_text())
    res = subprocess.run([analyze, "security", "--offline=true", str(tmp_path / unit)],
                         capture_output=True, text=True, timeout=60, check=False)
    m = re.search(r"Overall exposure level for \S+: ([\d.]+)", res.stdout)
    assert m, res.stdout[-500:] + res.stderr
    assert float(m[1]) <= SECURITY_LIMITS[unit], (
        f"{unit}: exposure {m[1]} > {SECURITY_LIMITS[unit]}:\n"
        + "\n".join(line for line in res.stdout.splitlines() if "✗" in line))


@pytest.mark.parametrize("unit", UNITS)
def test_system_call_filter_is_system_service_plus_bpf(unit: str) -> None:
    text = (DOCS / unit).read_text()
    assert re.search(r"^SystemCallFilter=@system-service bpf$", text, re.M), unit
    assert re.search(r"^SystemCallErrorNumber=EPERM$", text, re.M), unit


def test_caps_unit_holds_no_site_configuration() -> None:
    """Site settings live in /etc/tamebpf/caps.toml and in drop-ins: an edit
    of the packaged unit would be lost on upgrade."""
    text = (DOCS / "tamebpf-caps.service").read_text()
    directives = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert not [d for d in directives if "transfer.slice" in d or "gridftp" in d.lower()], (
        directives)
    assert "ExecStart=/usr/local/bin/tamebpf cap apply /etc/tamebpf/caps.toml" in directives


def test_caps_reload_checks_first_and_export_has_no_reload() -> None:
    """systemd runs ExecReload= lines in order and stops at the first that
    fails: the check comes first, so a broken file changes nothing. export
    re-reads nothing: no ExecReload=, and SIGHUP is said to stop it."""
    caps = re.findall(r"^ExecReload=(.*)$", (DOCS / "tamebpf-caps.service").read_text(), re.M)
    assert len(caps) == 2 and "--check" in caps[0] and "--check" not in caps[1], caps
    assert all("--prune /etc/tamebpf/caps.toml" in c for c in caps), caps
    export = (DOCS / "tamebpf-export.service").read_text()
    assert not re.search(r"^ExecReload=", export, re.M)
    assert "SIGHUP" in export
    from tamebpf.parsers.export import EPILOG
    assert "SIGHUP" in EPILOG and "hangup" in EPILOG


def test_exporter_can_write_its_documented_jsonl_path() -> None:
    """The --jsonl path the export command documents is under the unit's
    LogsDirectory, the one place ProtectSystem=strict leaves writable."""
    text = (DOCS / "tamebpf-export.service").read_text()
    logs = re.search(r"^LogsDirectory=(\S+)$", text, re.M)
    assert logs and re.search(r"^ProtectSystem=strict$", text, re.M), "no LogsDirectory"
    from tamebpf.parsers.export import EPILOG
    documented = re.findall(r"--jsonl (/\S+)", EPILOG)
    assert documented, EPILOG
    for path in documented:
        assert path.startswith(f"/var/log/{logs[1]}/"), (path, logs[1])

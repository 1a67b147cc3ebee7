"""scripts/install-deps on a Red Hat-family host: with no apt-get and a dnf,
it asks dnf for EL9's package names, Python 3.11 among them. (Run against
stubs: this machine is Debian; docs/deploy.md says what is verified.)"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ("bash", "env", "sha256sum", "cut", "id", "dirname", "rm", "touch", "cat")


def fake_el9(tmp_path: Path) -> tuple[Path, Path]:
    """A PATH with dnf and rpm stubs (rpm: nothing installed) and a venv
    already up to date, so only the system packages are asked for."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found, tool
        (bindir / tool).symlink_to(found)
    log = tmp_path / "dnf.log"
    for name, body in (("dnf", f'echo "$@" >> {log}'), ("rpm", "exit 1")):
        (bindir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bindir / name).chmod(0o755)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(shutil.which("true") or "/bin/true")
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()[:16]
    for extras in ("plot,web,man", "plot,web,man,test"):
        (venv / f".tamebpf-deps-{extras}-{digest}").touch()
    return bindir, venv


def run(bindir: Path, venv: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(ROOT / "scripts" / "install-deps"), *args], capture_output=True,
                          text=True, timeout=60, check=False,
                          env={"PATH": str(bindir), "VENV": str(venv)})


def test_dnf_is_used_with_el9_names(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("as_root would call sudo, which the stub PATH lacks")
    bindir, venv = fake_el9(tmp_path)
    res = run(bindir, venv)
    assert res.returncode == 0, res.stderr
    asked = (tmp_path / "dnf.log").read_text().split()
    assert asked[:3] == ["install", "-y", "-q"], asked
    for name in ("python3.11", "libbpf-devel", "elfutils-libelf-devel", "iperf3", "bpftool"):
        assert name in asked, f"{name} not asked of dnf: {asked}"
    assert "libbpf-dev" not in asked and "rclone" not in asked, asked

    (tmp_path / "dnf.log").unlink()
    res = run(bindir, venv, "--test")
    asked = (tmp_path / "dnf.log").read_text().split()
    for name in ("rclone", "xrootd-server", "globus-gridftp-server-progs", "rpm-build"):
        assert name in asked, f"--test: {name} not asked of dnf: {asked}"


def test_neither_apt_nor_dnf_says_so(tmp_path: Path) -> None:
    bindir, venv = fake_el9(tmp_path)
    (bindir / "dnf").unlink()
    res = run(bindir, venv)
    assert res.returncode == 1 and "neither apt-get nor dnf" in res.stderr, res.stderr

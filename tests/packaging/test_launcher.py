"""scripts/tamebpf.launcher: the installed command runs on the first Python
3.11 or later it finds, not on whatever /usr/bin/python3 is (3.9 on EL9)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def install_launcher(tmp_path: Path, python: str) -> Path:
    """The launcher as `make install` writes it, its library the checkout's."""
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "python").symlink_to(ROOT / "userspace")
    text = (ROOT / "scripts" / "tamebpf.launcher").read_text()
    launcher = tmp_path / "tamebpf"
    launcher.write_text(text.replace("@PYTHON@", python).replace("@LIBDIR@", str(lib)))
    launcher.chmod(0o755)
    return launcher


def stub(bindir: Path, name: str, body: str) -> None:
    path = bindir / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def run(launcher: Path, bindir: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(launcher), *argv], capture_output=True, text=True, timeout=60,
                          env={"PATH": str(bindir)}, cwd="/", check=False)


def test_an_old_python3_is_passed_over_for_python3_11(tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    # python3 is EL9's 3.9: it fails the version check, and must not be run.
    stub(bindir, "python3", f'case "$2" in *version_info*) exit 1;; esac\n'
                            f'echo ran > {tmp_path}/old-python-ran; exit 99')
    stub(bindir, "python3.11", f'exec {sys.executable} "$@"')
    launcher = install_launcher(tmp_path, "python3")
    res = run(launcher, bindir, "--version")
    assert res.returncode == 0 and res.stdout.startswith("tamebpf "), (res.stdout, res.stderr)
    assert not (tmp_path / "old-python-ran").exists(), "the launcher ran the old python3"


def test_a_new_enough_python3_is_used(tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    stub(bindir, "python3", f'exec {sys.executable} "$@"')
    res = run(install_launcher(tmp_path, "/nonexistent/python3"), bindir, "--version")
    assert res.returncode == 0 and res.stdout.startswith("tamebpf "), res.stderr


def test_no_python_new_enough_says_what_to_install(tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    stub(bindir, "python3", "exit 1")
    res = run(install_launcher(tmp_path, "python3"), bindir, "--version")
    assert res.returncode == 1, res
    assert "Python 3.11 or later" in res.stderr and "dnf install python3.11" in res.stderr


def test_the_current_directory_does_not_shadow_modules(tmp_path: Path) -> None:
    """A root command must not import a json.py that sits where it is run."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    stub(bindir, "python3", f'exec {sys.executable} "$@"')
    work = tmp_path / "work"
    work.mkdir()
    (work / "json.py").write_text("raise SystemExit('shadowed')\n")
    launcher = install_launcher(tmp_path, "python3")
    res = subprocess.run([str(launcher), "--version"], capture_output=True, text=True,
                         timeout=60, env={"PATH": str(bindir)}, cwd=work, check=False)
    assert res.returncode == 0 and "shadowed" not in res.stderr, res.stderr
    assert os.path.exists(work / "json.py")

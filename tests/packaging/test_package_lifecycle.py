"""The Debian package's life on this machine, as an operator lives it: install
with apt, set a cap with the installed command, remove, purge. Removal must
lift the cap (no pins under /sys/fs/bpf/tamebpf, no program attached to the
cgroup, connections no longer refused) and say so, unless
/etc/default/tamebpf keeps the caps; purge must leave nothing under
/var/lib/tamebpf. The installed units' `systemd-analyze security` scores
are printed and bounded (PID 1 here is not systemd: --offline=true)."""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.kernel_fixtures import cgroup, sh, spawn
from tests.packaging.packages import deb as build_deb

pytestmark = [pytest.mark.root, pytest.mark.slow]
PINS = "/sys/fs/bpf/tamebpf"
STATE = "/var/lib/tamebpf"
UNITS = {"tamebpf-export.service": 2.5, "tamebpf-caps.service": 5.0}
PYLIB = "/usr/lib/tamebpf/python"


def run(argv: list[str], timeout: float = 300, **kw: object) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                          env=env, **kw)  # type: ignore[call-overload]


# apt-get reads the archive's package lists at every call (2-4 s each) to
# resolve what it is asked to do; tamebpf's dependencies are installed
# already (scripts/install-deps), so it is given none: the same dpkg runs
# with the same maintainer scripts, and a dependency missing here fails the
# install as it would offline. No cache of this view is written either.
WITHOUT_LISTS = ["-o", "Dir::Etc::SourceList=/dev/null", "-o", "Dir::Etc::SourceParts=/dev/null",
                 "-o", "Dir::Cache::pkgcache=", "-o", "Dir::Cache::srcpkgcache="]


def apt_get(*args: str) -> subprocess.CompletedProcess[str]:
    return run(["apt-get", *WITHOUT_LISTS, *args, "-y", "-q"])


def installed() -> bool:
    """Installed, or removed with its conffiles kept (not purged)."""
    res = run(["dpkg-query", "-W", "-f", "${db:Status-Status}", "tamebpf"])
    return res.returncode == 0 and res.stdout.strip() not in ("", "not-installed")


@pytest.fixture(scope="module")
def deb() -> str:
    if installed():
        pytest.skip("a tamebpf package is installed on this machine: not ours to replace")
    if os.path.exists(PINS):
        pytest.skip(f"{PINS} exists: caps in force that this test did not set")
    if os.path.exists(STATE):
        pytest.skip(f"{STATE} exists: not ours to remove")
    return build_deb()


@contextlib.contextmanager
def package(deb: str) -> Iterator[None]:
    """The package installed with apt, purged (and any pins the test's caps
    left removed) on the way out, whatever happens."""
    res = apt_get("install", deb)
    try:
        assert res.returncode == 0, res.stdout + res.stderr
        yield
    finally:
        if installed():
            run(["dpkg", "--purge", "tamebpf"])
        if os.path.isdir(PINS):  # the caps this test set, kept by the switch
            shutil.rmtree(PINS)


def attached(cg: str) -> list[str]:
    """The BPF programs attached to cgroup cg, as bpftool lists them."""
    out = sh("bpftool", "cgroup", "show", cg)
    return [line for line in out.splitlines() if re.match(r"\s*\d+\s", line)]


def second_connect_refused(cg: str, port: int) -> bool:
    """Two connections from inside cg to a listener on port: is the second
    refused (a cap of one stream in force)?"""
    script = (
        "import socket, sys\n"
        f"a = socket.create_connection(('127.0.0.1', {port}), timeout=5)\n"
        "try:\n"
        f"    b = socket.create_connection(('127.0.0.1', {port}), timeout=5)\n"
        "except PermissionError:\n"
        "    sys.exit(3)\n"
        "sys.exit(0)\n")
    proc = spawn([sys.executable, "-c", script], cgroup_path=cg)
    code = proc.wait(timeout=20)
    assert code in (0, 3), f"the connecting process failed ({code})"
    return code == 3


@contextlib.contextmanager
def listener() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield s.getsockname()[1]


def set_cap(cg: str, port: int) -> None:
    res = run(["/usr/bin/tamebpf", "cap", "set", "--cgroup", cg,
               "--dest", f"127.0.0.1/32:{port}", "--max-streams", "1"], cwd="/")
    assert res.returncode == 0, res.stderr
    assert os.path.isdir(PINS) and attached(cg), "the cap set no pins or programs"
    assert second_connect_refused(cg, port), "the cap is set but not in force"


def security_score(unit: str) -> float:
    res = run(["systemd-analyze", "security", "--offline=true", f"/lib/systemd/system/{unit}"])
    m = re.search(r"Overall exposure level for \S+: ([\d.]+)", res.stdout)
    assert m, res.stdout[-500:] + res.stderr
    return float(m[1])


def test_install_score_cap_remove_purge(deb: str) -> None:
    with listener() as port, cgroup() as cg, package(deb):
        files = run(["dpkg", "-L", "tamebpf"]).stdout.split()
        assert "/usr/share/doc/tamebpf/copyright" in files, files
        conffiles = Path("/var/lib/dpkg/info/tamebpf.conffiles").read_text().split()
        assert {"/etc/tamebpf/caps.toml", "/etc/default/tamebpf",
                "/etc/default/tamebpf-export"} <= set(conffiles), conffiles
        compiled = glob.glob(f"{PYLIB}/tamebpf/__pycache__/cli.cpython-*.pyc")
        assert compiled, "postinst did not byte-compile the Python package"
        assert os.path.isdir(STATE), f"postinst made no {STATE}"
        assert Path(STATE).stat().st_mode & 0o777 == 0o750, oct(Path(STATE).stat().st_mode)
        # The Prometheus example, as installed, finds its rule file.
        if shutil.which("promtool"):
            res = run(["promtool", "check", "config",
                       "/usr/share/tamebpf/prometheus/prometheus-example.yml"])
            assert res.returncode == 0, res.stdout + res.stderr

        analyze = shutil.which("systemd-analyze")
        if analyze:
            for unit, limit in UNITS.items():
                res = run([analyze, "verify", f"/lib/systemd/system/{unit}"])
                assert res.returncode == 0 and not res.stderr.strip(), res.stderr
                score = security_score(unit)
                print(f"systemd-analyze security {unit}: {score} (at most {limit})")
                assert score <= limit, f"{unit}: exposure {score} > {limit}"
            text = Path("/lib/systemd/system/tamebpf-caps.service").read_text()
            assert "/etc/tamebpf/caps.toml" in text and "Edit to match" not in text

        set_cap(cg, port)
        # The caps unit's run-time state, which purge (not remove) must take.
        Path(STATE, "marker").write_text("made by the test\n")
        assert os.path.isdir(PINS) and attached(cg), "the cap went before the package"
        res = apt_get("remove", "tamebpf")
        assert res.returncode == 0, res.stdout + res.stderr
        print(res.stdout)
        assert "stream caps lifted" in res.stdout, res.stdout
        assert not os.path.exists(PINS), f"remove left {os.listdir(PINS)} in {PINS}"
        assert not attached(cg), f"remove left programs attached: {attached(cg)}"
        assert not second_connect_refused(cg, port), "connections still refused after remove"
        assert not os.path.exists(PYLIB), f"remove left {PYLIB} (byte-compiled files?)"
        assert os.path.exists(f"{STATE}/marker"), "remove (not purge) took the state"
        assert os.path.exists("/etc/tamebpf/caps.toml"), "remove (not purge) took a conffile"

        res = apt_get("purge", "tamebpf")
        assert res.returncode == 0, res.stdout + res.stderr
        leftovers = [p for p in (STATE, "/etc/tamebpf", "/etc/default/tamebpf",
                                 "/etc/default/tamebpf-export", "/usr/lib/tamebpf")
                     if os.path.exists(p)]
        assert not leftovers, f"purge left {leftovers}"


def test_remove_keeps_caps_when_told(deb: str) -> None:
    with listener() as port, cgroup() as cg, package(deb):
        Path("/etc/default/tamebpf").write_text("TAMEBPF_KEEP_CAPS_ON_REMOVE=yes\n")
        set_cap(cg, port)
        res = apt_get("remove", "tamebpf")
        assert res.returncode == 0, res.stdout + res.stderr
        assert "caps kept in force" in res.stdout, res.stdout
        assert os.path.isdir(PINS) and attached(cg), "the kept cap is gone"
        assert second_connect_refused(cg, port), "the kept cap is no longer in force"
    # package() purged, and removed the pins of the cap this test kept.
    assert not os.path.exists(PINS) and not os.path.exists(STATE)

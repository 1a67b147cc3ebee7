"""Installing tamebpf the two ways an operator would: `make install` into a
prefix, and the Debian package (`make deb`, then dpkg). Both are run, not
only inspected: the installed command loads the real library and BPF."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.root
REPO = Path(__file__).resolve().parents[2]
TELEMETRY_CAPS = "+bpf,+perfmon,+net_admin"


def run(argv: list[str], timeout: float = 300, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                          **kw)  # type: ignore[call-overload]


def local_bin() -> list[str]:
    return sorted(os.listdir("/usr/local/bin")) if os.path.isdir("/usr/local/bin") else []


def test_make_install_into_a_prefix_runs_and_links_nothing(tmp_path: Path) -> None:
    before = local_bin()
    prefix = tmp_path / "prefix"
    res = run(["make", "-s", "-C", str(REPO), "install", f"PREFIX={prefix}"])
    assert res.returncode == 0, res.stderr
    assert local_bin() == before, "make install touched /usr/local/bin"
    tamebpf = prefix / "bin" / "tamebpf"
    res = run([str(tamebpf), "flows", "--json"], cwd="/")
    assert res.returncode == 0, res.stderr
    assert isinstance(json.loads(res.stdout), list), res.stdout[:200]
    assert (prefix / "lib" / "tamebpf" / "libtamebpf.so").is_file()


def test_deb_installs_runs_for_a_user_with_capabilities_and_purges() -> None:
    if run(["dpkg", "-s", "tamebpf"]).returncode == 0:
        pytest.skip("a tamebpf package is installed on this machine: not ours to replace")
    res = run(["make", "-s", "-C", str(REPO), "deb"])
    assert res.returncode == 0, res.stderr
    debs = glob.glob(str(REPO / "build" / "tamebpf_*.deb"))
    assert len(debs) == 1, debs
    try:
        res = run(["dpkg", "-i", debs[0]])
        assert res.returncode == 0, res.stdout + res.stderr
        files = run(["dpkg", "-L", "tamebpf"]).stdout.split()
        assert "/usr/bin/tamebpf" in files and not [f for f in files if "/usr/local" in f], files
        pages = [f for f in files if f.startswith("/usr/share/man/man1/tamebpf")]
        assert "/usr/share/man/man1/tamebpf-advise.1.gz" in pages, pages
        assert "/usr/share/bash-completion/completions/tamebpf" in files, files
        res = run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                   f"--inh-caps={TELEMETRY_CAPS}", f"--ambient-caps={TELEMETRY_CAPS}",
                   "/usr/bin/tamebpf", "flows", "--json"], cwd="/", env={"PATH": "/usr/bin"})
        assert res.returncode == 0, f"as nobody with {TELEMETRY_CAPS}: {res.stderr}"
        assert isinstance(json.loads(res.stdout), list)
        analyze = shutil.which("systemd-analyze")
        if analyze:
            res = run([analyze, "verify", "/lib/systemd/system/tamebpf-export.service"])
            assert res.returncode == 0 and not res.stderr.strip(), res.stderr
    finally:
        res = run(["dpkg", "--purge", "tamebpf"])
    assert res.returncode == 0, res.stderr
    assert not os.path.exists("/usr/bin/tamebpf"), "purge left /usr/bin/tamebpf"
    assert not os.path.exists("/etc/default/tamebpf-export"), "purge left the defaults file"

"""Installing tamebpf the two ways an operator would: `make install` into a
prefix, and the Debian package (`make deb`: debian/, built with
dpkg-buildpackage). The package is checked as Debian checks one (lintian,
hardening, stripping) and run, not only inspected: the installed command
loads the real library and BPF."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from tests.packaging.packages import REPO, assert_pages_as_made_here, deb, run

pytestmark = pytest.mark.root
TELEMETRY_CAPS = "+bpf,+perfmon,+net_admin"
SHARE = "/usr/share/tamebpf"
CONTRIB_FILES = {f"{SHARE}/grafana/tamebpf-dashboard.json",
                 f"{SHARE}/grafana/provisioning/dashboards/tamebpf.yaml",
                 f"{SHARE}/grafana/provisioning/datasources/tamebpf-prometheus.yaml",
                 f"{SHARE}/prometheus/tamebpf-alerts.yml",
                 f"{SHARE}/prometheus/prometheus-example.yml"}


def local_bin() -> list[str]:
    return sorted(os.listdir("/usr/local/bin")) if os.path.isdir("/usr/local/bin") else []


def deb_files(path: str) -> list[str]:
    res = run(["dpkg-deb", "-c", path])
    assert res.returncode == 0, res.stderr
    listing = res.stdout.splitlines()
    return [line.split()[5].removeprefix(".") for line in listing]


def test_make_install_into_a_prefix_runs_and_links_nothing(tmp_path: Path) -> None:
    before = local_bin()
    prefix = tmp_path / "prefix"
    res = run(["make", "-s", "-C", str(REPO), "install", f"PREFIX={prefix}"], timeout=300)
    assert res.returncode == 0, res.stderr
    assert local_bin() == before, "make install touched /usr/local/bin"
    tamebpf = prefix / "bin" / "tamebpf"
    res = run([str(tamebpf), "flows", "--json"], cwd="/")
    assert res.returncode == 0, res.stderr
    assert isinstance(json.loads(res.stdout), list), res.stdout[:200]
    assert (prefix / "lib" / "tamebpf" / "libtamebpf.so").is_file()
    installed = [str(p.relative_to(prefix)) for p in prefix.rglob("*")]
    testbed = [p for p in installed if "testbed" in p]
    assert not testbed, f"make install installed the testbed: {testbed[:5]}"


def test_lintian_finds_no_error_and_no_warning() -> None:
    if shutil.which("lintian") is None:
        pytest.skip("lintian not installed (scripts/install-deps)")
    res = run(["lintian", "--fail-on", "error,warning", deb()])
    tags = [line for line in res.stdout.splitlines() if re.match(r"[EW]: ", line)]
    assert res.returncode == 0 and not tags, res.stdout + res.stderr


def test_the_library_is_hardened_and_stripped(tmp_path: Path) -> None:
    res = run(["dpkg-deb", "-x", deb(), str(tmp_path)])
    assert res.returncode == 0, res.stderr
    lib = str(tmp_path / "usr/lib/tamebpf/libtamebpf.so")
    dynamic = run(["readelf", "-dW", lib]).stdout
    assert re.search(r"\(FLAGS\)\s+BIND_NOW", dynamic), f"no bind-now:\n{dynamic}"
    assert "GNU_RELRO" in run(["readelf", "-lW", lib]).stdout, "no RELRO segment"
    symbols = run(["readelf", "-sW", "--dyn-syms", lib]).stdout
    assert "__stack_chk_fail" in symbols, "not built with the stack protector"
    assert re.search(r"__\w+_chk@", symbols), "not built with _FORTIFY_SOURCE"
    assert ".symtab" not in run(["readelf", "-SW", lib]).stdout, "the library is not stripped"


def test_the_man_pages_and_completion_are_those_make_man_makes(tmp_path: Path) -> None:
    res = run(["dpkg-deb", "-x", deb(), str(tmp_path / "root")])
    assert res.returncode == 0, res.stderr
    assert_pages_as_made_here(tmp_path / "root", tmp_path)


def test_the_package_ships_contrib_and_no_testbed() -> None:
    files = deb_files(deb())
    assert set(files) >= CONTRIB_FILES, sorted(CONTRIB_FILES - set(files))
    testbed = [f for f in files if "testbed" in f.partition("/python/")[2]]
    assert not testbed, f"the testbed is not part of the product: {testbed[:5]}"
    assert not [f for f in files if "/usr/local" in f or "__pycache__" in f]


def test_deb_installs_runs_for_a_user_with_capabilities_and_purges() -> None:
    if run(["dpkg", "-s", "tamebpf"]).returncode == 0:
        pytest.skip("a tamebpf package is installed on this machine: not ours to replace")
    if os.path.exists("/var/lib/tamebpf"):  # the purge below removes it
        pytest.skip("/var/lib/tamebpf exists: not ours to remove")
    try:
        res = run(["dpkg", "-i", deb()])
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

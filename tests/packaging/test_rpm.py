"""The EL9 source RPM and the RPM rebuilt from it (`make rpm`: `make srpm`,
then `rpmbuild --rebuild`), built here with Debian's rpm tools: rpmlint
clean, the files and dependencies an EL9 host needs, and a Python package
(with its vendored prometheus_client) that imports on Python 3.11. It is not
installed: there is no EL9 user space on this machine (docs/deploy.md says
what is and is not verified)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.kernel_fixtures import cgroup, sh, wait_for
from tests.packaging.packages import REPO, assert_pages_as_made_here, rpms, run

pytestmark = pytest.mark.slow
LIB = "/usr/lib64/tamebpf"
SHARE = "/usr/share/tamebpf"
SPEC = REPO / "packaging" / "rpm" / "tamebpf.spec"


@pytest.fixture(scope="module")
def built() -> tuple[str, str]:
    """(SRPM, RPM)."""
    for tool in ("rpmbuild", "rpmlint", "rpm2cpio", "cpio"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed: apt-get install rpm rpmlint cpio "
                        "(scripts/install-deps --test)")
    return rpms()


@pytest.fixture(scope="module")
def rpm(built: tuple[str, str]) -> str:
    return built[1]


def query(rpm: str, *args: str) -> list[str]:
    res = run(["rpm", "-qp", *args, rpm])
    assert res.returncode == 0, res.stderr
    return res.stdout.splitlines()


def test_rpmlint_is_clean_on_the_spec_srpm_and_rpm(built: tuple[str, str]) -> None:
    res = run(["rpmlint", "-c", str(REPO / "packaging" / "rpm" / "rpmlint.toml"),
               str(SPEC), *built])
    summary = res.stdout.strip().splitlines()[-1]
    assert "2 packages and 1 specfiles checked; 0 errors, 0 warnings" in summary, res.stdout


def test_the_srpm_holds_the_sources_a_builder_needs(built: tuple[str, str]) -> None:
    """Everything `rpmbuild --rebuild` used (make rpm ran it): the spec, the
    checkout's tarball, the vendored dependency's sdist and those of the man
    pages' tools, nothing else."""
    srpm = built[0]
    version = run(["rpm", "-qp", "--qf", "%{VERSION}", srpm]).stdout
    names = set(query(srpm, "-l"))
    sdists = {next((n for n in names if n.startswith(f"{p}-")), p)
              for p in ("prometheus_client", "argparse_manpage", "shtab")}
    assert names == {"tamebpf.spec", f"tamebpf-{version}.tar.gz", *sdists}, names
    assert run(["rpm", "-qp", "--qf", "%{VERSION}", built[1]]).stdout == version


def test_files_are_where_el9_looks(rpm: str) -> None:
    files = set(query(rpm, "-l"))
    for path in ("/usr/bin/tamebpf", f"{LIB}/libtamebpf.so", f"{LIB}/python/tamebpf/cli.py",
                 f"{LIB}/python/prometheus_client/__init__.py",
                 "/usr/lib/systemd/system/tamebpf-export.service",
                 "/usr/lib/systemd/system/tamebpf-caps.service",
                 "/usr/share/man/man1/tamebpf.1.gz", "/usr/share/man/man1/tamebpf-advise.1.gz",
                 "/usr/share/bash-completion/completions/tamebpf",
                 f"{SHARE}/grafana/tamebpf-dashboard.json",
                 f"{SHARE}/grafana/provisioning/dashboards/tamebpf.yaml",
                 f"{SHARE}/prometheus/tamebpf-alerts.yml",
                 f"{SHARE}/prometheus/prometheus-example.yml"):
        assert path in files, f"{path} not in the RPM"
    # EL9 names the doc and licence directories tamebpf, Debian's rpm tamebpf-VERSION.
    assert [f for f in files if re.match(r"/usr/share/doc/tamebpf[^/]*/deploy\.md$", f)]
    licences = [f for f in files if f.startswith("/usr/share/licenses/")]
    assert {os.path.basename(f) for f in licences} >= {"LICENSE", "LICENSE.prometheus_client"}
    assert not [f for f in files if "/usr/local" in f or f.startswith("/etc/default")], files
    testbed = [f for f in files if "testbed" in f.partition("/python/")[2]]
    assert not testbed, f"the testbed is not part of the product: {testbed[:5]}"
    assert set(query(rpm, "--configfiles")) == {
        "/etc/tamebpf/caps.toml", "/etc/sysconfig/tamebpf", "/etc/sysconfig/tamebpf-export"}
    compiled = [f for f in files if f.endswith(".pyc")]
    assert compiled and all(".cpython-311." in f for f in compiled), compiled[:5]


def test_dependencies_are_el9_names(rpm: str) -> None:
    requires = query(rpm, "-R")
    names = {r.split()[0] for r in requires}
    assert "python3.11" in names, requires
    assert "libbpf.so.1()(64bit)" in names, "the ELF dependency on libbpf was not found"
    debian = {"python3-prometheus-client", "libbpf1", "libelf1", "zlib1g", "python3"}
    assert not names & debian, f"Debian package names in the RPM's Requires: {names & debian}"
    assert "iperf3" in query(rpm, "--recommends")


def test_scriptlets_enable_nothing_and_lift_caps_on_erase(rpm: str) -> None:
    """The units through systemd's helper (systemd-rpm-macros), no systemctl
    of our own; the caps lifted on erase only."""
    scripts = "\n".join(query(rpm, "--scripts"))
    assert "systemctl" not in scripts, scripts
    for action in ("install-system-units", "remove-system-units", "mark-restart-system-units"):
        assert re.search(rf"systemd-update-helper {action} tamebpf-export.service", scripts), (
            f"no {action}: {scripts}")
    preun = scripts.split("preuninstall scriptlet")[1].split("scriptlet (using")[0]
    assert 'if [ "$1" -eq 0 ]' in preun, "caps must be lifted on erase only, not on upgrade"
    assert "cap apply --prune --allow-empty /dev/null" in preun
    assert "/etc/sysconfig/tamebpf" in preun


def test_payload_runs_on_python_3_11(rpm: str, tmp_path: Path) -> None:
    """The launcher asks for python3.11 first; the package imports there and
    its byte-code is 3.11's."""
    res = subprocess.run(f"rpm2cpio {rpm} | cpio -idm --quiet", shell=True, cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    launcher = (tmp_path / "usr" / "bin" / "tamebpf").read_text()
    order = re.search(r"^for py in (.*); do$", launcher, re.M)
    assert order and order[1].split()[1] == "python3.11", launcher[:800]
    assert f'"{LIB}/python"' in launcher
    units = (tmp_path / "usr/lib/systemd/system/tamebpf-export.service").read_text()
    assert "EnvironmentFile=-/etc/sysconfig/tamebpf-export" in units
    py311 = shutil.which("python3.11")
    if py311 is None:
        pytest.skip("no python3.11 here to import the package with")
    pkg = tmp_path / LIB.lstrip("/") / "python"
    # -S: not the site packages of this machine's Python; the vendored
    # prometheus_client must be the one found.
    res = run([py311, "-I", "-S", "-c", f"import sys; sys.path.insert(0, {str(pkg)!r}); "
               "from tamebpf.cli import build_parser; build_parser(); "
               "import prometheus_client; print(prometheus_client.__file__)"])
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == str(pkg / "prometheus_client" / "__init__.py"), res.stdout
    magic = run([py311, "-c", "import importlib.util, sys; "
                 "sys.stdout.write(importlib.util.MAGIC_NUMBER.hex())"]).stdout
    pyc = pkg / "tamebpf" / "__pycache__" / "cli.cpython-311.pyc"
    assert pyc.read_bytes()[:4].hex() == magic, "the byte-code is not Python 3.11's"


def test_the_man_pages_and_completion_are_those_make_man_makes(rpm: str,
                                                                tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    res = subprocess.run(f"rpm2cpio {rpm} | cpio -idm --quiet", shell=True, cwd=root,
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    assert_pages_as_made_here(root, tmp_path)


@pytest.mark.root
def test_preun_lifts_a_real_cap_on_erase(rpm: str) -> None:
    """The RPM's %preun, run as rpm runs it on erase ($1 = 0), on a cap set
    in this kernel: with no /usr/bin/tamebpf here (EL9's is not installed),
    removing the pins must detach the programs by itself."""
    pins = "/sys/fs/bpf/tamebpf"
    if os.path.exists(pins):
        pytest.skip(f"{pins} exists: caps in force that this test did not set")
    preun = run(["rpm", "-qp", "--queryformat", "%{PREUN}", rpm]).stdout
    with cgroup() as cg:
        try:
            res = run([sys.executable, "-m", "tamebpf", "cap", "set", "--cgroup", cg,
                       "--dest", "198.18.0.0/15", "--max-streams", "2"])
            assert res.returncode == 0, res.stderr
            assert os.path.isdir(pins) and sh("bpftool", "cgroup", "show", cg).strip()
            res = run(["sh", "-c", preun, "preun", "0"])
            assert res.returncode == 0, res.stderr
            assert "stream caps lifted" in res.stdout, res.stdout
            assert not os.path.exists(pins), "the pins outlived %preun"
            # The kernel releases an unpinned link from a work queue: the
            # detach may land a moment after the unlink.
            wait_for(lambda: not sh("bpftool", "cgroup", "show", cg).strip(), 5,
                     "the programs to be detached after %preun")
        finally:
            if os.path.isdir(pins):  # the cap this test set
                run([sys.executable, "-m", "tamebpf", "cap", "apply", "--prune", "--allow-empty",
                     "/dev/null"])

"""The hardened units' restrictions do not break what they run. Without
systemd (PID 1 here is not systemd), each unit's kernel-side limits are
applied as the unit would: its capabilities (a nobody user with the ambient
ones for the exporter, root with the bounding set for caps), no_new_privs,
no writable-and-executable memory, its SystemCallFilter= (expanded by
systemd-analyze) with EPERM for the rest, and its RestrictAddressFamilies=
(tests/packaging/unit_sandbox.py). Then the installed command runs under
them: the exporter serves metrics and writes JSON lines into its
LogsDirectory, `cap apply` sets and lifts a cap. Mount-namespace settings
(ProtectSystem= and friends) are not reproduced: they need systemd."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.kernel_fixtures import bpf_pin_dir, cgroup, free_port, wait_for

pytestmark = [pytest.mark.root, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
SANDBOX = Path(__file__).with_name("unit_sandbox.py")
SYSTEM_PYTHON = "/usr/bin/python3"
NOBODY = 65534


def directive(unit: str, name: str) -> list[str]:
    m = re.search(rf"^{name}=(.*)$", (DOCS / unit).read_text(), re.M)
    assert m, f"{unit} has no {name}="
    return m[1].split()


def expand_syscalls(entries: list[str]) -> set[str]:
    """SystemCallFilter= entries (@groups and names) as system call names."""
    out = subprocess.run(["systemd-analyze", "syscall-filter"], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    groups: dict[str, list[str]] = {}
    current = None
    for line in out.splitlines():
        if line.startswith("@"):
            current = line.strip()
            groups[current] = []
        elif current and line.strip() and not line.strip().startswith("#"):
            groups[current].append(line.strip())

    def names(entry: str) -> set[str]:
        if not entry.startswith("@"):
            return {entry}
        return set().union(*(names(e) for e in groups[entry]))

    return set().union(*(names(e) for e in entries))


def setpriv_caps(unit: str, name: str) -> str:
    return ",".join("+" + c.removeprefix("CAP_").lower() for c in directive(unit, name))


def families(unit: str) -> str:
    names = directive(unit, "RestrictAddressFamilies")
    return ",".join(str(int(getattr(socket, f))) for f in names)


@pytest.fixture(scope="module")
def prefix() -> Iterator[Path]:
    """`make install` into a prefix anyone may read, as the packages lay it out."""
    for tool in ("systemd-analyze", "setpriv"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed")
    if subprocess.run([SYSTEM_PYTHON, "-c", "import seccomp"], check=False).returncode:
        pytest.skip("the system Python has no libseccomp bindings: apt-get install "
                    "python3-seccomp (scripts/install-deps --test)")
    d = Path(tempfile.mkdtemp(prefix="tamebpf-test-sandbox-"))
    try:
        d.chmod(0o755)
        res = subprocess.run(["make", "-s", "-C", str(REPO), "install", f"PREFIX={d}"],
                             capture_output=True, text=True, timeout=300, check=False)
        assert res.returncode == 0, res.stderr
        # The exporter's sandbox runs as nobody, who may not be able to read
        # this checkout (a clone in a 0700 directory): it gets its own copy.
        shutil.copy(SANDBOX, d / SANDBOX.name)
        (d / SANDBOX.name).chmod(0o644)
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def sandboxed(unit: str, workdir: Path, command: list[str], script: Path = SANDBOX) -> list[str]:
    """The command under the unit's limits, by `script` (unit_sandbox.py,
    or a copy of it that the command's user can read)."""
    calls = workdir / f"{unit}.syscalls"
    calls.write_text("\n".join(sorted(expand_syscalls(directive(unit, "SystemCallFilter")))))
    return [SYSTEM_PYTHON, str(script), str(calls), families(unit), "--", *command]


@contextlib.contextmanager
def logs_directory() -> Iterator[Path]:
    """What LogsDirectory=tamebpf gives the exporter's user: a directory it owns."""
    d = Path(tempfile.mkdtemp(prefix="tamebpf-test-logs-"))
    try:
        d.chmod(0o755)
        os.chown(d, NOBODY, NOBODY)
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_exporter_works_under_its_units_limits(prefix: Path) -> None:
    unit = "tamebpf-export.service"
    caps = setpriv_caps(unit, "AmbientCapabilities")
    assert caps == setpriv_caps(unit, "CapabilityBoundingSet")
    port = free_port()
    with logs_directory() as logs:
        jsonl = logs / "flows.jsonl"
        argv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                f"--inh-caps={caps}", f"--ambient-caps={caps}", f"--bounding-set=-all,{caps}",
                *sandboxed(unit, logs, [str(prefix / "bin" / "tamebpf"), "--log-format", "json",
                                        "export", "--listen", f"127.0.0.1:{port}",
                                        "--jsonl", str(jsonl), "--interval", "1"],
                            script=prefix / SANDBOX.name)]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True, cwd="/", env={"PATH": "/usr/bin:/bin"})
        try:
            def scraped() -> bool:
                assert proc.poll() is None, f"the exporter exited: {proc.stderr.read()}"  # type: ignore[union-attr]
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                                timeout=2) as r:
                        return b"tamebpf_" in r.read()
                except OSError:
                    return False

            wait_for(scraped, 30, "the sandboxed exporter's /metrics")
            wait_for(lambda: jsonl.exists() and jsonl.stat().st_size > 0, 15,
                     f"a JSON line in {jsonl}")
            json.loads(jsonl.read_text().splitlines()[0])
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=20)
            err = proc.stderr.read() if proc.stderr else ""
            assert code == 0, f"exit {code} on SIGTERM: {err}"
            assert "not permitted" not in err.lower(), err
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)


def test_cap_apply_works_under_its_units_limits(prefix: Path, tmp_path: Path) -> None:
    unit = "tamebpf-caps.service"
    bounding = setpriv_caps(unit, "CapabilityBoundingSet")
    with cgroup() as cg, bpf_pin_dir() as pins, contextlib.closing(socket.socket()) as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(4)
        port = srv.getsockname()[1]
        capfile = tmp_path / "caps.toml"
        capfile.write_text(f'[[cap]]\ncgroup = "{cg}"\ndest = "127.0.0.1/32:{port}"\n'
                           "max_streams = 1\n")
        env = {"PATH": "/usr/bin:/bin", "TAMEBPF_PIN_DIR": pins}

        def apply(*args: str) -> subprocess.CompletedProcess[str]:
            argv = ["setpriv", f"--bounding-set=-all,{bounding}", "--inh-caps=-all",
                    *sandboxed(unit, tmp_path, [str(prefix / "bin" / "tamebpf"), "cap", "apply",
                                                *args])]
            return subprocess.run(argv, capture_output=True, text=True, timeout=120,
                                  check=False, cwd="/", env=env)

        res = apply(str(capfile))
        assert res.returncode == 0, res.stderr
        listing = subprocess.run([sys.executable, "-m", "tamebpf", "cap", "list", "--json"],
                                 capture_output=True, text=True, timeout=60, check=False,
                                 env={**os.environ, "TAMEBPF_PIN_DIR": pins})
        assert listing.returncode == 0, listing.stderr
        assert len(json.loads(listing.stdout)) == 1, listing.stdout
        res = apply("--prune", "--allow-empty", "/dev/null")
        assert res.returncode == 0, res.stderr
        assert not os.path.exists(pins), f"--prune /dev/null left {os.listdir(pins)}"


def test_the_sandbox_refuses_what_the_filter_leaves_out(tmp_path: Path) -> None:
    """The sandbox is no pass-through: a system call outside the exporter's
    filter (mount) fails with EPERM, an address family outside it (AF_PACKET)
    is refused, and memory cannot be made executable after being writable."""
    if subprocess.run([SYSTEM_PYTHON, "-c", "import seccomp"], check=False).returncode:
        pytest.skip("no python3-seccomp")
    probe = ("import ctypes, mmap, socket, sys\n"
             "libc = ctypes.CDLL(None, use_errno=True)\n"
             "bad = []\n"
             "if libc.mount(b'none', b'/mnt', b'tmpfs', 0, None) == 0: bad.append('mount')\n"
             "try:\n"
             "    socket.socket(socket.AF_PACKET, socket.SOCK_RAW); bad.append('AF_PACKET')\n"
             "except OSError: pass\n"
             "m = mmap.mmap(-1, 4096)\n"
             "addr = ctypes.addressof(ctypes.c_char.from_buffer(m))\n"
             "if libc.mprotect(ctypes.c_void_p(addr), 4096, 7) == 0: bad.append('W+X')\n"
             "print(','.join(bad)); sys.exit(0)\n")
    argv = sandboxed("tamebpf-export.service", tmp_path, [SYSTEM_PYTHON, "-c", probe])
    res = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "", f"allowed in the sandbox: {res.stdout.strip()}"

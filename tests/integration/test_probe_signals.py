"""No probe cgroup outlives its command (issue 48): `advise` stopped
mid-probe by SIGHUP or SIGQUIT removes its cgroup and exits 130 as on
SIGTERM; after a kill -9 mid-probe the traffic child dies with it, and the
next `advise` removes the cgroup left behind and says so in one line.

Real processes against a loopback iperf3 server. The assertions look only
at cgroups named after the test's own advise processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tamebpf.kernel.cgroups import require_cgroup2
from tests.integration.kernel_fixtures import free_port, iperf3_available, spawn, stop, wait_for

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(not iperf3_available(), reason="iperf3 not installed"),
]
ROOT = Path(__file__).resolve().parents[2]


def procs(name: str) -> str:
    """The PIDs in the cgroup `name` below the cgroup v2 root."""
    return Path(require_cgroup2(), name, "cgroup.procs").read_text().strip()


def probe_cgroups_of(pid: int) -> list[str]:
    root = require_cgroup2()
    return [d for d in os.listdir(root) if d.startswith(f"tamebpf-probe-{pid}-")]


@pytest.fixture
def server() -> Iterator[int]:
    """A loopback iperf3 server of the test's own; its port."""
    port = free_port()
    proc = spawn(["iperf3", "-s", "-p", str(port), "-B", "127.0.0.1"],
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: subprocess.run(["ss", "-Hltn", f"sport = :{port}"],
                                        capture_output=True, text=True).stdout.strip() != "",
                 10, "iperf3 -s to listen")
        yield port
    finally:
        stop(proc)


def advise(port: int, state: Path, *extra: str) -> subprocess.Popen[str]:
    """A probing advise (--fresh: never from memory) with long fixed probes."""
    return subprocess.Popen(
        [sys.executable, "-m", "tamebpf", "advise", f"127.0.0.1:{port}", "--max-impact", "10%",
         "--congestion", "cubic", "--state-dir", str(state), "--fresh", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT / "userspace")})


def mid_probe(proc: subprocess.Popen[str]) -> str:
    """Wait until the probe's cgroup holds its traffic child; its name."""
    def probing() -> bool:
        assert proc.poll() is None, f"advise ended before probing: {proc.communicate()}"
        return any(procs(d) for d in probe_cgroups_of(proc.pid))
    wait_for(probing, 30, "the probe's traffic child in its cgroup")
    return probe_cgroups_of(proc.pid)[0]


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGQUIT])
def test_hangup_and_quit_mid_probe_leave_nothing(server: int, tmp_path: Path,
                                                 sig: signal.Signals) -> None:
    proc = advise(server, tmp_path, "--duration", "8")
    try:
        mid_probe(proc)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, f"{sig.name}: expected exit 130, got {proc.returncode}: {err}"
    assert "interrupted" in err and "Traceback" not in err, err
    assert not probe_cgroups_of(proc.pid), f"{sig.name} left {probe_cgroups_of(proc.pid)}"


def test_kill_9_mid_probe_is_swept_by_the_next_advise(server: int, tmp_path: Path) -> None:
    proc = advise(server, tmp_path, "--duration", "8")
    try:
        name = mid_probe(proc)
        child = procs(name).split()
        proc.kill()
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    left = probe_cgroups_of(proc.pid)
    assert left == [name], f"kill -9 should leave its probe cgroup, found {left}"
    # The traffic child dies with its parent (PR_SET_PDEATHSIG): the cgroup empties.
    wait_for(lambda: not procs(name), 10, f"the traffic child {child} to die with its parent")

    time.sleep(0.5)  # the killed client's test ends on the server too
    nxt = advise(server, tmp_path, "--quick")
    try:
        _, err = nxt.communicate(timeout=120)
    finally:
        if nxt.poll() is None:
            nxt.kill()
            nxt.wait()
    said = [line for line in err.splitlines() if "removed probe cgroup" in line and name in line]
    assert len(said) == 1, f"expected one line about {name}: {err}"
    assert str(proc.pid) in said[0], said
    assert "Traceback" not in err, err
    assert not probe_cgroups_of(proc.pid), f"still left: {probe_cgroups_of(proc.pid)}"
    assert not probe_cgroups_of(nxt.pid), f"the next advise left {probe_cgroups_of(nxt.pid)}"

"""`cap set --auto` stopped by SIGTERM in the middle of its probe (issue 33):
its signals go through common/lifecycle.py as `advise`'s do, so it ends
"interrupted" (130) and leaves nothing behind: no probe cgroup, no traffic
child, no cap, pin or attached program, no network namespace, and the
peer's iperf3 server free for the next client. Real kernel, WAN testbed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tamebpf.kernel.cgroups import cgroup2_mount
from tamebpf_testbed import iperf
from tests.integration import testbed_fixtures as tbfix
from tests.integration.test_advise import probe_cgroups
from tests.integration.test_cap_cli import state

pytestmark = pytest.mark.root

RATE, RTT, QUEUE = 20.0, 20.0, 25


def probe_pids() -> list[int]:
    """The processes in the advisor's probe cgroups (its traffic child)."""
    root = Path(cgroup2_mount() or "/sys/fs/cgroup")
    pids = []
    for name in probe_cgroups():
        try:
            pids += [int(p) for p in (root / name / "cgroup.procs").read_text().split()]
        except OSError:
            continue
    return pids


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def netns_names() -> list[str]:
    out = subprocess.run(["ip", "-o", "netns", "list"], capture_output=True, text=True,
                         check=True).stdout
    return sorted(line.split()[0] for line in out.splitlines() if line.strip())


def test_sigterm_mid_probe_leaves_nothing_behind(pins: str, cg: str) -> None:
    assert not probe_cgroups(), f"probe cgroups left by an earlier run: {probe_cgroups()}"
    with tbfix.running_testbed(rate_mbit=RATE, rtt_ms=RTT, queue_pkts=QUEUE, cc="cubic") as tb:
        server = iperf.start_server(tb, 5201)
        with tbfix.killed_on_exit(server):
            receiver = tb.addresses["receiver"]
            before, namespaces = state(pins, cg), netns_names()
            # `cap set --auto` probes from the namespace it runs in: the
            # sender's. nsenter, not `ip netns exec`, which would mount its
            # own /sys and hide the host's cgroup2 and bpffs.
            proc = subprocess.Popen(
                ["nsenter", f"--net=/run/netns/{tb.namespaces['sender']}",
                 sys.executable, "-m", "tamebpf", "cap", "set", "--cgroup", cg,
                 "--dest", f"{receiver}/32", "--auto", receiver, "--max-impact", "10%",
                 "--congestion", "cubic"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                children: list[int] = []
                deadline = time.monotonic() + 20
                while not children and proc.poll() is None and time.monotonic() < deadline:
                    time.sleep(0.05)
                    children = probe_pids()
                assert children, f"no probe started: {proc.poll()} {probe_cgroups()}"
                time.sleep(1.0)  # the probe's streams are sending
                assert proc.poll() is None, "the probe ended before it could be stopped"
                assert any(alive(p) for p in children), "the traffic child ended early"
                proc.send_signal(signal.SIGTERM)
                out, err = proc.communicate(timeout=30)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            assert proc.returncode == 130, f"exit {proc.returncode}: {err}"
            assert err.strip().splitlines()[-1] == "tamebpf: interrupted", err
            assert "Traceback" not in err, err
            assert out == "", out
            assert not probe_cgroups(), f"probe cgroups left: {probe_cgroups()}"
            assert not [p for p in children if alive(p)], f"traffic child left: {children}"
            assert state(pins, cg) == before, "the interrupted cap set changed caps or programs"
            assert netns_names() == namespaces
            # The child's streams and control connection are gone: the server
            # takes the next client.
            iperf.wait_for(lambda: iperf.server_idle(tb, 5201), 15.0, "server idle")
            assert os.path.isdir(cg)

"""`tamebpf export --ack-sampling` samples a path's capacity from a real
transfer's ACKs (exporter/acksampling.py) on the testbed's shaped path: a window
opens on connections that existed before export started, logs their ACKs
at the link's rate and is detached; the estimate, that near the transfer's
own goodput, is not trusted (on a shared path it is the share); a paced
group gets no window. Underneath, a window (kernel/acktrain.AckWindow) logs
the ACKs of exactly the connections it names. Each test uses its own path
memory (conftest) and pin directory; which BPF programs export holds is read
from its own fds."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from tamebpf.common.errors import TamebpfError
from tamebpf.kernel.acktrain import AckWindow
from tamebpf.kernel.flows import FlowReader
from tamebpf.paths.entry import PathEntry, PathKey
from tamebpf.paths.store import PathStore, state_dir
from tamebpf_testbed import Testbed, iperf
from tests.integration import testbed_fixtures as tbfix
from tests.integration.kernel_fixtures import spawn, stop, wait_for

pytestmark = pytest.mark.root
TAMEBPF = [sys.executable, "-m", "tamebpf"]
RATE, RTT, QUEUE = 20.0, 20.0, 25
CAPACITY = RATE * 1448 / 1514  # TCP goodput the bottleneck allows
WINDOW_PROGRAMS = {"log_ack", "mark_window"}  # bpf/acktrain.bpf.c


@pytest.fixture(scope="module")
def tb() -> Iterator[Testbed]:
    with tbfix.running_testbed(rate_mbit=RATE, rtt_ms=RTT, queue_pkts=QUEUE, cc="cubic") as t:
        yield t


class Programs:
    """The names of the BPF programs a process holds (fds of programs and
    links), read from /proc/PID/fdinfo; names are asked of bpftool once per id."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.names: dict[int, str] = {}

    def held(self) -> set[str]:
        ids = set()
        with contextlib.suppress(FileNotFoundError):
            for fd in os.listdir(f"/proc/{self.pid}/fdinfo"):
                try:
                    text = Path(f"/proc/{self.pid}/fdinfo/{fd}").read_text()
                except OSError:
                    continue  # closed meanwhile
                m = re.search(r"^prog_id:\s*(\d+)", text, re.M)
                if m:
                    ids.add(int(m.group(1)))
        for i in ids - set(self.names):
            out = subprocess.run(["bpftool", "-j", "prog", "show", "id", str(i)],
                                 capture_output=True, text=True, timeout=10)
            self.names[i] = json.loads(out.stdout).get("name", "?") if out.returncode == 0 \
                else "?"
        return {self.names[i] for i in ids}


@contextlib.contextmanager
def exporter(ns: str, sampling: bool = True
             ) -> Iterator[tuple[subprocess.Popen[bytes], IO[str], str]]:
    """export reading the sender's namespace, learning every second (with
    --ack-sampling if `sampling`); its JSON log lines in the yielded file,
    its JSON-lines records in the file named. Stopped with SIGTERM."""
    with tempfile.TemporaryFile("w+") as err, tempfile.NamedTemporaryFile() as jsonl:
        proc = subprocess.Popen([*TAMEBPF, "export", "--netns", ns, "--listen", "off",
                                 "--jsonl", jsonl.name, "--interval", "1",
                                 *(["--ack-sampling"] if sampling else []),
                                 "--log-format", "json"],
                                stdout=subprocess.DEVNULL, stderr=err)
        try:
            yield proc, err, jsonl.name
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def events(err: IO[str]) -> list[dict[str, Any]]:
    err.seek(0)
    out = []
    for line in err.read().splitlines():
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


def learned(key: PathKey) -> PathEntry | None:
    return PathStore(state_dir()).newest(key, with_capacity=True)


def watch(programs: Programs, until: Any, timeout: float) -> list[set[str]]:
    """What the process held, every 0.1 s, until `until()` or timeout."""
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not until():
        seen.append(programs.held())
        time.sleep(0.1)
    return seen


def test_a_window_logs_the_acks_of_the_established_connections_it_names(tb: Testbed) -> None:
    """AckWindow marks connections that were open before it, by cookie:
    the ACKs of the one named are logged (in order, advancing), the other
    stream's are not; closed, it reads nothing more."""
    dst, ns = tb.addresses["receiver"], tb.namespaces["sender"]
    server = iperf.start_server(tb, 5203)
    client = tb.popen("sender", iperf.client_argv(dst, 5203, 2, 10, "cubic", json_out=False),
                      stdout=subprocess.DEVNULL)
    with tbfix.killed_on_exit(server, client), FlowReader(netns=[ns], command="test") as r:
        def streams() -> list[int]:
            return [f.cookie for f in r.snapshot() if f.remote_port == 5203
                    and f.state == "ESTABLISHED" and f.bytes_acked > 100_000]
        wait_for(lambda: len(streams()) == 2, 10, "two iperf3 streams moving data")
        named, other = streams()
        with pytest.raises(TamebpfError, match="1 to 256 connections"):
            AckWindow([], ns)
        window = AckWindow([named], ns)
        try:
            time.sleep(1.0)
            log = window.read()
        finally:
            window.close()
        with pytest.raises(TamebpfError, match="closed"):
            window.read()
    assert set(log.flows) == {named}, f"logged {set(log.flows)}, named {named}, not {other}"
    acks = log.flows[named]
    # About 1,600 ACKs a second fill the link at 20 Mbit/s (one per 1 to 2 segments).
    assert len(acks) > 200, f"only {len(acks)} ACKs logged in 1 s"
    assert all(b[0] >= a[0] and 0 < (b[1] - a[1]) % 2**32 < 2**31
               for a, b in zip(acks, acks[1:], strict=False)), "ACKs out of order"


def test_a_window_on_a_transfers_acks_reads_the_link_and_is_not_trusted(tb: Testbed) -> None:
    """The one transfer on this path moves at the link's rate, so its ACKs
    do too; a window cannot tell that from a share of a shared path."""
    dst, ns = tb.addresses["receiver"], tb.namespaces["sender"]
    key = PathKey(f"{dst}/32", ns, "cubic")
    server = iperf.start_server(tb, 5201)
    client = tb.popen("sender", iperf.client_argv(dst, 5201, 2, 40, "cubic", json_out=False),
                      stdout=subprocess.DEVNULL)
    with tbfix.killed_on_exit(server, client):
        # The connections are established before export starts.
        iperf.wait_flows(tb, "sender", 5201, 2, client)
        with exporter(ns) as (proc, err, _):
            programs = Programs(proc.pid)
            held = watch(programs, lambda: proc.poll() is not None or any(
                e.get("event") in ("ack_capacity", "ack_no_capacity") for e in events(err)),
                timeout=35)
            time.sleep(0.5)  # the window's programs go as it closes
            after = programs.held()
            said = events(err)
        assert proc.returncode == 0, f"export exited {proc.returncode}"
    logged = [e for e in said if e.get("event") == "ack_window"]
    assert any(h >= WINDOW_PROGRAMS for h in held), (
        f"export never held the window's programs {WINDOW_PROGRAMS}: {held[-1:]}")
    assert not WINDOW_PROGRAMS & after, f"still held after the window: {after}"
    assert logged and logged[0]["dest"] == dst, logged
    refused = [e["msg"] for e in said if e.get("event") == "ack_no_capacity"]
    assert refused and "share" in refused[0], [e["msg"] for e in said][-6:]
    ran = float(re.search(r"ran at ([0-9.]+) Mbit/s", refused[0]).group(1))  # type: ignore[union-attr]
    assert abs(ran / CAPACITY - 1) <= 0.10, (
        f"the ACKs ran at {ran:.2f} Mbit/s, the link gives {CAPACITY:.2f}")
    assert learned(key) is None, "a capacity that may be a share was stored"


def test_a_paced_group_gets_no_window(tb: Testbed, pins: str, cg: str) -> None:
    """iperf3 in a cgroup paced at half the path: its ACKs are spaced at our
    own rate, so export opens no window on it and learns no capacity."""
    dst, ns = tb.addresses["receiver"], tb.namespaces["sender"]
    key = PathKey(f"{dst}/32", ns, "cubic")
    cap = subprocess.run([*TAMEBPF, "cap", "set", "--cgroup", cg, "--dest", f"{dst}/32",
                          "--mode", "pace", "--rate", f"{RATE / 2:g}M"],
                         capture_output=True, text=True, timeout=30)
    assert cap.returncode == 0, cap.stderr
    server = iperf.start_server(tb, 5202)
    client = spawn(iperf.client_argv(dst, 5202, 2, 20, "cubic", json_out=False),
                   cgroup_path=cg, netns=ns, stdout=subprocess.DEVNULL)
    with tbfix.killed_on_exit(server):
        try:
            wait_for(lambda: client.poll() is not None or _sending(tb, 5202), 10,
                     "iperf3 streams")
            with exporter(ns) as (proc, err, jsonl):
                programs = Programs(proc.pid)

                def groups() -> list[dict[str, Any]]:
                    lines = Path(jsonl).read_text().splitlines(True)
                    records = [json.loads(x) for x in lines if x.endswith("\n")]  # whole ones
                    return [r for r in records
                            if r["type"] == "group" and r["remote_addr"] == dst]

                # Until export has read a steady count (3 readings: what a
                # window waits for) and then two more: a window opens at the
                # reading that has the count (AckSampler.wanted), so one not
                # open by then does not open later.
                steady: list[float] = []

                def past_a_window() -> bool:
                    if proc.poll() is not None:
                        return True
                    if not steady and any(g["observed"] and g["paced_mbps"] for g in groups()):
                        steady.append(time.monotonic())
                    return bool(steady) and time.monotonic() - steady[0] >= 2.5

                held = watch(programs, past_a_window, timeout=20)
                said = events(err)
                found = groups()
            assert client.poll() is None, "iperf3 ended before export had watched it"
        finally:
            stop(client)
    # The group is one learn would use, but for its pace cap.
    assert any(g["observed"] and g["paced_mbps"] for g in found), found[-1:]
    assert not any(WINDOW_PROGRAMS & h for h in held), "a window opened on paced streams"
    assert not [e for e in said if e.get("event") == "ack_window"], said
    assert learned(key) is None
    assert held, "export was not watched"


def _sending(tb: Testbed, port: int) -> bool:
    out = tb.exec("sender", ["ss", "-tinH", "state", "established", f"dport = :{port}"])
    return "bytes_acked:" in out


def test_a_window_on_a_downloads_data_reads_the_link(tb: Testbed) -> None:
    """A download (iperf3 -R) is sampled by its data's arrivals: the
    window holds the data logger, reads the link's rate, and, the transfer
    being the path's only one, does not trust it (nor store it for the
    download's path)."""
    dst, ns = tb.addresses["receiver"], tb.namespaces["sender"]
    key = PathKey(f"{dst}/32", ns, "remote", "receive")
    server = iperf.start_server(tb, 5204)
    client = tb.popen("sender", iperf.client_argv(dst, 5204, 2, 40, "cubic", json_out=False,
                                                  reverse=True),
                      stdout=subprocess.DEVNULL)
    with tbfix.killed_on_exit(server, client):
        wait_for(lambda: iperf.left_slow_start(tb, "receiver", 5204, 2, served=True), 15,
                 "the download's two streams past slow start")
        with exporter(ns) as (proc, err, _):
            programs = Programs(proc.pid)
            held = watch(programs, lambda: proc.poll() is not None or any(
                e.get("event") in ("ack_capacity", "ack_no_capacity") for e in events(err)),
                timeout=35)
            said = events(err)
        assert proc.returncode == 0, f"export exited {proc.returncode}"
    assert any(h >= {"log_data", "mark_window"} for h in held), (
        f"export never held the data logger: {held[-1:]}")
    assert not any("log_ack" in h for h in held), "an ACK logger on a download"
    refused = [e["msg"] for e in said if e.get("event") == "ack_no_capacity"]
    assert refused and "data from" in refused[0] and "share" in refused[0], \
        [e["msg"] for e in said][-6:]
    ran = float(re.search(r"arrived at ([0-9.]+) Mbit/s", refused[0]).group(1))  # type: ignore[union-attr]
    assert abs(ran / CAPACITY - 1) <= 0.10, (
        f"the data arrived at {ran:.2f} Mbit/s, the link gives {CAPACITY:.2f}")
    assert learned(key) is None, "a capacity that may be a share was stored"

"""`tamebpf watch` for real: the live screen driven in tmux (80x24) while
iperf3 runs, the terminal restored on q, Ctrl-C and SIGTERM, --json with a
passive fit from two real stream counts, and thousands of flows."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.kernel_fixtures import (
    cgroup,
    default_signals,
    free_port,
    iperf3_available,
    sh,
    spawn,
    stop,
    unique,
    wait_for,
)

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(not iperf3_available(), reason="iperf3 not installed"),
]

TAMEBPF = [sys.executable, "-m", "tamebpf"]


class Tmux:
    """A tmux server of its own (socket named after the test) with one 80x24
    session running a plain shell; killed by that name."""

    def __init__(self) -> None:
        self.name = unique("tamebpf-watch-")

    def tmux(self, *args: str, check: bool = True) -> str:
        return sh("tmux", "-L", self.name, *args, check=check)

    def start(self) -> None:
        # The server, its shell and what the shell runs inherit this: Ctrl-C
        # must reach them as at a terminal (kernel_fixtures.default_signals).
        subprocess.run(["tmux", "-L", self.name, "-f", "/dev/null", "new-session", "-d", "-s",
                        self.name, "-x", "80", "-y", "24", "bash --norc --noprofile"],
                       check=True, capture_output=True, timeout=20,
                       preexec_fn=default_signals)
        wait_for(lambda: self.screen().rstrip().endswith(("#", "$")), 5,
                 "the shell prompt in tmux")

    def kill(self) -> None:
        self.tmux("kill-server", check=False)

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", self.name, *keys)

    def type(self, text: str) -> None:
        self.tmux("send-keys", "-t", self.name, "-l", text)

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", self.name)

    def display(self, fmt: str) -> str:
        return self.tmux("display-message", "-p", "-t", self.name, fmt).strip()

    def wait_screen(self, pattern: str, what: str, timeout: float = 10) -> str:
        got: list[str] = []

        def found() -> bool:
            got[:] = [self.screen()]
            return re.search(pattern, got[0], re.M) is not None

        try:
            wait_for(found, timeout, what, step=0.1)
        except AssertionError:
            raise AssertionError(f"timed out waiting for {what} ({pattern!r}); "
                                 f"screen was:\n{got[0] if got else ''}") from None
        return got[0]

    def child_pid(self) -> int:
        """The process the shell is running (the watch)."""
        shell = int(self.display("#{pane_pid}"))
        with open(f"/proc/{shell}/task/{shell}/children") as f:
            kids = f.read().split()
        assert len(kids) == 1, f"expected one child of the shell, got {kids}"
        return int(kids[0])

    def terminal_modes(self) -> str:
        """`stty -a` as the shell sees it after the watch exited."""
        self.keys("clear; stty -a | tr ';' '\\n' | grep -Eo -- '-?(icanon|echo) ' | tr -d '\\n'; "
                  "echo ' MODES'", "Enter")
        screen = self.wait_screen(r"MODES$", "stty output")
        line = next(x for x in screen.splitlines() if x.endswith(" MODES"))
        return line


@contextlib.contextmanager
def tmux() -> Iterator[Tmux]:
    t = Tmux()
    try:
        t.start()
        yield t
    finally:
        t.kill()


@contextlib.contextmanager
def iperf(cg: str, streams: int, seconds: int, rate: str = "40M",
          port: int | None = None) -> Iterator[int]:
    """An iperf3 server and client in cgroup cg, on loopback, for `seconds`."""
    port = port or free_port()
    server = spawn(["iperf3", "-s", "-p", str(port)], cgroup_path=cg,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = None
    try:
        wait_for(lambda: bool(sh("ss", "-tlnH", f"sport = :{port}").strip()), 5,
                 f"iperf3 server on port {port}")
        client = spawn(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-P", str(streams),
                        "-t", str(seconds), "-b", rate], cgroup_path=cg,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        yield port
    finally:
        if client:
            stop(client)
        stop(server)


def watch_cmd(*args: str) -> str:
    return " ".join([*TAMEBPF, "watch", *args])


ROW = r"^[ >]iperf3\s+127\.0\.0\.1\s+send\s+{n}\s"  # COMM DESTINATION DIR STRMS


def test_live_view_in_tmux_shows_the_iperf3_group() -> None:
    with cgroup() as cg, tmux() as term, iperf(cg, streams=4, seconds=30):
        term.keys(f"{watch_cmd('--interval', '0.5', '--cgroup', cg)}; echo EXIT=$?", "Enter")
        screen = term.wait_screen(ROW.format(n=4), "iperf3 -> 127.0.0.1 with 4 streams")
        lines = screen.splitlines()
        # the server, in the same cgroup, receives: its 4 streams are a
        # group of their own
        assert lines[0].startswith("tamebpf watch - 2 groups, 8 streams"), (
            f"expected the header with 2 groups of 4 streams, got {lines[0]!r}")
        assert term.display("#{alternate_on}") == "1", "watch did not use the alternate screen"
        row = next(x for x in lines if re.match(ROW.format(n=4), x)).split()
        mbps = float(row[4])
        assert 100 <= mbps <= 200, f"expected ~160 Mbit/s (4 x 40M), got {mbps} in {row}"
        term.keys("n")
        term.wait_screen(r"^sort streams ", "sort by streams after 'n'")
        term.keys("/")
        term.type("nomatch")
        term.keys("Enter")
        term.wait_screen(r"no group matches the filter", "the filter hiding the group")
        term.keys("Escape")
        term.wait_screen(ROW.format(n=4), "the group back after Esc")
        term.keys("q")
        term.wait_screen(r"^EXIT=0$", "watch to exit with 0 on q")
        assert term.display("#{alternate_on}") == "0", "alternate screen left on after q"
        modes = term.terminal_modes()
        assert "-icanon" not in modes and "-echo" not in modes and "icanon" in modes, (
            f"terminal not restored after q: stty shows {modes!r}")


@pytest.mark.parametrize("how", ["SIGTERM", "Ctrl-C"])
def test_terminal_restored_on_signals(how: str) -> None:
    with cgroup() as cg, tmux() as term:
        term.keys(f"{watch_cmd('--interval', '0.5', '--cgroup', cg)}; echo EXIT=$?", "Enter")
        term.wait_screen(r"^tamebpf watch - ", "the watch screen")
        if how == "SIGTERM":
            os.kill(term.child_pid(), signal.SIGTERM)
            expected = 0  # how a service manager stops it: a clean exit
        else:
            term.keys("C-c")
            expected = 0
        term.wait_screen(rf"^EXIT={expected}$", f"watch to exit with {expected} on {how}")
        assert term.display("#{alternate_on}") == "0", f"alternate screen left on after {how}"
        modes = term.terminal_modes()
        assert "-icanon" not in modes and "-echo" not in modes and "icanon" in modes, (
            f"terminal not restored after {how}: stty shows {modes!r}")


def run_json(cg: str, iterations: int, interval: float = 0.5,
             extra: tuple[str, ...] = ()) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*TAMEBPF, "watch", "--json", "--cgroup", cg, "--interval", str(interval),
         "--iterations", str(iterations), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_json_gives_a_passive_fit_from_two_real_stream_counts() -> None:
    with cgroup() as cg:
        port = free_port()
        # Runs until stopped below: each stream count lasts until the watch
        # has observed it (3 steady refreshes), not a fixed time.
        proc = run_json(cg, iterations=1000)
        lines: list[str] = []

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()

        def iperf_records() -> list[dict[str, Any]]:
            records = [json.loads(x) for x in list(lines) if x.endswith("\n")]
            return [r for r in records
                    if r["comm"] == "iperf3" and r["remote_addr"] == "127.0.0.1"]

        def observed(streams: int) -> bool:
            assert proc.poll() is None, f"watch --json exited {proc.returncode}"
            return any(streams in [o["streams"] for o in r["observed"]] for r in iperf_records())

        try:
            for streams in (1, 4):
                with iperf(cg, streams=streams, seconds=60, rate="30M", port=port):
                    wait_for(lambda n=streams: observed(n), 20,
                             f"watch to observe the {streams}-stream iperf3")
            proc.send_signal(signal.SIGTERM)  # a clean stop (exit 0)
            _, err = proc.communicate(timeout=20)
            reader.join(timeout=10)
        finally:
            stop(proc)  # type: ignore[arg-type]
        assert proc.returncode == 0, f"watch --json exited {proc.returncode}: {err}"
        mine = iperf_records()
        seen = [(r["streams"], round(r["goodput_mbps"] or 0), [o["streams"] for o in r["observed"]])
                for r in mine]
        counts = {r["streams"] for r in mine}
        assert {1, 4} <= counts, f"expected refreshes at 1 and 4 streams, got {seen}"
        fitted = [r for r in mine if r["advice"] is not None]
        assert fitted, f"no advice after 1 and 4 streams; (streams, Mbit/s, observed): {seen}"
        last = fitted[-1]
        levels = [o["streams"] for o in last["observed"]]
        assert levels == [1, 4], f"expected observations at 1 and 4 streams, got {levels}"
        one, four = (o["goodput_mbps"] for o in last["observed"])
        assert 20 <= one <= 40 and 80 <= four <= 160, (
            f"expected ~30 and ~120 Mbit/s at 1 and 4 streams, got {one:.1f}, {four:.1f}")
        assert 1 <= last["advice"]["num_flows"] <= 32, f"advice {last['advice']}"
        for r in mine:
            assert r["srtt_ms"] is None or 0 < r["srtt_ms"] < 50, f"srtt {r['srtt_ms']} ms"


def _port_busy(port: int) -> bool:
    """A client connection to port is established."""
    return bool(sh("ss", "-tnH", "state", "established", f"( dport = :{port} )").strip())


HOLDER = textwrap.dedent("""
    import resource, socket, sys, time
    n = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_NOFILE, (4 * n + 64, 4 * n + 64))
    srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(n)
    port = srv.getsockname()[1]
    conns = []
    for _ in range(n):
        c = socket.create_connection(("127.0.0.1", port), timeout=5)
        s, _ = srv.accept()
        c.sendall(b"x" * 100)
        conns += [c, s]
    print(port, flush=True)
    time.sleep(120)
""")


def test_thousands_of_flows_do_not_hold_it_back() -> None:
    pairs = 1500  # 3000 established flows
    with cgroup() as cg:
        holder = spawn([sys.executable, "-c", HOLDER, str(pairs)], cgroup_path=cg,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            assert holder.stdout is not None
            line = holder.stdout.readline()
            assert line.strip(), f"socket holder failed: {holder.stderr and holder.stderr.read()!r}"
            with iperf(cg, streams=2, seconds=20, rate="20M"):
                start = time.monotonic()
                proc = run_json(cg, iterations=4, interval=1.0, extra=("--all",))
                out, err = proc.communicate(timeout=30)
                took = time.monotonic() - start
        finally:
            stop(holder)
        assert proc.returncode == 0, f"watch exited {proc.returncode}: {err}"
        records = [json.loads(x) for x in out.splitlines()]
        refreshes = sorted({r["time"] for r in records})
        flows = max(sum(r["flows"] for r in records if r["time"] == t) for t in refreshes)
        assert flows >= 2 * pairs, f"expected >= {2 * pairs} flows in one refresh, got {flows}"
        intervals = sorted({r["interval_s"] for r in records})
        assert len(refreshes) == 4 and intervals[-1] < 1.5, (
            f"expected 4 refreshes 1 s apart over {flows} flows, got intervals {intervals}")
        # 4 refreshes of 1 s after the baseline, plus start-up (imports, BPF load).
        assert took < 4 + 4, f"4 refreshes of 1 s over {flows} flows took {took:.1f} s"
        iperf_rows = [r for r in records if r["comm"] == "iperf3" and r["streams"] == 2]
        assert iperf_rows, "the 2-stream iperf3 group is lost among thousands of idle flows"


def test_a_process_that_sends_and_receives_to_one_host_is_two_groups() -> None:
    """iperf3 uploading 2 streams and downloading 3 (-R) to the same address
    at once: watch shows one group each way, with its direction, its own
    streams and its own goodput (the bytes received for the download)."""
    with cgroup() as servers, cgroup() as cg:
        up_port, down_port = free_port(), free_port()
        procs = [spawn(["iperf3", "-s", "-p", str(p)], cgroup_path=servers,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for p in (up_port, down_port)]
        try:
            for p in (up_port, down_port):
                wait_for(lambda p=p: bool(sh("ss", "-tlnH", f"sport = :{p}").strip()), 5,
                         f"iperf3 server on port {p}")
            procs += [spawn(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-P", str(n),
                             "-t", "30", "-b", rate, *extra], cgroup_path=cg,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                      for port, n, rate, extra in ((up_port, 2, "30M", []),
                                                   (down_port, 3, "20M", ["-R"]))]

            def both() -> dict[str, dict[str, Any]]:
                res = subprocess.run([*TAMEBPF, "watch", "--json", "--cgroup", cg,
                                      "--interval", "0.5", "--iterations", "3"],
                                     capture_output=True, text=True, timeout=30)
                assert res.returncode == 0, res.stderr
                last = [json.loads(x) for x in res.stdout.splitlines()][-4:]
                return {r["direction"]: r for r in last if r["remote_addr"] == "127.0.0.1"
                        and r["streams"] > 0}

            got: dict[str, dict[str, Any]] = {}
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not (
                    got.get("send", {}).get("streams") == 2
                    and got.get("receive", {}).get("streams") == 3):
                got = both()
            text = subprocess.run([*TAMEBPF, "watch", "--once", "--cgroup", cg],
                                  capture_output=True, text=True, timeout=30).stdout
        finally:
            for proc in procs:
                stop(proc)
    assert set(got) == {"send", "receive"}, f"expected a group each way, got {got}"
    send, recv = got["send"], got["receive"]
    assert (send["streams"], recv["streams"]) == (2, 3), (send, recv)
    assert 40 <= send["goodput_mbps"] <= 80, f"~60 Mbit/s sent (2 x 30M): {send}"
    assert 40 <= recv["goodput_mbps"] <= 80, f"~60 Mbit/s received (3 x 20M): {recv}"
    rows = [ln.split() for ln in text.splitlines() if re.match(r"^[ >]iperf3\s+127\.0\.0\.1", ln)]
    assert sorted((r[2], r[3]) for r in rows) == [("recv", "3"), ("send", "2")], text

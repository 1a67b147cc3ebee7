"""Starting, checking and stopping the tamebpf-delayline processes."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tamebpf.common.errors import TamebpfError
from tamebpf_testbed import config as C
from tamebpf_testbed import shaping
from tamebpf_testbed.sh import in_ns

PROGRAM = "tamebpf-delayline"
REPO = Path(__file__).resolve().parents[2]
FIFO_PRIO = 10  # above normal tasks, below kernel threads that matter


def program_path() -> Path:
    env = os.environ.get("TAMEBPF_DELAYLINE")
    path = Path(env) if env else REPO / "build" / PROGRAM
    if not os.access(path, os.X_OK):
        raise TamebpfError(f"{path} not found", f"build it: make build/{PROGRAM}")
    return path


LINK = "link"  # the forward link: label in Testbed.pids and in its log's name
BACK = "back"  # the back link (receiver -> senders and cross)
DIRECTIONS = {"forward": LINK, "back": BACK}


@dataclass(frozen=True)
class LineSpec:
    """One tamebpf-delayline instance: its label and what it does to packets."""

    label: str
    argv: list[str]


def _bottleneck(rate_mbit: float, cfg: C.TestbedConfig, seed: int) -> list[str]:
    argv = ["--rate-bps", str(rate_mbit * 1e6), "--limit", str(cfg.queue_pkts),
            "--seed", str(seed)]
    if cfg.loss_pct > 0:
        argv += ["--loss", repr(cfg.loss_pct)]
    if cfg.aqm == "red" and cfg.red is not None:
        r = cfg.red
        argv += ["--red", f"{r.min_th},{r.max_th},{r.max_p},{r.w_q}"]
    return argv


def link_spec(cfg: C.TestbedConfig) -> LineSpec:
    """The forward link: every source's queue shares its rate and FIFO, and
    each then waits its own RTT (all of it on this path)."""
    rtt = {"sender": cfg.rtt_ms, "sender2": cfg.rtt_ms, "cross": cfg.effective_cross_rtt_ms}
    argv = []
    for host in shaping.sources(cfg.senders):
        argv += ["--queue", f"{shaping.FORWARD_QUEUE[host]}:{round(rtt[host] * 1000)}"]
    return LineSpec(LINK, argv + _bottleneck(cfg.rate_mbit, cfg, cfg.seed))


def back_spec(cfg: C.TestbedConfig) -> LineSpec:
    """The back link: the same queue, AQM and loss at the back rate, no
    delay (a download's RTT is on its ACKs' forward path), another seed
    (its drops are not the forward link's)."""
    argv = []
    for host in shaping.sources(cfg.senders):
        argv += ["--queue", f"{shaping.BACK_QUEUE[host]}:0"]
    return LineSpec(BACK, argv + _bottleneck(cfg.effective_rate_back_mbit, cfg, cfg.seed + 1))


def start(ns: str, spec: LineSpec, log: Path, timeout: float = 5.0) -> int:
    """Starts one instance in namespace ns; returns its pid once it is bound."""
    argv = in_ns(ns, [str(program_path()), "--fifo-prio", str(FIFO_PRIO), *spec.argv])
    with log.open("ab") as err:
        # Own session: it outlives `scripts/testbed up` and ignores its Ctrl-C.
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=err, start_new_session=True)
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline() if ready else b""
    proc.stdout.close()
    if line.strip() != b"ready":
        proc.kill()
        proc.wait()
        raise TamebpfError(f"delay line {spec.label} did not start",
                           f"see {log}: {log.read_text(errors='replace').strip()[-300:]}")
    return proc.pid


def stats(pid: int, log: Path, timeout: float = 5.0) -> dict[str, float]:
    """The running instance's statistics so far (SIGUSR1, then the line it
    appends to its log): packets, tail_drops, backlog, late_mean_us, ..."""
    before = log.read_text().count("\n")
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + timeout
    while log.read_text().count("\n") <= before:
        if time.monotonic() > deadline or not alive(pid):
            raise TamebpfError(f"delay line {pid} printed no statistics", f"see {log}")
        time.sleep(0.01)
    return parse_stats(log.read_text().splitlines()[-1])


def parse_stats(line: str) -> dict[str, float]:
    """'delayline: packets 10 released 9 ...' -> {"packets": 10.0, ...}."""
    words = line.split(":", 1)[1].split()
    return {k: float(v) for k, v in zip(words[::2], words[1::2], strict=True)}


def alive(pid: int) -> bool:
    """True if pid is a running (not zombie) tamebpf-delayline."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X") and PROGRAM.encode() in cmdline


def kill(pids: list[int], timeout: float = 3.0) -> None:
    """SIGTERM (the program releases its packets and prints statistics), then SIGKILL."""
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(_exists(p) for p in pids):
        _reap(pids)
        time.sleep(0.02)
    for pid in pids:
        if _exists(pid):
            _signal(pid, signal.SIGKILL)
    _reap(pids)


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _exists(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _reap(pids: list[int]) -> None:
    # Our own children (when up() ran in this process) would stay zombies.
    for pid in pids:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)

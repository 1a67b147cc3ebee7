"""One probe: n parallel iperf3 streams, measured in the kernel.

Each probe runs in a cgroup of its own, so the flow telemetry attributes
exactly the probe's flows (`FlowReader(cgroup=...)` filters in the kernel).
The cgroup and the iperf3 process are removed on every way out, including
Ctrl-C and SIGTERM (the CLI turns SIGTERM into KeyboardInterrupt).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tamebpf.advise.steady import FlowPoint, Steady, steady
from tamebpf.cgroups import require_cgroup2
from tamebpf.errors import TamebpfError
from tamebpf.kernel.flows import Flow, FlowReader

SAMPLE_INTERVAL_S = 0.1
CONNECT_TIMEOUT_MS = 3000


@dataclass(frozen=True)
class Target:
    host: str
    port: int = 5201
    netns: str | None = None  # run the probe from this network namespace
    congestion: str = "system"  # reno | cubic | bbr | system (the host's default)


@dataclass(frozen=True)
class Progress:
    index: int  # 1-based probe number
    total: int
    streams: int
    elapsed_s: float
    duration_s: float
    goodput_mbps: float | None  # over the last sample interval


@dataclass(frozen=True)
class ProbeResult:
    streams: int
    duration_s: float  # wall time of the probe
    steady: Steady
    iperf3_mbps: float | None  # iperf3's own average over its whole run


@contextlib.contextmanager
def probe_cgroup(streams: int) -> Iterator[str]:
    root = require_cgroup2()
    path = os.path.join(root, f"tamebpf-probe-{os.getpid()}-{streams}")
    os.mkdir(path)
    try:
        yield path
    finally:
        _empty_and_remove(path)


def _empty_and_remove(path: str) -> None:
    for _ in range(100):
        try:
            with open(os.path.join(path, "cgroup.procs")) as f:
                pids = [int(p) for p in f.read().split()]
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)  # processes still exiting
    raise TamebpfError(f"could not remove probe cgroup {path}", "remove it with rmdir")


def iperf3_argv(target: Target, streams: int, seconds: int) -> list[str]:
    argv = ["iperf3", "-c", target.host, "-p", str(target.port), "-P", str(streams),
            "-t", str(seconds), "-J", "--connect-timeout", str(CONNECT_TIMEOUT_MS)]
    if target.congestion != "system":
        argv += ["-C", target.congestion]
    if target.netns:
        argv = ["ip", "netns", "exec", target.netns, *argv]
    return argv


def _point(f: Flow, t: float) -> FlowPoint:
    return FlowPoint(
        t=t,
        bytes_acked=f.bytes_acked,
        data_segs_out=f.data_segs_out,
        total_retrans=f.total_retrans,
        srtt_us=f.srtt_us,
        slow_start=f.snd_ssthresh is None,
        rwnd_limited=f.snd_wnd > 0 and f.snd_wnd <= f.snd_cwnd * f.mss,
        congestion_control=f.congestion_control,
    )


def _iperf3_result(out: bytes, target: Target) -> float | None:
    """iperf3's own goodput; raises with iperf3's reason when it failed."""
    try:
        report: dict[str, Any] = json.loads(out.decode(errors="replace") or "{}")
    except json.JSONDecodeError:
        report = {}
    if report.get("error"):
        raise TamebpfError(
            f"iperf3 to {target.host}:{target.port} failed: {report['error']}",
            f"is 'iperf3 -s -p {target.port}' running there and reachable?",
        )
    try:
        return float(report["end"]["sum_received"]["bits_per_second"]) / 1e6
    except (KeyError, TypeError, ValueError):
        return None


def run_probe(target: Target, streams: int, seconds: int, index: int = 1, total: int = 1,
              on_progress: Callable[[Progress], None] | None = None) -> ProbeResult:
    series: dict[int, list[FlowPoint]] = {}
    with probe_cgroup(streams) as cg, FlowReader(
            cgroup=cg, netns=[target.netns] if target.netns else [], command="advise") as reader:
        def enter_cgroup() -> None:
            with open(os.path.join(cg, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))

        t_start = time.monotonic()
        proc = subprocess.Popen(iperf3_argv(target, streams, seconds), preexec_fn=enter_cgroup,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            deadline = t_start + seconds + CONNECT_TIMEOUT_MS / 1000 + 5
            last_total, last_t = 0, t_start
            while True:
                done = proc.poll() is not None
                now = time.monotonic()
                flows = reader.snapshot()
                # One time per snapshot: the steady window compares flows at the
                # same instants (their read times differ by microseconds).
                t = min((f.read_monotonic_ns for f in flows if not f.closed),
                        default=time.monotonic_ns()) / 1e9
                for f in flows:
                    series.setdefault(f.cookie, []).append(_point(f, t))
                acked = sum(pts[-1].bytes_acked for pts in series.values())
                if on_progress:
                    rate = (acked - last_total) * 8 / (now - last_t) / 1e6 if now > last_t else None
                    on_progress(Progress(index, total, streams, now - t_start, seconds, rate))
                last_total, last_t = acked, now
                if done:
                    break
                if now > deadline:
                    raise TamebpfError(
                        f"probe with {streams} streams to {target.host}:{target.port} did not "
                        f"finish in {deadline - t_start:.0f} s", "is the path still up?")
                time.sleep(SAMPLE_INTERVAL_S)
            out = proc.stdout.read() if proc.stdout else b""
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            if proc.stdout:
                proc.stdout.close()
    duration = time.monotonic() - t_start
    iperf3_mbps = _iperf3_result(out, target)
    if proc.returncode != 0 and iperf3_mbps is None:
        raise TamebpfError(f"iperf3 to {target.host}:{target.port} exited with status "
                           f"{proc.returncode}", "run the same iperf3 command by hand to see why")
    measured = steady(series, streams)
    if measured is None or measured.goodput_mbps <= 0:
        raise TamebpfError(
            f"probe with {streams} streams to {target.host}:{target.port} moved no data",
            "check the path and the server")
    return ProbeResult(streams, duration, measured, iperf3_mbps)

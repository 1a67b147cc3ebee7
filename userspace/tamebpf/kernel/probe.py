"""One probe: n parallel TCP streams to an iperf3 server, measured in the kernel.

The traffic comes from a forked child (kernel/iperf3_client.py) that runs in
a cgroup of its own, so the flow telemetry attributes exactly the probe's
flows (`FlowReader(cgroup=...)` filters in the kernel). The cgroup and the
child are removed on every way out, including Ctrl-C and SIGTERM (the CLI
turns SIGTERM into KeyboardInterrupt).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import select
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tamebpf.cgroups import require_cgroup2
from tamebpf.errors import TamebpfError
from tamebpf.estimate.acktrain import pair_rates
from tamebpf.estimate.advice import ProbeResult, Target
from tamebpf.estimate.steady import FlowPoint, Steady, only_data_flows, steady
from tamebpf.kernel import iperf3_client
from tamebpf.kernel.acktrain import AckTrain
from tamebpf.kernel.flows import Flow, FlowReader
from tamebpf.kernel.netns import enter_netns
from tamebpf.kernel.synrto import SynRto

SAMPLE_INTERVAL_S = 0.1
# Set-up and result exchange, each: on a congested path a SYN or a control
# message can be dropped more than once (1 s + 2 s of kernel backoff already
# exceeded 3 s on the testbed with 30 cross flows in a 25-packet queue).
CONNECT_TIMEOUT_MS = 8000
# Resend the run's very first SYN after this, not Linux's 1 s (no RTT is
# known yet; kernel/synrto.py). Shorter than the RTT of most wide-area paths
# would resend a SYN for nothing; longer, and a SYN dropped by a congested
# path costs most of a probe's start. A path slower than this gets a
# duplicate SYN, which is harmless.
FIRST_SYN_RTO_US = 300_000
# How often a probe that may end early looks at what it has measured.
CHECK_INTERVAL_S = 0.25

# Whether a probe has measured enough: given the steady window so far and a
# way to read its ACK pair rates (Mbit/s; read only when needed).
StopRule = Callable[[Steady, Callable[[], list[float]]], bool]


@dataclass(frozen=True)
class Progress:
    index: int  # 1-based probe number
    total: int
    streams: int
    elapsed_s: float
    duration_s: float
    goodput_mbps: float | None  # over the last sample interval


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


def _child(target: Target, streams: int, seconds: float, cgroup: str, out_fd: int,
           fast_start: bool) -> None:
    """The probe's traffic, in a forked child: it joins the probe's cgroup
    (sockets belong to the cgroup of the task that creates them) and, when
    asked, the network namespace; it reports one JSON line and exits without
    running any of the parent's clean-up."""
    code = 1
    enough = [False]

    def knows_enough(signum: int, frame: object) -> None:
        enough[0] = True

    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        # The parent's measurement is tight enough: end the test now, cleanly.
        signal.signal(signal.SIGUSR1, knows_enough)
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
        if target.netns:
            enter_netns(target.netns)
        cc = None if target.congestion == "system" else target.congestion
        r = iperf3_client.run(target.host, target.port, streams, seconds, cc,
                              CONNECT_TIMEOUT_MS / 1000, pipelined=fast_start,
                              stop=lambda: enough[0])
        msg: dict[str, Any] = {"received_mbps": r.received_mbps, "seconds": r.seconds,
                               "data_cookies": list(r.data_cookies),
                               "setup_s": r.setup_s, "finish_s": r.finish_s}
        code = 0
    except iperf3_client.Iperf3Error as err:
        msg = {"error": str(err)}
    except BaseException as err:  # noqa: BLE001 - whatever it is, the parent reports it
        msg = {"error": f"{type(err).__name__}: {err}"}
    try:
        os.write(out_fd, json.dumps(msg).encode() + b"\n")
    finally:
        os._exit(code)


def _spawn(target: Target, streams: int, seconds: float, cgroup: str,
           fast_start: bool) -> tuple[int, int]:
    """Fork the traffic child; returns (pid, read end of its report pipe)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        _child(target, streams, seconds, cgroup, w, fast_start)
    os.close(w)
    return pid, r


def _read_report(fd: int) -> dict[str, Any]:
    data = b""
    while chunk := os.read(fd, 4096):
        data += chunk
    try:
        report = json.loads(data or b"{}")
    except json.JSONDecodeError:
        report = {}
    return report if isinstance(report, dict) else {}


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
        mss=f.mss,
        ipv6=f.family == "ipv6",
    )


def _ack_rates(ack_train: AckTrain, mss: int | None) -> list[float]:
    return pair_rates(ack_train.read(), mss or 0)


def run_probe(target: Target, streams: int, seconds: float, index: int = 1, total: int = 1,
              on_progress: Callable[[Progress], None] | None = None,
              srtt_us: int = 0, fast_start: bool = True,
              enough: StopRule | None = None) -> ProbeResult:
    """`srtt_us`: the path's RTT from an earlier probe (0: unknown), so that
    this probe's first SYN already gets the short timeout (kernel/synrto.py).
    `fast_start=False` leaves SYN timeouts to the kernel and has the client
    wait for each server state, as iperf3 does (for make probetime only).
    `enough`: end the probe before `seconds` of traffic once it says the
    measurement so far is tight enough (estimate/adaptive.py); None: always
    `seconds`."""
    series: dict[int, list[FlowPoint]] = {}
    stopping = False
    last_check = 0.0
    with contextlib.ExitStack() as stack:
        cg = stack.enter_context(probe_cgroup(streams))
        reader = stack.enter_context(FlowReader(
            cgroup=cg, netns=[target.netns] if target.netns else [], command="advise"))
        syn_rto = stack.enter_context(SynRto(cg, srtt_us, FIRST_SYN_RTO_US)) \
            if fast_start else None
        # Every ACK of the probe's connections, for the capacity estimate.
        ack_train = stack.enter_context(AckTrain(cg))
        t_start = time.monotonic()
        pid, report_fd = _spawn(target, streams, seconds, cg, fast_start)
        status: int | None = None
        try:
            deadline = t_start + seconds + 2 * CONNECT_TIMEOUT_MS / 1000 + 2
            last_total, last_t = 0, t_start
            while True:
                # The child writes its report as its last act: wake up for it
                # at once rather than at the next sample.
                done = bool(select.select([report_fd], [], [], 0)[0])
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
                if enough is not None and not stopping and not done and \
                        now - last_check >= CHECK_INTERVAL_S:
                    last_check = now
                    so_far = steady(series, streams)
                    if so_far is not None and enough(
                            so_far, functools.partial(_ack_rates, ack_train, so_far.mss)):
                        # The child ends the test as iperf3 would at its end.
                        os.kill(pid, signal.SIGUSR1)
                        stopping = True
                if done:
                    report = _read_report(report_fd)
                    os.waitpid(pid, 0)
                    status = 0
                    break
                if now > deadline:
                    raise TamebpfError(
                        f"probe with {streams} streams to {target.host}:{target.port} did not "
                        f"finish in {deadline - t_start:.0f} s", "is the path still up?")
                select.select([report_fd], [], [], SAMPLE_INTERVAL_S)
        finally:
            if status is None:  # interrupted or timed out: stop the traffic now
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            os.close(report_fd)
        learned_srtt_us = syn_rto.state().srtt_us if syn_rto else 0
        acks = ack_train.read()
    duration = time.monotonic() - t_start
    if "error" in report or "received_mbps" not in report:
        raise TamebpfError(
            f"iperf3 probe to {target.host}:{target.port} failed: "
            f"{report.get('error', 'no report from the probe')}",
            f"is 'iperf3 -s -p {target.port}' running there, reachable and idle?")
    measured = steady(only_data_flows(series, report.get("data_cookies")), streams)
    if measured is None or measured.goodput_mbps <= 0:
        raise TamebpfError(
            f"probe with {streams} streams to {target.host}:{target.port} moved no data",
            "check the path and the server")
    return ProbeResult(streams, duration, measured, report["received_mbps"], learned_srtt_us,
                       report.get("setup_s"), report.get("finish_s"),
                       tuple(pair_rates(acks.only(report.get("data_cookies")), measured.mss or 0)))

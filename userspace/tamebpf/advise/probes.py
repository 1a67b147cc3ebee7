"""One probe: n parallel TCP streams to an iperf3 server, measured in the kernel.

The traffic comes from a forked child (iperf3_client.py) that runs in
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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from tamebpf import iperf3_client
from tamebpf.advise.estimate.acktrain import pair_rates
from tamebpf.advise.estimate.steady import FlowPoint, Steady, only_data_flows, steady
from tamebpf.advise.record import TIME_LIMIT, ProbeResult, Target
from tamebpf.cgroups import require_cgroup2
from tamebpf.errors import TamebpfError
from tamebpf.kernel.acktrain import AckTrain
from tamebpf.kernel.flows import Flow, FlowReader
from tamebpf.kernel.netns import enter_netns
from tamebpf.kernel.synrto import SynRto
from tamebpf.records import Progress

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
# way to read its ACK pair rates (Mbit/s; read only when needed). A true
# answer ends the stage; a string says why (shown with the probe).
StopRule = Callable[[Steady, Callable[[], list[float]]], "bool | str | None"]



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


class _StopRequests:
    """The child's side of the parent's "stage k has measured enough": one
    byte per request on a pipe, so a request for a stage that has already
    ended can never cut the next one short."""

    def __init__(self, fd: int) -> None:
        self.fd, self.asked = fd, set[int]()
        os.set_blocking(fd, False)

    def __call__(self, stage: int) -> bool:
        with contextlib.suppress(BlockingIOError):
            self.asked.update(os.read(self.fd, 64))
        return stage in self.asked


def _child(target: Target, stages: Sequence[tuple[int, float]], cgroup: str, out_fd: int,
           stop_fd: int, fast_start: bool) -> None:
    """The probe's traffic, in a forked child: it joins the probe's cgroup
    (sockets belong to the cgroup of the task that creates them) and, when
    asked, the network namespace. It writes a JSON line as each stage begins
    and a last one with the test's report, and exits without running any of
    the parent's clean-up."""
    code = 1

    def stage_begins(k: int, t: float, cookies: tuple[int, ...]) -> None:
        os.write(out_fd, json.dumps({"stage": k, "t": t, "cookies": cookies}).encode() + b"\n")

    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
        if target.netns:
            enter_netns(target.netns)
        cc = None if target.congestion == "system" else target.congestion
        r = iperf3_client.run_stages(target.host, target.port, stages, cc,
                                     CONNECT_TIMEOUT_MS / 1000, pipelined=fast_start,
                                     stop=_StopRequests(stop_fd), on_stage=stage_begins)
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


@dataclass
class _Child:
    pid: int
    report_fd: int  # its JSON lines
    stop_fd: int  # our stop requests
    pending: bytes = b""

    def lines(self) -> list[dict[str, Any]]:
        """The complete lines written so far (never blocks; [] at end of file)."""
        while select.select([self.report_fd], [], [], 0)[0]:
            chunk = os.read(self.report_fd, 65536)
            if not chunk:
                break
            self.pending += chunk
        *done, self.pending = self.pending.split(b"\n")
        out = []
        for line in done:
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                obj = {"error": f"unreadable probe report {line[:80]!r}"}
            out.append(obj if isinstance(obj, dict) else {})
        return out


def _spawn(target: Target, stages: Sequence[tuple[int, float]], cgroup: str,
           fast_start: bool) -> _Child:
    """Fork the traffic child, with a pipe each way."""
    r, w = os.pipe()
    stop_r, stop_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.close(stop_w)
        _child(target, stages, cgroup, w, stop_r, fast_start)
    os.close(w)
    os.close(stop_r)
    return _Child(pid, r, stop_w)


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
        delivered_bytes=f.delivered * f.mss,
        cong_events=f.cong_events,
    )


# A stop rule may ask for the ACK pair rates at every check; reading the log
# (up to 131072 ACKs) is the costly part of a check, so an answer is reused
# for this long.
ACK_RATES_REUSE_S = 1.0


class _AckRates:
    """The current stage's ACK pair rates, read at most every
    ACK_RATES_REUSE_S (a rule deciding on the capacity can wait that long)."""

    def __init__(self, ack_train: AckTrain) -> None:
        self.ack_train = ack_train
        self.read_at = -1.0
        self.stage = -1
        self.rates: list[float] = []

    def __call__(self, k: int, stage: _Stage, mss: int | None) -> list[float]:
        now = time.monotonic()
        if k != self.stage or now - self.read_at >= ACK_RATES_REUSE_S:
            log = self.ack_train.read().only(stage.cookies).between(stage.begin_ns, None)
            self.rates, self.read_at, self.stage = pair_rates(log, mss or 0), now, k
        return self.rates


@dataclass
class _Stage:
    first: bool
    streams: int
    seconds: float
    begin: float = 0.0  # monotonic seconds; set when the child says it began
    cookies: tuple[int, ...] = ()
    end: float | None = None

    @property
    def since(self) -> float:
        """Where its measurement starts: the first stage's at the connections'
        first samples, as a probe of its own is measured; a later one's when
        its new streams begin to send."""
        return 0.0 if self.first else self.begin

    @property
    def begin_ns(self) -> int:
        return int(self.since * 1e9)

    def points(self, series: dict[int, list[FlowPoint]]) -> dict[int, list[FlowPoint]]:
        """Its streams' samples while it ran (the next stage's first sample
        closes its last interval)."""
        if not self.cookies:  # it never began
            return {}
        out = {}
        for c, all_pts in only_data_flows(series, self.cookies).items():
            pts = [p for p in all_pts if p.t >= self.since]
            if self.end is not None:
                after = [p for p in pts if p.t > self.end][:1]
                pts = [p for p in pts if p.t <= self.end] + after
            if pts:
                out[c] = pts
        return out


def probe_failure_hint(error: str, target: Target) -> str:
    """What to do about a failed probe: a name that does not resolve is a
    typo or a DNS matter, not a server to start."""
    if error.startswith(iperf3_client.UNRESOLVED):
        where = f" in netns {target.netns}" if target.netns else ""
        return (f"check the host name {target.host!r} (it must resolve{where}), "
                "or give its address")
    return f"is 'iperf3 -s -p {target.port}' running there, reachable and idle?"


def run_probe(target: Target, streams: int, seconds: float, index: int = 1, total: int = 1,
              on_progress: Callable[[Progress], None] | None = None,
              srtt_us: int = 0, fast_start: bool = True,
              enough: StopRule | None = None) -> ProbeResult:
    """One probe of `streams` for `seconds` (run_probes with one stage).
    `index`/`total`: its place in the progress shown."""
    return run_probes(target, [(streams, seconds)], on_progress, srtt_us, fast_start,
                      [enough], index - 1, total)[0]


def run_probes(target: Target, stages: Sequence[tuple[int, float]],
               on_progress: Callable[[Progress], None] | None = None,
               srtt_us: int = 0, fast_start: bool = True,
               enough: Sequence[StopRule | None] | None = None,
               first_index: int = 0, total: int | None = None,
               at_least: Sequence[float] | None = None) -> list[ProbeResult]:
    """Probes as the stages of one iperf3 test (iperf3_client.run_stages):
    (streams, seconds) each, stream counts rising; one ProbeResult per stage,
    measured on that stage's streams while it ran.
    `srtt_us`: the path's RTT from an earlier probe (0: unknown), so that the
    first SYN already gets the short timeout (kernel/synrto.py).
    `fast_start=False` leaves SYN timeouts to the kernel and has the client
    wait for each server state, as iperf3 does (for make probetime only).
    `enough[k]`: end stage k before its `seconds` once it says the measurement
    so far is tight enough (estimate/adaptive.py); None: always `seconds`.
    `at_least[k]`: seconds stage k sends before `enough[k]` is asked."""
    plan = [_Stage(k == 0, n, d) for k, (n, d) in enumerate(stages)]
    rules = list(enough) if enough is not None else [None] * len(plan)
    minimum = list(at_least) if at_least is not None else [0.0] * len(plan)
    total = len(plan) if total is None else total
    streams = plan[-1].streams
    series: dict[int, list[FlowPoint]] = {}
    current = -1  # the stage the child said it is in
    stop_asked = -1
    why_stopped: dict[int, str] = {}
    epochs: dict[int, float] = {}
    last_check = 0.0
    report: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        cg = stack.enter_context(probe_cgroup(streams))
        reader = stack.enter_context(FlowReader(
            cgroup=cg, netns=[target.netns] if target.netns else [], command="advise"))
        syn_rto = stack.enter_context(SynRto(cg, srtt_us, FIRST_SYN_RTO_US)) \
            if fast_start else None
        # Every ACK of the probe's connections, for the capacity estimate.
        ack_train = stack.enter_context(AckTrain(cg))
        ack_rates = _AckRates(ack_train)
        t_start = time.monotonic()
        child = _spawn(target, stages, cg, fast_start)
        finished = False
        try:
            deadline = t_start + sum(d for _, d in stages) + 2 * CONNECT_TIMEOUT_MS / 1000 + 2
            last_total, last_t = 0, t_start
            while not finished:
                # The child writes its report as its last act: wake up for it
                # at once rather than at the next sample.
                for msg in child.lines():
                    if "stage" in msg:
                        current = int(msg["stage"])
                        plan[current].begin = float(msg["t"])
                        plan[current].cookies = tuple(msg["cookies"])
                        if current > 0:
                            plan[current - 1].end = plan[current].begin
                    else:
                        report, finished = msg, True
                now = time.monotonic()
                flows = reader.snapshot()
                # One time per snapshot: the steady window compares flows at the
                # same instants (their read times differ by microseconds).
                t = min((f.read_monotonic_ns for f in flows if not f.closed),
                        default=time.monotonic_ns()) / 1e9
                for f in flows:
                    series.setdefault(f.cookie, []).append(_point(f, t))
                stage = plan[max(current, 0)]
                acked = sum(pts[-1].carried for c, pts in series.items()
                            if c in stage.cookies)
                if on_progress:
                    rate = (acked - last_total) * 8 / (now - last_t) / 1e6 \
                        if now > last_t and acked >= last_total else None
                    began = stage.begin if current >= 0 else t_start
                    k = max(current, 0)
                    on_progress(Progress(first_index + k + 1, total, stage.streams, now - began,
                                         stage.seconds, rate, rules[k] is not None,
                                         epochs.get(k)))
                last_total, last_t = acked, now
                rule = rules[current] if current >= 0 else None
                if rule is not None and stop_asked < current and not finished and \
                        now - last_check >= CHECK_INTERVAL_S and \
                        now - stage.begin >= minimum[current]:
                    last_check = now
                    so_far = steady(stage.points(series), stage.streams)
                    if so_far is not None:
                        epochs[current] = so_far.median_epochs
                    why = None if so_far is None else rule(so_far, functools.partial(
                        ack_rates, current, stage, so_far.mss))
                    if why:
                        # The child ends this stage as if its time were up.
                        os.write(child.stop_fd, bytes([current]))
                        stop_asked = current
                        why_stopped[current] = why if isinstance(why, str) else "enough"
                if finished:
                    os.waitpid(child.pid, 0)
                    break
                if now > deadline:
                    raise TamebpfError(
                        f"probe with {streams} streams to {target.host}:{target.port} did not "
                        f"finish in {deadline - t_start:.0f} s", "is the path still up?")
                select.select([child.report_fd], [], [], SAMPLE_INTERVAL_S)
        finally:
            if not finished:  # interrupted or timed out: stop the traffic now
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signal.SIGKILL)
                os.waitpid(child.pid, 0)
            os.close(child.report_fd)
            os.close(child.stop_fd)
        learned_srtt_us = syn_rto.state().srtt_us if syn_rto else 0
        acks = ack_train.read()
    t_end = time.monotonic()
    if "error" in report or "received_mbps" not in report:
        error = report.get("error", "no report from the probe")
        raise TamebpfError(
            f"iperf3 probe to {target.host}:{target.port} failed: {error}",
            probe_failure_hint(error, target))
    results = []
    for k, stage in enumerate(plan):
        last = k == len(plan) - 1
        measured = steady(stage.points(series), stage.streams)
        if measured is None or measured.goodput_mbps <= 0:
            raise TamebpfError(
                f"probe with {stage.streams} streams to {target.host}:{target.port} "
                "moved no data", "check the path and the server")
        # Wall time: the first stage from the start (set-up included), the last
        # to the end (result exchange included), so the stages add up.
        began = t_start if k == 0 else stage.begin
        ended = t_end if last else plan[k + 1].begin
        results.append(ProbeResult(
            stage.streams, ended - began, measured,
            report["received_mbps"] if last else None, learned_srtt_us,
            report.get("setup_s") if k == 0 else 0.0,
            report.get("finish_s") if last else 0.0,
            tuple(pair_rates(acks.only(stage.cookies).between(stage.begin_ns, None),
                             measured.mss or 0)),
            why_stopped.get(k, TIME_LIMIT) if rules[k] is not None else None))
    return results

"""The probes: n parallel TCP streams to an iperf3 server, measured in the
kernel while they run, each stage ended by its stop rule. For downloads
(Target.direction "receive") the server sends, as `iperf3 -R`, and the
streams are measured as they receive: goodput from the bytes received, the
RTT the receiver measures, and the sender's losses from the holes in what
arrives (the receive log of kernel/acktrain.py), whose data segments'
spacing gives the capacity as the ACKs' does for uploads.

The probes are the stages of one iperf3 test (iperf3_client.run_stages),
sent by a forked child in a cgroup of its own (kernel/probe.py), so the
flow telemetry attributes exactly the probe's flows (`FlowReader(cgroup=...)`
filters in the kernel). Here they are sampled, their stop rules asked
(estimate/settled.py) and each stage's measurement made a ProbeResult. The
cgroup and the child are removed on every way out, including Ctrl-C and
SIGTERM (the commands make SIGTERM unwind: common/lifecycle.py).
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tamebpf.advise import iperf3_client
from tamebpf.common.errors import TamebpfError
from tamebpf.common.logs import log
from tamebpf.common.records import AckLog, Progress, RxCounts
from tamebpf.common.units import mbps_over
from tamebpf.estimate.acktrain import pair_rates
from tamebpf.estimate.record import TIME_LIMIT, ProbeResult, Target
from tamebpf.estimate.steady import FlowPoint, Steady, only_data_flows, steady
from tamebpf.kernel.acktrain import AckTrain
from tamebpf.kernel.flows import Flow, FlowReader
from tamebpf.kernel.netns import default_congestion_control
from tamebpf.kernel.probe import Child, Say, Work, probe_cgroup, spawn
from tamebpf.kernel.synrto import SynRto
from tamebpf.paths.entry import REMOTE_CC

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


def _point(f: Flow, t: float) -> FlowPoint:
    """An uploading stream's sample: what the kernel knows as the sender."""
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


def _received_point(f: Flow, t: float, rx: RxCounts | None, cc: str | None) -> FlowPoint:
    """A downloading stream's sample, as the receiver sees it: the bytes and
    data segments received, the sender's retransmissions as the segments
    that filled holes, its loss events as the holes that opened, and the
    receiver's RTT. The sender is taken to be in slow start until its first
    loss event (its ssthresh is not seen from here)."""
    fills, episodes = (rx.fills, rx.episodes) if rx is not None else (0, 0)
    return FlowPoint(
        t=t,
        bytes_acked=f.bytes_received,
        data_segs_out=f.data_segs_in,
        total_retrans=fills,
        srtt_us=f.rcv_rtt_us or f.srtt_us,
        slow_start=episodes == 0,
        rwnd_limited=False,
        congestion_control=cc,
        mss=f.mss,
        ipv6=f.family == "ipv6",
        cong_events=episodes,
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


def probe_congestion(target: Target) -> tuple[str, str]:
    """(the congestion control the probes will run, where that comes from).
    A download's is the server's: its own default ("remote": not known
    here) unless --congestion asks it for one."""
    if target.direction == "receive":
        if target.congestion != "system":
            return target.congestion, "--congestion, asked of the server"
        return REMOTE_CC, "the server's own default; --congestion asks it for one"
    if target.congestion != "system":
        return target.congestion, "--congestion"
    where = f"network namespace {target.netns}" if target.netns else "this host"
    try:
        cc = default_congestion_control(target.netns)
    except OSError as err:
        raise TamebpfError(f"cannot read the default congestion control of {where}: "
                           f"{err.strerror or err}",
                           hint="check --netns (an 'ip netns' name), or give --congestion"
                           ) from err
    return cc, f"the default of {where}; --congestion to choose"


class NoServer(TamebpfError):
    """The probe's connection was refused or timed out: no iperf3 server
    answers at the target (`advise` then says how else to get advice)."""


def probe_failure_hint(error: str, target: Target) -> str:
    """What to do about a failed probe: a name that does not resolve is a
    typo or a DNS matter, not a server to start."""
    if error.startswith(iperf3_client.UNRESOLVED):
        where = f" in netns {target.netns}" if target.netns else ""
        return (f"check the host name {target.host!r} (it must resolve{where}), "
                "or give its address")
    return f"is 'iperf3 -s -p {target.port}' running there, reachable and idle?"


def _traffic(target: Target, stages: Sequence[tuple[int, float]]) -> Work:
    """What the child runs: the stages as one iperf3 test, a line as each
    stage begins and a last one with the test's report."""

    def work(say: Say, stop: Callable[[int], bool]) -> dict[str, Any]:
        def stage_begins(k: int, t: float, cookies: tuple[int, ...]) -> None:
            say({"stage": k, "t": t, "cookies": cookies})

        cc = None if target.congestion == "system" else target.congestion
        try:
            r = iperf3_client.run_stages(target.host, target.port, stages, cc,
                                         CONNECT_TIMEOUT_MS / 1000, stop=stop,
                                         on_stage=stage_begins,
                                         reverse=target.direction == "receive")
        except iperf3_client.Iperf3Error as err:
            return {"error": str(err)}
        return {"received_mbps": r.received_mbps, "seconds": r.seconds,
                "data_cookies": list(r.data_cookies), "setup_s": r.setup_s,
                "finish_s": r.finish_s, "server_congestion": r.server_congestion,
                "sender_retransmits": [s.sender_retransmits for s in r.stages],
                "stage_mbps": [s.received_mbps for s in r.stages]}

    return work


class _Stops:
    """The stages' stop rules, asked at most every CHECK_INTERVAL_S; why
    each stage stopped."""

    def __init__(self, rules: Sequence[StopRule | None], ack_rates: _AckRates) -> None:
        self.rules, self.ack_rates = rules, ack_rates
        self.asked = -1  # the last stage asked to stop
        self.last_check = 0.0
        self.why: dict[int, str] = {}
        self.epochs: dict[int, float] = {}  # each stage's, as last measured

    def now(self, k: int, stage: _Stage, series: dict[int, list[FlowPoint]],
            now: float) -> bool:
        """Whether stage k, the current one, has measured enough (-1: none
        has begun)."""
        rule = self.rules[k] if k >= 0 else None
        if rule is None or self.asked >= k or now - self.last_check < CHECK_INTERVAL_S:
            return False
        self.last_check = now
        so_far = steady(stage.points(series), stage.streams)
        if so_far is not None:
            self.epochs[k] = so_far.median_epochs
        why = None if so_far is None else rule(so_far, functools.partial(
            self.ack_rates, k, stage, so_far.mss))
        if not why:
            return False
        self.asked = k
        self.why[k] = why if isinstance(why, str) else "enough"
        return True

    def stopped(self, k: int) -> str | None:
        """ProbeResult.stopped of stage k."""
        return self.why.get(k, TIME_LIMIT) if self.rules[k] is not None else None


def _sample(reader: FlowReader, series: dict[int, list[FlowPoint]],
            ack_train: AckTrain, target: Target) -> None:
    """One snapshot of the probe's flows onto their series."""
    flows = reader.snapshot()
    # One time per snapshot: the steady window compares flows at the
    # same instants (their read times differ by microseconds).
    t = min((f.read_monotonic_ns for f in flows if not f.closed),
            default=time.monotonic_ns()) / 1e9
    if target.direction != "receive":
        for f in flows:
            series.setdefault(f.cookie, []).append(_point(f, t))
        return
    rx = ack_train.rx()
    cc = None if target.congestion == "system" else target.congestion
    for f in flows:
        series.setdefault(f.cookie, []).append(_received_point(f, t, rx.get(f.cookie), cc))


def run_probe(target: Target, streams: int, seconds: float, index: int = 1, total: int = 1,
              on_progress: Callable[[Progress], None] | None = None,
              srtt_us: int = 0, enough: StopRule | None = None) -> ProbeResult:
    """One probe of `streams` for `seconds` (run_probes with one stage).
    `index`/`total`: its place in the progress shown."""
    return run_probes(target, [(streams, seconds)], on_progress, srtt_us, [enough],
                      index - 1, total)[0]


def run_probes(target: Target, stages: Sequence[tuple[int, float]],
               on_progress: Callable[[Progress], None] | None = None,
               srtt_us: int = 0, enough: Sequence[StopRule | None] | None = None,
               first_index: int = 0, total: int | None = None) -> list[ProbeResult]:
    """Probes as the stages of one iperf3 test (iperf3_client.run_stages):
    (streams, seconds) each, stream counts rising; one ProbeResult per stage,
    measured on that stage's streams while it ran.
    `srtt_us`: the path's RTT from an earlier probe (0: unknown), so that the
    first SYN already gets the short timeout (kernel/synrto.py).
    `enough[k]`: end stage k before its `seconds` once it says the measurement
    so far is tight enough (estimate/settled.py); None: always `seconds`.

    In phases: attach the probe's cgroup, flow reader, SYN timeout and ACK
    log; run the traffic child and sample its flows until it reports
    (_sample_until_done); check its report (_check_report); measure each
    stage (_results)."""
    plan = [_Stage(k == 0, n, d) for k, (n, d) in enumerate(stages)]
    rules: list[StopRule | None] = list(enough) if enough is not None else [None] * len(plan)
    run = _Run(plan, rules, first_index, len(plan) if total is None else total, on_progress)
    with contextlib.ExitStack() as stack:
        cg = stack.enter_context(probe_cgroup(plan[-1].streams))
        reader = stack.enter_context(FlowReader(
            cgroup=cg, netns=[target.netns] if target.netns else [], command="advise"))
        syn_rto = stack.enter_context(SynRto(cg, srtt_us, FIRST_SYN_RTO_US))
        # Every ACK of the probe's connections (a download's: every data
        # segment), for the capacity estimate.
        ack_train = stack.enter_context(AckTrain(cg, receive=target.direction == "receive"))
        stops = _Stops(rules, _AckRates(ack_train))
        t_start = time.monotonic()
        child = spawn(_traffic(target, stages), cg, target.netns)
        try:
            # A download's stages are tests of their own, each set up and ended.
            tests = len(stages) if target.direction == "receive" else 1
            deadline = (t_start + sum(d for _, d in stages)
                        + tests * 2 * CONNECT_TIMEOUT_MS / 1000 + 2)
            _sample_until_done(run, child, reader, stops, (t_start, deadline), target,
                               ack_train)
        finally:
            child.close(kill=not run.finished)  # interrupted or timed out: stop the traffic now
        learned_srtt_us = syn_rto.state().srtt_us
        acks = ack_train.read()
    t_end = time.monotonic()
    _check_report(run.report, target)
    _check_congestion(run.report, target)
    return _results(target, plan, run.series, run.report, acks, learned_srtt_us,
                    (t_start, t_end), stops)


@dataclass
class _Run:
    """What the sampling loop keeps between samples: the stages, the flows'
    series, the stage the child said it is in, its report once it ended,
    and the last progress sample."""

    plan: list[_Stage]
    rules: list[StopRule | None]
    first_index: int
    total: int
    on_progress: Callable[[Progress], None] | None
    series: dict[int, list[FlowPoint]] = field(default_factory=dict)
    current: int = -1
    report: dict[str, Any] = field(default_factory=dict)
    finished: bool = False
    last_total: int = 0
    last_t: float = 0.0

    @property
    def stage(self) -> _Stage:
        return self.plan[max(self.current, 0)]

    def take(self, msg: dict[str, Any]) -> None:
        """One line from the child: a stage began, or its last, the report."""
        if "stage" not in msg:
            self.report, self.finished = msg, True
            return
        self.current = int(msg["stage"])
        self.plan[self.current].begin = float(msg["t"])
        self.plan[self.current].cookies = tuple(msg["cookies"])
        if self.current > 0:
            self.plan[self.current - 1].end = self.plan[self.current].begin

    def show(self, now: float, t_start: float, stops: _Stops) -> None:
        """The current stage's progress: its rate since the last sample."""
        stage = self.stage
        acked = sum(pts[-1].carried for c, pts in self.series.items() if c in stage.cookies)
        if self.on_progress:
            rate = mbps_over(acked - self.last_total, now - self.last_t) \
                if now > self.last_t and acked >= self.last_total else None
            began = stage.begin if self.current >= 0 else t_start
            k = max(self.current, 0)
            self.on_progress(Progress(self.first_index + k + 1, self.total, stage.streams,
                                      now - began, stage.seconds, rate,
                                      self.rules[k] is not None, stops.epochs.get(k)))
        self.last_total, self.last_t = acked, now


def _sample_until_done(run: _Run, child: Child, reader: FlowReader, stops: _Stops,
                       times: tuple[float, float], target: Target,
                       ack_train: AckTrain) -> None:
    """Sample the probe's flows every SAMPLE_INTERVAL_S, show progress, and
    end each stage its stop rule says has measured enough, until the child
    reports; past `times`' deadline the probe failed."""
    t_start, deadline = times
    run.last_t = t_start
    while not run.finished:
        # The child writes its report as its last act: wake up for it
        # at once rather than at the next sample.
        for msg in child.lines():
            run.take(msg)
        now = time.monotonic()
        _sample(reader, run.series, ack_train, target)
        run.show(now, t_start, stops)
        if not run.finished and stops.now(run.current, run.stage, run.series, now):
            child.ask_stop(run.current)  # it ends the stage as if its time were up
        if run.finished:
            child.reap()
            break
        if now > deadline:
            raise TamebpfError(
                f"probe with {run.plan[-1].streams} streams to {target.host}:{target.port} "
                f"did not finish in {deadline - t_start:.0f} s", "is the path still up?")
        child.wait_for_line(SAMPLE_INTERVAL_S)


def _check_report(report: dict[str, Any], target: Target) -> None:
    """The child's report names an error, or has no result: the probe failed."""
    if "error" in report or "received_mbps" not in report:
        error = report.get("error", "no report from the probe")
        failed = NoServer if str(error).startswith(iperf3_client.NO_SERVER) else TamebpfError
        raise failed(
            f"iperf3 probe to {target.host}:{target.port} failed: {error}",
            probe_failure_hint(error, target))


def _check_congestion(report: dict[str, Any], target: Target) -> None:
    """A download's server may run another congestion control than asked
    (one its kernel lacks, or an iperf3 that ignores the ask): say so, as
    the advice is then for what it ran."""
    ran = report.get("server_congestion")
    if target.direction == "receive" and target.congestion != "system" and ran \
            and ran != target.congestion:
        log.warning("the server at %s:%d sent with %s, not the %s asked: the advice is for %s",
                    target.host, target.port, ran, target.congestion, ran)


def _results(target: Target, plan: Sequence[_Stage], series: dict[int, list[FlowPoint]],
             report: dict[str, Any], acks: AckLog, srtt_us: int,
             span: tuple[float, float], stops: _Stops) -> list[ProbeResult]:
    """Each stage's measurement, as a ProbeResult."""
    t_start, t_end = span
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
            _iperf3_mbps(report, k, last), srtt_us,
            report.get("setup_s") if k == 0 else 0.0,
            report.get("finish_s") if last else 0.0,
            tuple(pair_rates(acks.only(stage.cookies).between(stage.begin_ns, None),
                             measured.mss or 0)),
            stops.stopped(k),
            _sender_retransmits(report, k)))
    return results


def _iperf3_mbps(report: dict[str, Any], k: int, last: bool) -> float | None:
    """iperf3's own count for stage k: a download's stages are tests of
    their own, each with its count; an upload's one test is counted at its
    end, over all its stages (the last stage carries it)."""
    stages = report.get("stage_mbps") or []
    if k < len(stages):
        return float(stages[k]) if stages[k] is not None else None
    return report["received_mbps"] if last else None


def _sender_retransmits(report: dict[str, Any], k: int) -> int | None:
    """Stage k's sender retransmissions as a download's server reported them."""
    counts = report.get("sender_retransmits") or []
    return counts[k] if k < len(counts) else None

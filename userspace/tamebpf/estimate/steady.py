"""The steady part of a probe, from kernel samples (pure, no I/O).

A short probe is mostly slow start and tail: goodput over the whole run
underestimates the steady rate (DualPats' `T = A x + B`: B is the start-up
cost), which is what the model needs. So we measure over a window that
starts once every data flow has left slow start (ssthresh set), but not
before `min_skip` of the run nor after `max_start` of it, and ends at the
last sample where data was still being acknowledged.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from tamebpf.common.units import mbps_over


@dataclass(frozen=True)
class FlowPoint:
    """One flow's counters at one snapshot."""

    t: float  # seconds, monotonic
    bytes_acked: int
    data_segs_out: int
    total_retrans: int
    srtt_us: int | None
    slow_start: bool  # ssthresh still infinite: no loss seen yet
    rwnd_limited: bool  # the peer's window, not cwnd, bounds what is in flight
    congestion_control: str | None
    mss: int = 0  # payload bytes per full segment (advise --capacity)
    ipv6: bool = False
    # Segments the peer got, ACKed or SACKed, x MSS (None: not known). Unlike
    # bytes_acked it does not jump when a retransmission fills a hole and the
    # cumulative ACK passes everything SACKed behind it: over a window of a
    # few RTTs such a jump read as more than the link's rate (docs/advise.md).
    delivered_bytes: int | None = None
    # Window reductions so far (kernel: entries into CWR/Recovery/Loss).
    cong_events: int = 0

    @property
    def carried(self) -> int:
        """Bytes the peer has received, as well as the sender knows."""
        return self.bytes_acked if self.delivered_bytes is None else self.delivered_bytes


@dataclass(frozen=True)
class FlowSteady:
    cookie: int
    goodput_mbps: float
    loss_rate: float | None
    srtt_ms: float | None


@dataclass(frozen=True)
class Steady:
    start_s: float  # window, relative to the first sample
    end_s: float
    goodput_mbps: float
    loss_rate: float | None  # retransmitted / data segments in the window
    retrans: int
    data_segs: int
    srtt_ms: float | None  # mean of the data flows' smoothed RTT in the window
    noise: float | None  # coefficient of variation of per-sample goodput
    rwnd_limited: float  # fraction of samples limited by the receive window
    flows: tuple[FlowSteady, ...]
    congestion_control: tuple[str, ...]
    # (seconds since the first sample, bytes the data flows delivered) at
    # every sample: kept so that make eval can compare windows after the fact.
    series: tuple[tuple[float, int], ...] = ()
    # The data flows' largest MSS and their family: the header overhead that
    # turns a link rate into TCP goodput (advise --capacity).
    mss: int | None = None
    ipv6: bool = False
    # The window's goodput from bytes acked, beside the delivered count's
    # (FlowPoint.delivered_bytes): make eval scores both.
    goodput_acked_mbps: float | None = None
    # Every data flow had left slow start (ssthresh set) when the window
    # began. When not, the window saw start-up: on long-RTT paths with deep
    # queues 2 s can end with a stream still in slow start, far from its
    # long-run share (docs/advise.md, "When a probe stops").
    after_slow_start: bool = False
    # (seconds since the first sample, the data flows' mean smoothed RTT in
    # ms, their retransmissions so far) at every sample: how fast the queue
    # fills between losses, kept for make eval as a lead for counting
    # competing flows.
    rtt_series: tuple[tuple[float, float, int], ...] = ()
    # When every data flow had left slow start, in seconds since the first
    # sample (None: one never did): how long start-up took.
    slow_start_end_s: float | None = None
    # Per data flow, the window reductions since it left slow start, up to
    # the window's end: the congestion epochs in which loss-based flows move
    # toward their share (estimate/settled.py).
    epochs: tuple[int, ...] = ()
    # The window's second half's goodput less its first half's, over the
    # window's goodput: still rising (> 0) or falling toward the share.
    trend: float | None = None

    @property
    def median_epochs(self) -> float:
        """Our streams' typical epoch count (0 with none recorded)."""
        return float(statistics.median(self.epochs)) if self.epochs else 0.0

    @property
    def window_rtts(self) -> float | None:
        """The window's length in the flows' smoothed RTTs (None: no RTT)."""
        if not self.srtt_ms:
            return None
        return (self.end_s - self.start_s) / (self.srtt_ms / 1000)


def only_data_flows(series: Mapping[int, Sequence[FlowPoint]],
                    cookies: Iterable[int] | None) -> dict[int, Sequence[FlowPoint]]:
    """The series of the given data connections only, when the client named
    them. Ranking by bytes (data_flows) is not enough on its own: a stream
    that lost its first window sits in RTO backoff and can have moved less
    than the control connection's JSON, whose flow then gets measured in its
    place (it runs the system's congestion control, not the probe's)."""
    if not cookies:
        return dict(series)
    return {c: series[c] for c in cookies if c in series}


def data_flows(series: Mapping[int, Sequence[FlowPoint]], streams: int) -> list[int]:
    """The probe's data connections: the `streams` flows that moved the most
    bytes (iperf3's control connection moves a few hundred)."""
    ranked = sorted(series, key=lambda c: series[c][-1].bytes_acked if series[c] else 0,
                    reverse=True)
    return ranked[:streams]


def _at(points: Sequence[FlowPoint], t: float) -> FlowPoint:
    """The last point at or before t (the first point if none)."""
    best = points[0]
    for p in points:
        if p.t <= t:
            best = p
        else:
            break
    return best


def steady(series: Mapping[int, Sequence[FlowPoint]], streams: int,
           min_skip: float = 0.25, max_start: float = 0.6,
           recovery_skip: float = 0.5) -> Steady | None:
    """Measure the steady window; None when there is too little to measure.
    In three phases: choose the window (_window), measure each flow over it
    (_per_flow), then the aggregate's rates, noise and trend (_measure)."""
    cookies = data_flows(series, streams)
    flows = [series[c] for c in cookies if series[c]]
    if not flows:
        return None
    times = sorted({p.t for pts in flows for p in pts})
    if len(times) < 3:
        return None
    chosen = _window(flows, times, min_skip, max_start, recovery_skip)
    if chosen is None:
        return None
    window, left = chosen
    return _measure(flows, times, window, left, _per_flow(cookies, flows, window))


def _total(flows: Sequence[Sequence[FlowPoint]], t: float) -> int:
    """Bytes all flows had carried at time t."""
    return sum(_at(pts, t).carried for pts in flows)


def _delta(pts: Sequence[FlowPoint], attr: str, ws: float, we: float) -> int:
    """How much a flow's counter `attr` grew from ws to we."""
    return int(getattr(_at(pts, we), attr)) - int(getattr(_at(pts, ws), attr))


def _window(flows: Sequence[Sequence[FlowPoint]], times: Sequence[float], min_skip: float,
            max_start: float, recovery_skip: float) -> tuple[list[float], list[float]] | None:
    """The sample times of the steady window, and the times at which no flow
    was in slow start; None when no window of two samples is left."""
    t0 = times[0]
    # End: the last sample before the aggregate reached its final value. The
    # interval after it holds the end of the transfer (the sender stopped at
    # some unknown point in it), so counting it would add idle time.
    final = _total(flows, times[-1])
    growing = [t for t in times if _total(flows, t) < final]
    end = growing[-1] if growing else times[-1]
    span = end - t0
    if span <= 0:
        return None
    left = [t for t in times
            if all(not _at(pts, t).slow_start for pts in flows) and t >= t0]
    start = left[0] if left else t0 + max_start * span
    start = min(max(start, t0 + min_skip * span), t0 + max_start * span)
    if left:
        # Slow start ended in a loss burst: cwnd was cut and climbs back in
        # the first part of congestion avoidance, below the flow's long-run
        # rate (a new flow among established ones takes longest). Measure the
        # later part: skip recovery_skip of what is left (by default half).
        start += recovery_skip * (end - start)
    window = [t for t in times if start <= t <= end]
    if len(window) < 2 or window[-1] - window[0] <= 0:
        return None
    return window, left


def _per_flow(cookies: Sequence[int], flows: Sequence[Sequence[FlowPoint]],
              window: Sequence[float]) -> list[FlowSteady]:
    """Each flow's goodput, loss rate and mean RTT over the window."""
    ws, we = window[0], window[-1]
    per_flow = []
    for c, pts in zip(cookies, flows, strict=True):
        segs = _delta(pts, "data_segs_out", ws, we)
        rtts = [p.srtt_us for p in pts if ws <= p.t <= we and p.srtt_us]
        per_flow.append(FlowSteady(
            cookie=c,
            goodput_mbps=mbps_over(_delta(pts, "carried", ws, we), we - ws),
            loss_rate=_delta(pts, "total_retrans", ws, we) / segs if segs > 0 else None,
            srtt_ms=statistics.fmean(rtts) / 1000 if rtts else None,
        ))
    return per_flow


def _noise(flows: Sequence[Sequence[FlowPoint]], window: Sequence[float]) -> float | None:
    """The aggregate's per-sample rates' coefficient of variation (None:
    fewer than 3 rates)."""
    rates: list[float] = []
    for a, b in zip(window, window[1:], strict=False):
        if b > a:
            rates.append(mbps_over(_total(flows, b) - _total(flows, a), b - a))
    mean_rate = statistics.fmean(rates) if rates else 0.0
    return (statistics.pstdev(rates) / mean_rate) if len(rates) >= 3 and mean_rate > 0 else None


def _trend(flows: Sequence[Sequence[FlowPoint]], window: Sequence[float]) -> float | None:
    """How much more the window's second half carried than its first, as a
    fraction of their mean (None: too few samples or nothing carried)."""
    ws, we = window[0], window[-1]
    mid = ws + (we - ws) / 2
    halves = (_total(flows, mid) - _total(flows, ws), _total(flows, we) - _total(flows, mid))
    return (halves[1] - halves[0]) / (halves[0] + halves[1]) * 2 \
        if sum(halves) > 0 and len(window) >= 4 else None


def _measure(flows: Sequence[Sequence[FlowPoint]], times: Sequence[float],
             window: Sequence[float], left: Sequence[float],
             per_flow: Sequence[FlowSteady]) -> Steady:
    """The aggregate over the window, from the flows' samples and their
    per-flow measurement."""
    t0, ws, we = times[0], window[0], window[-1]
    retrans = sum(_delta(pts, "total_retrans", ws, we) for pts in flows)
    segs = sum(_delta(pts, "data_segs_out", ws, we) for pts in flows)
    in_window = [p for pts in flows for p in pts if ws <= p.t <= we]
    flow_rtts = [f.srtt_ms for f in per_flow if f.srtt_ms is not None]
    ccs = sorted({p.congestion_control for p in in_window if p.congestion_control})
    return Steady(
        start_s=ws - t0,
        end_s=we - t0,
        goodput_mbps=sum(f.goodput_mbps for f in per_flow),
        loss_rate=retrans / segs if segs > 0 else None,
        retrans=retrans,
        data_segs=segs,
        srtt_ms=statistics.fmean(flow_rtts) if flow_rtts else None,
        noise=_noise(flows, window),
        rwnd_limited=sum(p.rwnd_limited for p in in_window) / len(in_window) if in_window else 0.0,
        flows=tuple(per_flow),
        congestion_control=tuple(ccs),
        series=tuple((round(t - t0, 4), _total(flows, t)) for t in times),
        mss=max((p.mss for p in in_window if p.mss), default=None),
        ipv6=any(p.ipv6 for p in in_window),
        goodput_acked_mbps=mbps_over(sum(_delta(pts, "bytes_acked", ws, we) for pts in flows),
                                     we - ws),
        after_slow_start=bool(left) and left[0] <= ws,
        rtt_series=tuple(_rtt_sample(flows, t, t0) for t in times),
        slow_start_end_s=round(left[0] - t0, 4) if left else None,
        epochs=tuple(_epochs(pts, we) for pts in flows),
        trend=_trend(flows, window),
    )


def _epochs(points: Sequence[FlowPoint], end: float) -> int:
    """The flow's window reductions after it left slow start, up to `end`.
    The reduction that ended slow start (if a loss ended it, not HyStart)
    is already counted at its first sample out of slow start."""
    out = next((p for p in points if not p.slow_start and p.t <= end), None)
    if out is None:
        return 0
    return max(0, _at(points, end).cong_events - out.cong_events)


def _rtt_sample(flows: Sequence[Sequence[FlowPoint]], t: float,
                t0: float) -> tuple[float, float, int]:
    at = [_at(pts, t) for pts in flows]
    rtts = [p.srtt_us for p in at if p.srtt_us]
    return (round(t - t0, 4), round(statistics.fmean(rtts) / 1000, 3) if rtts else 0.0,
            sum(p.total_retrans for p in at))


def window_samples(s: Steady) -> int:
    """Goodput intervals inside the probe's steady window (samples less one)."""
    inside = sum(1 for t, _ in s.series if s.start_s <= t <= s.end_s)
    return max(0, inside - 1)

"""The steady window of a probe, on synthetic kernel samples."""

from __future__ import annotations

import pytest

from tamebpf.estimate.steady import FlowPoint, only_data_flows, steady

MSS = 1448


def flow(rate_mbps: float, slow_start_until: float, stop_at: float, dt: float = 0.1,
         retrans_per_seg: float = 0.0, rtt_us: int = 20_000, rwnd: bool = False,
         cc: str = "cubic", ramp: float = 0.25) -> list[FlowPoint]:
    """A flow that sends at `ramp` x rate until `slow_start_until`, then at
    `rate`, and stops at `stop_at`; samples every dt until stop_at + 0.3 s."""
    pts, acked, t = [], 0.0, 0.0
    while t <= stop_at + 0.3 + 1e-9:
        segs = int(acked / MSS)
        pts.append(FlowPoint(t=round(t, 6), bytes_acked=int(acked), data_segs_out=segs,
                             total_retrans=int(segs * retrans_per_seg), srtt_us=rtt_us,
                             slow_start=t < slow_start_until, rwnd_limited=rwnd,
                             congestion_control=cc))
        if t < stop_at:
            r = rate_mbps * (ramp if t < slow_start_until else 1.0)
            acked += r * 1e6 / 8 * dt
        t += dt
    return pts


def test_window_excludes_slow_start_and_tail() -> None:
    series = {1: flow(40.0, slow_start_until=0.8, stop_at=3.0)}
    s = steady(series, 1)
    assert s is not None
    assert s.goodput_mbps == pytest.approx(40.0, rel=0.01), f"steady goodput {s.goodput_mbps}"
    assert s.start_s >= 0.8 - 1e-9, f"window starts in slow start at {s.start_s}"
    assert s.end_s <= 3.0 + 1e-9, f"window runs into the idle tail, ends {s.end_s}"
    assert s.after_slow_start
    assert s.slow_start_end_s == pytest.approx(0.8, abs=0.1 + 1e-9)
    assert s.window_rtts == pytest.approx((s.end_s - s.start_s) / 0.020)
    assert len(s.rtt_series) == len(s.series)
    assert {rtt for _, rtt, _ in s.rtt_series} == {20.0}


def test_window_skips_the_recovery_after_slow_start() -> None:
    # Out of slow start at 0.5 s, at half rate (cwnd cut by the loss burst)
    # until 1.2 s, then at the long-run 40 Mbit/s until 3 s.
    pts = flow(40.0, slow_start_until=0.5, stop_at=3.0)
    acked, fixed = 0.0, []
    for i, p in enumerate(pts):
        fixed.append(FlowPoint(p.t, int(acked), p.data_segs_out, 0, p.srtt_us, p.slow_start,
                               False, "cubic"))
        if p.t < 3.0 - 1e-9 and i + 1 < len(pts):
            rate = 10.0 if p.t < 0.5 else 20.0 if p.t < 1.2 else 40.0
            acked += rate * 1e6 / 8 * 0.1
    s = steady({1: fixed}, 1)
    assert s is not None and s.start_s >= 1.2 - 1e-9, f"window starts at {s.start_s}"
    assert s.goodput_mbps == pytest.approx(40.0, rel=0.01)
    whole = steady({1: fixed}, 1, recovery_skip=0.0)
    assert whole is not None and whole.goodput_mbps < 37.0


def test_aggregate_and_control_connection() -> None:
    series = {c: flow(10.0 * c, 0.5, 2.0, retrans_per_seg=0.01) for c in (1, 2, 3)}
    # iperf3's control connection: a few hundred bytes, never counted.
    series[99] = [FlowPoint(t=p.t, bytes_acked=200, data_segs_out=3, total_retrans=0,
                            srtt_us=20_000, slow_start=True, rwnd_limited=False,
                            congestion_control="cubic") for p in series[1]]
    s = steady(series, 3)
    assert s is not None
    assert {f.cookie for f in s.flows} == {1, 2, 3}
    assert s.goodput_mbps == pytest.approx(60.0, rel=0.02)
    assert s.loss_rate == pytest.approx(0.01, abs=0.002)
    # The RTT series counts the data flows' retransmissions, not the control's.
    last = s.rtt_series[-1]
    assert last[2] == sum(series[c][-1].total_retrans for c in (1, 2, 3)) > 0
    assert s.srtt_ms == pytest.approx(20.0)
    assert s.noise is not None and s.noise < 0.05, f"steady flows reported noisy: {s.noise}"


def test_named_data_flows_exclude_a_control_connection_that_moved_more() -> None:
    # A data stream stuck in RTO backoff (600 bytes) under the control
    # connection's JSON (800 bytes, the system's BBR): ranking by bytes alone
    # measures the control connection in the stream's place.
    series = {c: flow(10.0, 0.5, 2.0) for c in (1, 2)}
    series[3] = [FlowPoint(t=p.t, bytes_acked=600, data_segs_out=2, total_retrans=2,
                           srtt_us=20_000, slow_start=True, rwnd_limited=False,
                           congestion_control="cubic") for p in series[1]]
    series[99] = [FlowPoint(t=p.t, bytes_acked=800, data_segs_out=3, total_retrans=0,
                            srtt_us=20_000, slow_start=False, rwnd_limited=False,
                            congestion_control="bbr") for p in series[1]]
    ranked = steady(series, 3)
    assert ranked is not None and 99 in {f.cookie for f in ranked.flows}
    named = steady(only_data_flows(series, [1, 2, 3]), 3)
    assert named is not None
    assert {f.cookie for f in named.flows} == {1, 2, 3}
    assert named.congestion_control == ("cubic",)
    assert only_data_flows(series, None) == series, "no names given: every flow is kept"
    assert only_data_flows(series, [1, 7]) == {1: series[1]}, "a cookie never seen is skipped"


def test_window_bounded_when_slow_start_never_ends() -> None:
    series = {1: flow(30.0, slow_start_until=99, stop_at=2.0, ramp=1.0)}
    s = steady(series, 1)
    assert s is not None
    assert s.start_s <= 0.6 * 2.0 + 0.1, f"window start {s.start_s} past 60% of the run"
    assert s.goodput_mbps == pytest.approx(30.0, rel=0.01)
    assert not s.after_slow_start, "the window saw slow start and says so"


def test_one_stream_still_in_slow_start_is_not_after_it() -> None:
    """The window is only past start-up when every stream is: a late stream
    leaving slow start after the window's cap on its start keeps it short."""
    series = {1: flow(30.0, slow_start_until=0.3, stop_at=2.0),
              2: flow(30.0, slow_start_until=1.9, stop_at=2.0)}
    s = steady(series, 2)
    assert s is not None and not s.after_slow_start, s


def test_rwnd_and_congestion_control_reported() -> None:
    s = steady({1: flow(10.0, 0.3, 2.0, rwnd=True, cc="bbr")}, 1)
    assert s is not None
    assert s.rwnd_limited == 1.0 and s.congestion_control == ("bbr",)


def test_too_little_data_gives_none() -> None:
    assert steady({}, 1) is None
    one = flow(10.0, 0.1, 0.1)[:2]
    assert steady({1: one}, 1) is None


def test_goodput_counts_delivered_segments_not_cumulative_ack_jumps() -> None:
    """A hole filled late makes bytes_acked jump by everything SACKed behind
    it; the delivered count grew smoothly all along. The goodput follows the
    delivered count (the link's 40 Mbit/s), and the bytes-acked reading of
    the same window, kept for comparison, shows the jump."""
    pts = flow(40.0, slow_start_until=0.5, stop_at=3.0)
    held = 500_000  # bytes SACKed but not cumulatively acked from 0.6 s to 2 s
    jumped = []
    for p in pts:
        acked = p.bytes_acked - held if 0.6 < p.t < 2.0 else p.bytes_acked
        jumped.append(FlowPoint(p.t, max(acked, 0), p.data_segs_out, p.total_retrans,
                                p.srtt_us, p.slow_start, False, "cubic", MSS,
                                delivered_bytes=p.bytes_acked))
    s = steady({1: jumped}, 1, recovery_skip=0.0)
    assert s is not None
    assert s.goodput_mbps == pytest.approx(40.0, rel=0.01)
    # The window opens while the hole is open and closes after the jump:
    # bytes acked read more than the link carried.
    assert s.start_s < 2.0 and s.goodput_acked_mbps is not None
    assert s.goodput_acked_mbps > 41.0
    # Without a delivered count (an older record), bytes acked is the goodput.
    plain = [FlowPoint(p.t, p.bytes_acked, p.data_segs_out, p.total_retrans, p.srtt_us,
                       p.slow_start, False, "cubic") for p in jumped]
    old = steady({1: plain}, 1, recovery_skip=0.0)
    assert old is not None and old.goodput_mbps == pytest.approx(s.goodput_acked_mbps)

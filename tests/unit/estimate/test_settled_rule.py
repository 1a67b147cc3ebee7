"""The default stop rule (estimate/settled.py): a probe ends early only after
its streams' congestion epochs, or when it has the link to itself."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tamebpf.advise.advisor import stop_rule
from tamebpf.estimate.settled import (
    BBR_WINDOW_RTTS,
    SETTLED,
    STEADY,
    BbrSettled,
    Settled,
)
from tamebpf.estimate.steady import FlowPoint, Steady, steady
from tests.unit.estimate.test_adaptive_probe import link, rates
from tests.unit.estimate.test_adaptive_probe import steady as window


def with_epochs(s: Steady, epochs: tuple[int, ...], retrans: int = 5) -> Steady:
    return replace(s, epochs=epochs, retrans=retrans)


@pytest.mark.parametrize(("epochs", "want"), [
    ((0,), None), ((3,), None), ((4,), SETTLED), ((9,), SETTLED),
    # The median stream: one stream that lost less does not hold up ten.
    ((1, 4, 4, 5, 4, 6, 4, 4, 4, 4), SETTLED),
    ((1, 1, 1, 1, 1, 1, 4, 4, 4, 4), None),
])
def test_epochs_decide_when_losses_show_others_on_the_path(epochs: tuple[int, ...],
                                                            want: str | None) -> None:
    s = with_epochs(window(3.0, 0.05), epochs)
    assert Settled(epochs=4)(s, rates([])) == want


def test_not_before_its_rtts_however_many_epochs() -> None:
    # 3.5 s at 20 ms is 175 RTTs; at 100 ms only 35.
    short = with_epochs(window(3.0, 0.05, srtt_ms=20.0), (8,))
    long = with_epochs(window(3.0, 0.05, srtt_ms=100.0), (8,))
    assert Settled()(short, rates([])) == SETTLED
    assert Settled()(long, rates([])) is None
    assert stop_rule("cubic", last=False)(long, rates([])) is None
    assert isinstance(stop_rule("bbr", last=True), BbrSettled)


def test_not_before_start_up_however_many_epochs() -> None:
    s = with_epochs(window(3.0, 0.05, after_slow_start=False), (8,))
    assert Settled()(s, rates([])) is None


def test_a_noisy_window_waits() -> None:
    s = with_epochs(window(1.0, 0.6), (8,))
    assert Settled()(s, rates([])) is None


def test_the_last_probe_also_waits_for_a_tight_capacity() -> None:
    s = with_epochs(window(3.0, 0.05, mbps=40.0), (5,))
    assert Settled(capacity=True)(s, rates([])) is None  # no ACK pairs: no estimate
    assert Settled(capacity=True)(s, rates(link(100.0))) == SETTLED


@pytest.mark.parametrize(("last", "capacity"), [(False, True), (True, True), (True, False)])
def test_a_loss_based_probe_waits_for_the_capacity_only_when_it_estimates_it(
        last: bool, capacity: bool) -> None:
    assert stop_rule("cubic", last, capacity) == Settled(capacity=last and capacity)


def test_alone_on_the_link_without_losses_ends_without_epochs() -> None:
    flat = replace(with_epochs(window(3.0, 0.05, mbps=98.0), (0,), retrans=0), trend=0.01)
    assert Settled(capacity=True)(flat, rates(link(100.0))) == STEADY
    # Not the probe that estimates the capacity (a lone stream's ACKs show
    # its share): no way to tell a flat share from the link's rate.
    assert Settled()(flat, rates(link(100.0))) is None
    assert Settled(capacity=True)(flat, rates([])) is None  # no estimate yet
    # Flat below the capacity: something else holds part of the link.
    half = replace(flat, goodput_mbps=50.0)
    assert Settled(capacity=True)(half, rates(link(100.0))) is None
    # Rising, or losses without the epochs yet: keep going.
    assert Settled(capacity=True)(replace(flat, trend=0.28), rates(link(100.0))) is None
    assert Settled(capacity=True)(replace(flat, retrans=3), rates(link(100.0))) is None


def test_bbr_waits_for_its_window_in_rtts() -> None:
    short = window(1.5, 0.05, srtt_ms=100.0)  # 15 RTTs
    assert BbrSettled()(short, rates([])) is None
    long = window(BBR_WINDOW_RTTS * 0.1 + 0.5, 0.05, srtt_ms=100.0)
    assert BbrSettled()(long, rates([])) == SETTLED


def _pt(t: float, acked: int, slow: bool, events: int) -> FlowPoint:
    return FlowPoint(t=t, bytes_acked=acked, data_segs_out=acked // 1448, total_retrans=events,
                     srtt_us=20_000, slow_start=slow, rwnd_limited=False,
                     congestion_control="cubic", mss=1448, cong_events=events)


def test_steady_counts_epochs_after_slow_start_and_the_trend() -> None:
    # Slow start ends at 1 s with the first loss (event 1); then an epoch a
    # second, at 2, 3 and 4 s before the window's end (4.9 s, the last
    # sample that grew). Goodput rises in the second half.
    pts = []
    acked = 0
    for i in range(51):
        t = i / 10
        acked += 100_000 if t < 4 else 140_000
        events = 0 if t < 1 else 1 + int(t - 1)
        pts.append(_pt(t, acked, t < 1, events))
    s = steady({1: pts}, 1)
    assert s is not None
    assert s.epochs == (3,)
    assert s.median_epochs == 3
    assert s.trend is not None and s.trend > 0

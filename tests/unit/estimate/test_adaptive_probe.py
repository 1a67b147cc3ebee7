"""When a probe that may end early has measured enough (estimate/adaptive.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tamebpf.estimate.adaptive import MIN_WINDOW_RTTS, Enough, past_start_up
from tamebpf.estimate.steady import Steady


def steady(window_s: float, noise: float | None, mbps: float = 50.0, start_s: float = 0.5,
           srtt_ms: float = 20.0, after_slow_start: bool = True) -> Steady:
    series = tuple((0.1 * i, int(mbps * 1e6 / 8 * 0.1 * i)) for i in range(31))
    return Steady(start_s=start_s, end_s=start_s + window_s, goodput_mbps=mbps,
                  loss_rate=0.001, retrans=1, data_segs=1000, srtt_ms=srtt_ms, noise=noise,
                  rwnd_limited=0.0, flows=(), congestion_control=("cubic",), series=series,
                  mss=1448, after_slow_start=after_slow_start)


def rates(values: list[float]) -> Callable[[], list[float]]:
    calls: list[int] = []

    def read() -> list[float]:
        calls.append(1)
        return values
    read.calls = calls  # type: ignore[attr-defined]
    return read


def link(capacity: float) -> list[float]:
    return [capacity * (0.99 + 0.02 * i / 300) for i in range(300)] + \
        [capacity * 0.2] * 300


@pytest.mark.parametrize(("window", "noise", "want"), [
    (0.5, 0.05, False),   # window too short, however steady
    (1.5, 0.05, True),    # 15 samples, cv 5%: standard error 1.3%
    (1.5, 0.40, False),   # cv 40%: standard error 10%
    (2.5, None, False),   # no variation known
])
def test_goodput_alone(window: float, noise: float | None, want: bool) -> None:
    read = rates([])
    assert Enough()(steady(window, noise), read) is want
    assert not read.calls, "the ACKs are not read when the capacity is not wanted"  # type: ignore[attr-defined]


def test_the_capacity_probe_waits_for_a_trusted_tight_estimate() -> None:
    s = steady(1.5, 0.05)
    assert Enough(capacity=True)(s, rates(link(100.0)))
    assert not Enough(capacity=True)(s, rates([100.0] * 5)), "5 pairs: not trusted"
    spread = [100.0 * (0.7 + 0.6 * i / 600) for i in range(600)]
    assert not Enough(capacity=True, capacity_halfwidth=0.01)(s, rates(spread))
    # A noisy goodput ends nothing, and the ACKs are then not even read.
    read = rates(link(100.0))
    assert not Enough(capacity=True)(steady(1.5, 0.5), read)
    assert not read.calls  # type: ignore[attr-defined]


def test_a_tight_goodput_in_slow_start_is_not_enough() -> None:
    """Steady and tight, but a stream has not left slow start yet, or left
    it too recently: the share is a start-up share."""
    assert not Enough()(steady(1.5, 0.05, after_slow_start=False), rates([]))
    assert not Enough()(steady(1.5, 0.05, srtt_ms=200.0), rates([]))  # 7.5 RTTs


@pytest.mark.parametrize(("window", "srtt", "past", "want"), [
    (0.8, 20.0, True, True),     # 40 RTTs past slow start
    (0.8, 150.0, True, False),   # 5 RTTs of a deep queue: runs on
    (1.6, 150.0, True, True),    # ... until 10 RTTs
    (3.0, 20.0, False, False),   # a stream still in slow start
])
def test_past_start_up(window: float, srtt: float, past: bool, want: bool) -> None:
    s = steady(window, 0.05, start_s=1.2, srtt_ms=srtt, after_slow_start=past)
    assert past_start_up(s) is want


def test_window_rtts_counts_the_flows_rtts() -> None:
    assert steady(1.0, 0.05, srtt_ms=100.0).window_rtts == pytest.approx(10.0)
    assert past_start_up(steady(1.0, 0.05, srtt_ms=100.0), min_rtts=MIN_WINDOW_RTTS)
    assert not past_start_up(steady(1.0, 0.05, srtt_ms=100.0), min_rtts=11)
    no_rtt = steady(1.0, 0.05, srtt_ms=0.0)
    assert no_rtt.window_rtts is None and not past_start_up(no_rtt)

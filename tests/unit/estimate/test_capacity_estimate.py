"""The ACK-spacing capacity estimate (estimate/acktrain.py) on synthetic ACK
logs: a link-rate peak among pairs spread by cross traffic, the floor, the
cases it must refuse, and sequence wrap."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tamebpf.estimate import acktrain
from tamebpf.estimate.acktrain import (
    LARGE_BAND,
    MIN_PAIRS,
    MIN_SHARE,
    AckLog,
    estimate_capacity,
    pair_rates,
)

MSS = 1448


def link_log(capacity_mbps: float, pairs: int, spaced_share: float, seed: int,
             flows: int = 4, start_seq: int = 1000, jitter: float = 0.03) -> AckLog:
    """ACKs of `flows` connections over a link of `capacity_mbps`: each ACK
    covers two segments; a share `spaced_share` of the gaps carries some
    cross-traffic packets (1-20 of them), the rest are back to back with a
    little timer jitter."""
    rng = random.Random(seed)
    per_seg_ns = MSS * 8e3 / capacity_mbps  # ns per segment at the link rate
    out: dict[int, list[tuple[int, int]]] = {}
    for f in range(flows):
        t, seq = 1_000_000_000 + f * 777, start_seq
        acks = [(t, seq)]
        for _ in range(pairs // flows):
            gap = 2 * per_seg_ns
            if rng.random() < spaced_share:
                gap += rng.randint(1, 20) * per_seg_ns * rng.uniform(0.9, 1.1)
            gap *= 1 + rng.uniform(-jitter, jitter)
            t += int(gap)
            seq = (seq + 2 * MSS) % (1 << 32)
            acks.append((t, seq))
        out[1000 + f] = acks
    return AckLog(out)


def test_the_peak_of_back_to_back_pairs_is_the_capacity() -> None:
    log = link_log(95.64, 4000, spaced_share=0.6, seed=1)
    e = estimate_capacity(pair_rates(log, MSS), floor_mbps=60.0)
    assert e.trusted, e.reason
    assert e.goodput_mbps == pytest.approx(95.64, rel=0.02)
    assert e.low_mbps is not None and e.high_mbps is not None
    assert e.low_mbps <= 95.64 <= e.high_mbps
    assert e.method == "ack-spacing"


def test_pairs_below_the_probes_goodput_do_not_count() -> None:
    """Many pairs spaced by exactly one cross packet form a second, bigger
    peak at a third of the rate; above the floor only the link's remains."""
    rates = [30.0 + 0.1 * (i % 10) for i in range(3000)] + \
        [95.0 + 0.2 * (i % 10) for i in range(500)]
    low = estimate_capacity(rates, floor_mbps=0.0)
    assert low.goodput_mbps == pytest.approx(30.45, rel=0.02)  # what a floor prevents
    e = estimate_capacity(rates, floor_mbps=40.0)
    assert e.goodput_mbps == pytest.approx(95.9, rel=0.02)
    assert e.trusted


def test_too_few_pairs_are_not_trusted() -> None:
    rates = [50.0] * (MIN_PAIRS - 1)
    e = estimate_capacity(rates, floor_mbps=10.0)
    assert e.goodput_mbps == pytest.approx(50.0)
    assert not e.trusted
    assert e.reason and "ACK pairs" in e.reason


def test_no_peak_is_not_trusted() -> None:
    """Rates spread evenly over a decade: nothing to call the link rate."""
    rates = [10.0 * 10 ** (i / 2000) for i in range(2000)]
    e = estimate_capacity(rates, floor_mbps=10.0)
    assert not e.trusted
    assert e.reason and "peak" in e.reason


def _peak_among_spread(peak: int, spread: int) -> list[float]:
    """`peak` pairs at 95 Mbit/s (+-2%) among `spread` pairs spaced by cross
    traffic, evenly over 30-90 Mbit/s (a long probe among many cross flows)."""
    return [95.0 * (0.98 + 0.04 * i / peak) for i in range(peak)] + \
        [30.0 * 3 ** (i / spread) for i in range(spread)]


def test_a_large_peak_with_a_small_share_is_not_trusted() -> None:
    """Fresh draw 4's rule 3 removed the large-band clause: the share
    decides, however many pairs the band holds."""
    assert LARGE_BAND is None
    rates = _peak_among_spread(500, 3200)
    e = estimate_capacity(rates, floor_mbps=20.0)
    assert e.pairs >= 400 and e.pairs < MIN_SHARE * e.considered
    assert e.goodput_mbps == pytest.approx(95.0, rel=0.02)
    assert not e.trusted and e.reason and "peak" in e.reason


def test_the_large_band_setting_still_replays(monkeypatch: pytest.MonkeyPatch) -> None:
    """make eval PRESET=trust re-scores the earlier draws with the clause
    on: set, a band of that size is trusted whatever its share."""
    monkeypatch.setattr(acktrain, "LARGE_BAND", 400)
    e = estimate_capacity(_peak_among_spread(500, 3200), floor_mbps=20.0)
    assert e.pairs < MIN_SHARE * e.considered
    assert e.trusted, e.reason


def test_a_small_peak_with_a_small_share_is_not_trusted() -> None:
    rates = _peak_among_spread(200, 1600)
    e = estimate_capacity(rates, floor_mbps=20.0)
    assert e.goodput_mbps == pytest.approx(95.0, rel=0.02)
    assert not e.trusted
    assert e.reason and "peak" in e.reason


def test_nothing_above_the_floor() -> None:
    e = estimate_capacity([5.0, 6.0], floor_mbps=100.0)
    assert e.goodput_mbps is None and not e.trusted


def test_sequence_wrap_and_long_gaps() -> None:
    log = link_log(40.0, 400, spaced_share=0.0, seed=2, flows=1, start_seq=(1 << 32) - 5000)
    rates = pair_rates(log, MSS)
    assert len(rates) == 400  # the pairs across the wrap count
    assert all(r == pytest.approx(40.0, rel=0.05) for r in rates)
    # An ACK covering many segments (after a loss) is not a spacing.
    big = AckLog({1: [(0, 0), (1000, 40 * MSS)]})
    assert pair_rates(big, MSS) == []


def test_only_keeps_the_data_streams() -> None:
    log = AckLog({1: [(0, 0)], 2: [(0, 0)], 3: [(0, 0)]})
    assert set(log.only([1, 3]).flows) == {1, 3}
    assert log.only(None) is log


@settings(max_examples=40, deadline=None)
@given(capacity=st.floats(10.0, 400.0), spaced=st.floats(0.0, 0.8),
       seed=st.integers(0, 10_000))
def test_the_estimate_follows_the_link(capacity: float, spaced: float, seed: int) -> None:
    """Whatever the rate and however much cross traffic spreads the pairs
    (up to 80% of them), the estimate stays within 3% of the link."""
    log = link_log(capacity, 2000, spaced_share=spaced, seed=seed)
    e = estimate_capacity(pair_rates(log, MSS), floor_mbps=capacity * 0.3)
    assert e.trusted, e.reason
    assert e.goodput_mbps == pytest.approx(capacity, rel=0.03)

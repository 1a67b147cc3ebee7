"""The reach check (estimate/reach.py): the most a transfer acknowledged in
a stretch of time, and a band far above it refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tamebpf.common.records import AckLog
from tamebpf.estimate.acktrain import CapacityEstimate, acked_bytes, advances
from tamebpf.estimate.reach import REACH, peak_acked_mbps, reach_refused

MSS = 1448
MS = 1_000_000


def test_the_peak_counts_every_connection_in_the_same_stretch() -> None:
    a = [(i * MS // 2, i * MSS) for i in range(6)] + [(1000 * MS, 6 * MSS)]
    b = [(i * MS // 2 + 1, i * MSS) for i in range(6)]
    log = AckLog({1: a, 2: b}, 0)
    assert peak_acked_mbps(log, 5) == pytest.approx(10 * MSS * 8e3 / (5 * MS))
    assert peak_acked_mbps(log, 1) == pytest.approx(4 * MSS * 8e3 / MS)
    assert peak_acked_mbps(AckLog({}, 0)) == 0.0


def test_sequence_wrap_counts_as_acknowledged_bytes() -> None:
    top = (1 << 32) - MSS
    log = AckLog({1: [(0, top), (MS, 0), (2 * MS, MSS)]}, 0)
    assert peak_acked_mbps(log, 50) == pytest.approx(2 * MSS * 8e3 / (50 * MS))


@given(st.floats(1.0, 1000.0), st.integers(2, 400), st.floats(1.0, 100.0))
def test_a_steady_rate_peaks_at_that_rate(rate_mbps: float, n: int, width_ms: float) -> None:
    """ACKs of one segment each, evenly at `rate_mbps`: a stretch holds as
    many as fit in it (one more at its edge), never more."""
    gap = MSS * 8e3 / rate_mbps  # ns
    log = AckLog({1: [(round(i * gap), i * MSS) for i in range(n)]}, 0)
    fits = min(n - 1, int(width_ms * MS / gap) + 1)
    assert peak_acked_mbps(log, width_ms) <= (fits + 1) * MSS * 8e3 / (width_ms * MS)
    assert peak_acked_mbps(log, width_ms) >= (fits - 1) * MSS * 8e3 / (width_ms * MS)


def _trusted(mbps: float) -> CapacityEstimate:
    return CapacityEstimate(mbps, mbps * 0.97, mbps * 1.03, 100, 200, True, None)


def test_a_band_far_above_the_peak_is_refused_with_its_reason() -> None:
    assert reach_refused(_trusted(100.0), 100.0 / REACH).trusted
    e = reach_refused(_trusted(100.0), 100.0 / (REACH + 0.5))
    assert not e.trusted and e.goodput_mbps == 100.0
    assert e.reason is not None and "bunched" in e.reason
    untrusted = CapacityEstimate(100.0, None, None, 5, 200, False, "few pairs")
    assert reach_refused(untrusted, 1.0) is untrusted


def test_advances_are_each_acks_new_bytes_across_a_wrap() -> None:
    top = (1 << 32) - MSS
    log = AckLog({1: [(0, top), (MS, 0), (2 * MS, 3 * MSS)], 2: [(5, 0)]}, 0)
    assert advances(log) == [(MS, MSS), (2 * MS, 3 * MSS)]
    assert acked_bytes(log) == 4 * MSS
    assert acked_bytes(AckLog({}, 0)) == 0

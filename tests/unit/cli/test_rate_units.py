"""tamebpf.common.units: each conversion is the arithmetic it replaced, to the bit."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tamebpf.common.units import bytes_per_s, mbps, mbps_over, pace_bytes_per_s, percent

RATES = st.floats(min_value=0, max_value=1e12, allow_nan=False)


def test_known_values() -> None:
    assert mbps(125_000) == 1.0
    assert bytes_per_s(1.0) == 125_000.0
    assert mbps_over(1_250_000, 10) == 1.0
    assert pace_bytes_per_s(0.0) == 1 and pace_bytes_per_s(8.0) == 1_000_000
    assert percent(0.05) == 0.05 * 100


@given(RATES, st.floats(min_value=1e-3, max_value=1e4))
def test_same_bits_as_the_expressions_they_replaced(x: float, seconds: float) -> None:
    assert mbps(x) == x * 8 / 1e6
    assert bytes_per_s(x) == x * 1e6 / 8
    assert mbps_over(x, seconds) == x * 8 / seconds / 1e6
    assert pace_bytes_per_s(x) == max(1, int(x * 1e6 / 8))

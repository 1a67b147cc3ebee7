"""The stored draws' runs, rebuilt once per test process: the count range's
tests (count_range.py, and the studies range_design, range_bound) all
score them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tamebpf_eval import range_design
from tests.unit.eval import count_range

RESULTS = str(Path(__file__).resolve().parents[3] / "docs" / "results")


@pytest.fixture(scope="session")
def runs() -> list[range_design.Run]:
    rs = range_design.runs(RESULTS, range_design.PRODUCT_DRAWS)
    if not rs:
        pytest.skip(f"no stored draws under {RESULTS}")
    return rs


@pytest.fixture(scope="session")
def fitted() -> list[count_range.Run]:
    return count_range.runs()

"""The runs the count range was fitted on, rebuilt once per test process:
its tests (test_eval_count_range.py) all score them."""

from __future__ import annotations

import pytest

from tests.unit.eval import count_range


@pytest.fixture(scope="session")
def fitted() -> list[count_range.Run]:
    return count_range.runs()

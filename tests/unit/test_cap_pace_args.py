"""cap set --mode pace: option checks and the target in bytes/s."""

from __future__ import annotations

import argparse

import pytest

from tamebpf.commands.cap import pace_rate_bytes
from tamebpf.errors import UsageError


def ns(mode: str = "pace", rate: str | None = "100M", max_streams: str | None = None,
       auto: str | None = None) -> argparse.Namespace:
    return argparse.Namespace(mode=mode, rate=rate, max_streams=max_streams, auto=auto)


@pytest.mark.parametrize(("rate", "expected"), [
    ("100M", 12_500_000), ("9.4G", 1_175_000_000), ("500", 62_500_000), ("8k", 1000)])
def test_rate_in_bytes_per_second(rate: str, expected: int) -> None:
    got = pace_rate_bytes(ns(rate=rate))
    assert got == expected, f"--rate {rate}: expected {expected} B/s, got {got}"


def test_refuse_mode_has_no_rate() -> None:
    assert pace_rate_bytes(ns(mode="refuse", rate=None, max_streams="4")) is None


@pytest.mark.parametrize("args", [
    ns(rate=None),                                       # pace without --rate
    ns(mode="refuse", rate="1G", max_streams="4"),       # --rate without pace
    ns(mode="refuse", rate=None),                        # refuse without N
    ns(auto="host"),                                     # pace --auto: not yet
])
def test_bad_combinations_are_usage_errors(args: argparse.Namespace) -> None:
    with pytest.raises(UsageError):
        pace_rate_bytes(args)

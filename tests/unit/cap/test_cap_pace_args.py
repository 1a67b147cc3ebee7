"""cap set: option checks (the same rules as a caps-file entry) and the pace
target in bytes/s."""

from __future__ import annotations

import argparse

import pytest

from tamebpf.commands.cap import rate_bytes, resolve_spec, spec_from_args
from tamebpf.common.errors import UsageError


def ns(mode: str = "pace", rate: str | None = "100M", max_streams: str | None = None,
       auto: str | None = None, max_impact: str | None = None,
       congestion: str = "system") -> argparse.Namespace:
    return argparse.Namespace(mode=mode, rate=rate, max_streams=max_streams, auto=auto,
                              max_impact=max_impact, cgroup="x.slice", dest="10.0.0.0/8",
                              congestion=congestion)


@pytest.mark.parametrize(("rate", "expected"), [
    ("100M", 12_500_000), ("9.4G", 1_175_000_000), ("500", 62_500_000), ("8k", 1000)])
def test_rate_in_bytes_per_second(rate: str, expected: int) -> None:
    got = rate_bytes(rate)
    assert got == expected, f"--rate {rate}: expected {expected} B/s, got {got}"
    how = resolve_spec(spec_from_args(ns(rate=rate)))
    assert how.pace_bytes_per_s == expected, how


def test_refuse_mode_has_no_rate() -> None:
    how = resolve_spec(spec_from_args(ns(mode="refuse", rate=None, max_streams="4")))
    assert (how.max_streams, how.pace_bytes_per_s) == (4, None), how


@pytest.mark.parametrize(("args", "says"), [
    (ns(rate=None), "needs --rate"),                          # pace without a target
    (ns(auto="h", max_impact="5%"), "needs --rate"),          # both a rate and auto
    (ns(max_streams="4"), "--max-streams goes with --mode refuse"),
    (ns(mode="refuse", rate="1G", max_streams="4"), "--rate goes with --mode pace"),
    (ns(mode="refuse", rate=None), "give --max-streams"),     # refuse without N
    (ns(rate=None, auto="h"), "--auto needs --max-impact"),
    (ns(congestion="cubic"), "--congestion goes with --auto"),
    (ns(rate="1G", max_impact="5%"), "--max-impact goes with --auto"),
    (ns(rate="fast"), "not a rate"),
])
def test_bad_combinations_are_usage_errors(args: argparse.Namespace, says: str) -> None:
    with pytest.raises(UsageError) as err:
        spec_from_args(args)
    assert says in str(err.value), f"expected {says!r} in {err.value}"

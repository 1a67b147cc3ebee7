"""A flow's or a group's cumulative TCP counters, and the arithmetic the
aggregation does on them."""

from __future__ import annotations

from dataclasses import dataclass, fields
from operator import add as _plus
from operator import attrgetter


@dataclass(frozen=True)
class Counters:
    """Cumulative TCP counters (the kernel's names)."""

    bytes_acked: int = 0
    bytes_received: int = 0
    bytes_sent: int = 0
    bytes_retrans: int = 0
    segs_out: int = 0
    segs_in: int = 0
    data_segs_out: int = 0
    total_retrans: int = 0


COUNTER_NAMES = tuple(f.name for f in fields(Counters))
# The hot path works on plain tuples in COUNTER_NAMES order: thousands of
# flows per refresh.
Vec = tuple[int, ...]
counters_of = attrgetter(*COUNTER_NAMES)  # a Flow's counters as a Vec
ZERO: Vec = (0,) * len(COUNTER_NAMES)
ACKED = COUNTER_NAMES.index("bytes_acked")
RECEIVED = COUNTER_NAMES.index("bytes_received")
SENT = COUNTER_NAMES.index("bytes_sent")
DATA_SEGS = COUNTER_NAMES.index("data_segs_out")
RETRANS = COUNTER_NAMES.index("total_retrans")


def add(a: Vec, b: Vec) -> Vec:
    return tuple(map(_plus, a, b))


def minus(a: Vec, b: Vec) -> Vec:
    """Field-wise a - b floored at 0 (counters only grow)."""
    return tuple(x - y if x > y else 0 for x, y in zip(a, b, strict=True))


def highest(a: Vec, b: Vec) -> Vec:
    return tuple(map(max, a, b))

"""A paced transfer's path, read from its scout (docs/paths.md, "Caps that
follow the path").

A pace cap holds its streams to a target, so their goodput says what we
chose, not what the path would give: no fit can come from it. One stream of
the cap is left unpaced, the scout (bpf/cap_pace.bpf.h). It competes like
any other flow for what the paced streams leave, C - P, with the m
competing flows, and so gets (C - P) / (m + 1): the share one stream of
ours would get with our transfer absent is then C / (m + 1), the reading a
1-stream probe takes. With the path's capacity C from memory, the capacity
fit on that one point is the fit `advise` would make from a 1-stream probe,
and its advice at the cap's limit is the new target.

Pure: the agent (cap/follow.py) measures, this computes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tamebpf.model import (
    ModelInputError,
    Prediction,
    Probe,
    Settings,
    competing_flows,
    fit_capacity,
    predict,
)

# What the paced streams leave must be at least this share of the capacity
# for the scout's share to say anything: with the link all ours, every m
# fits.
MIN_LEFT = 0.05
# Readings target_range tries across the noise (odd: the reading itself
# is one); the target steps with whole streams, 2 to 8 steps across a band.
RANGE_STEPS = 17


@dataclass(frozen=True)
class ScoutReading:
    """Goodputs (Mbit/s of TCP goodput) over one window: the scout's, and
    the whole cap's (the scout included)."""

    scout_mbps: float
    group_mbps: float
    window_s: float


@dataclass(frozen=True)
class FollowAnswer:
    """The target a reading gives (Mbit/s, the whole cap), or why none."""

    target_mbps: float | None
    prediction: Prediction | None = None
    one_stream_mbps: float | None = None  # the 1-stream probe it stands for
    competing_flows: float | None = None
    why_not: str | None = None


def one_stream_share(reading: ScoutReading, capacity_mbps: float) -> float | None:
    """What one stream of ours would get with the transfer absent,
    C g / (C - P), P = what the paced streams got (None: they left the
    scout too little of the link to tell)."""
    paced = max(reading.group_mbps - reading.scout_mbps, 0.0)
    left = capacity_mbps - paced
    if left < MIN_LEFT * capacity_mbps or reading.scout_mbps <= 0.0:
        return None
    return min(capacity_mbps * reading.scout_mbps / left, capacity_mbps)


def follow_target(reading: ScoutReading, capacity_mbps: float,
                  settings: Settings) -> FollowAnswer:
    one = one_stream_share(reading, capacity_mbps)
    if one is None:
        return FollowAnswer(None, why_not=(
            f"the paced streams got {reading.group_mbps - reading.scout_mbps:.1f} of the "
            f"{capacity_mbps:.1f} Mbit/s capacity: too little left for the scout to measure "
            "the other traffic"))
    try:
        pred = predict(fit_capacity([Probe(1, one)], capacity_mbps), settings)
    except ModelInputError as err:
        return FollowAnswer(None, why_not=str(err))
    return FollowAnswer(pred.advice.max_nondisruptive_thru, pred, one,
                        competing_flows(pred.fit))


def target_range(reading: ScoutReading, capacity_mbps: float, settings: Settings,
                 spread: float) -> tuple[float, float] | None:
    """The targets this reading cannot tell apart: those it gives with the
    scout's goodput moved by up to 1 + spread either way (its noise; the
    paced streams are held, so theirs is not). The target moves in steps
    of whole streams, not monotonically, so the moves are a grid of
    RANGE_STEPS, not just the two ends. None: the reading gives no target."""
    targets = []
    top = math.log1p(spread)
    for i in range(RANGE_STEPS):
        f = math.exp(top * (2 * i / (RANGE_STEPS - 1) - 1))
        moved = ScoutReading(reading.scout_mbps * f,
                             reading.group_mbps + reading.scout_mbps * (f - 1.0),
                             reading.window_s)
        t = follow_target(moved, capacity_mbps, settings).target_mbps
        if t is not None:
            targets.append(t)
    return (min(targets), max(targets)) if targets else None

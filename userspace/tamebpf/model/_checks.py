"""Input validation shared by the model functions.

The model never lets a NaN or an infinity through: every number that enters is
checked here, and bad input raises ModelInputError with a message that names
the value, so the CLI can turn it into a one-line usage error.
"""

from __future__ import annotations

import math


class ModelInputError(ValueError):
    """Input the model cannot use (non-finite, non-positive, too few levels...)."""


def finite(value: float, what: str) -> float:
    """Return value as a float if it is a finite real number, else raise."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ModelInputError(f"{what} must be a number, got {value!r}")
    x = float(value)
    if not math.isfinite(x):
        raise ModelInputError(f"{what} must be finite, got {value!r}")
    return x


def positive(value: float, what: str) -> float:
    x = finite(value, what)
    if x <= 0.0:
        raise ModelInputError(f"{what} must be > 0, got {value!r}")
    return x


def fraction(value: float, what: str) -> float:
    """A number in [0, 1] (loss rates, impact limits, gain thresholds)."""
    x = finite(value, what)
    if not 0.0 <= x <= 1.0:
        raise ModelInputError(f"{what} must be in [0, 1], got {value!r}")
    return x


def stream_count(value: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ModelInputError(f"{what} must be a whole number of streams, got {value!r}")
    if value < 1:
        raise ModelInputError(f"{what} must be >= 1, got {value!r}")
    return value

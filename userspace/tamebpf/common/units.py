"""Rates and fractions: the conversions several layers make, written once.

Pure (no I/O). The kernel counts bytes and paces in bytes/s; people and the
model speak Mbit/s (10^6 bit/s); fractions (0.05) are shown as percent (5).
Each function keeps the order of its arithmetic, so a value converted here
is the same float, to the last bit, as the expression it replaced.
"""

from __future__ import annotations


def mbps(bytes_per_s: float) -> float:
    """bytes/s -> Mbit/s."""
    return bytes_per_s * 8 / 1e6


def mbps_over(nbytes: float, seconds: float) -> float:
    """Bytes carried in `seconds` -> their rate in Mbit/s."""
    return nbytes * 8 / seconds / 1e6


def bytes_per_s(mbit_per_s: float) -> float:
    """Mbit/s -> bytes/s."""
    return mbit_per_s * 1e6 / 8


def pace_bytes_per_s(mbit_per_s: float) -> int:
    """Mbit/s -> a pacing rate the kernel takes: whole bytes/s, at least 1."""
    return max(1, int(bytes_per_s(mbit_per_s)))


def percent(fraction: float) -> float:
    """0.05 -> 5.0."""
    return fraction * 100

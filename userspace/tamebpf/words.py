"""Small wording helpers shared by every text output."""

from __future__ import annotations


def count(n: int, word: str) -> str:
    """'1 stream', '2 streams', '0 streams'."""
    return f"{n} {word}{'' if n == 1 else 's'}"

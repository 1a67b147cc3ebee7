"""Small wording helpers shared by every text output."""

from __future__ import annotations


def count(n: int, word: str) -> str:
    """'1 stream', '2 streams', '0 streams'."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def printable(text: str) -> str:
    r"""TEXT with every character a terminal would act on (C0 and C1
    controls, DEL, ESC, and the other invisible ones: bidi overrides, line
    separators) shown as its Python escape (\x1b, \n, \u202e). Strings that
    came from another node or a file (Prometheus labels, path memory's rows)
    go through this before they reach the terminal, so no label can move the
    cursor or forge a line of output."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
                   for c in text)

"""Errors that reach the user as one line on stderr and a non-zero exit."""

from __future__ import annotations


class TamebpfError(Exception):
    """A failure the user can act on: what went wrong, and what to do."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}: {self.hint}" if self.hint else self.message


class UsageError(TamebpfError):
    """Bad input on the command line (exit code 2, as argparse uses)."""

    exit_code = 2

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


class NoAdviceError(TamebpfError):
    """The command ran as asked but no advice is possible (BBR, too few
    measurements...): a distinct exit code, so scripts can tell it from a
    failure and fall back to their own stream count."""

    exit_code = 3


# Every exit status tamebpf uses: documented in the man pages (EXIT STATUS,
# scripts/gen_man.py), docs/deploy.md and README.md.
EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_NO_ADVICE, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_STATUS: dict[int, str] = {
    EXIT_OK: "success; for advise, advice was given",
    EXIT_ERROR: "an error (the kernel, a probe, a file): the message on stderr says what "
    "to do",
    EXIT_USAGE: "bad command-line input, named on stderr; for paths, also a state "
    "directory it cannot use (a refused, unreadable or unwritable paths.db)",
    EXIT_NO_ADVICE: "advise only: it ran, but no advice is possible (the reason is on "
    "stdout, or in --json's 'refused'), or no iperf3 server answered and path memory had "
    "nothing for the path (said on stderr)",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C or SIGTERM); what was attached is detached",
}

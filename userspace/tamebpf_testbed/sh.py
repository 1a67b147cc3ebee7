"""Running commands, in the root namespace or inside one of ours."""

from __future__ import annotations

import subprocess
from collections.abc import Collection, Sequence

from tamebpf.common.errors import TamebpfError


class CommandError(TamebpfError):
    """A command the testbed needed failed."""


def run(argv: Sequence[str], *, check: bool = True, timeout: float = 30.0,
        stdin: str | None = None, ok: Collection[int] = (0,)) -> str:
    """Runs argv (stdin: text it reads), returns its stdout; raises
    CommandError with stderr on failure: an exit status not in ok."""
    try:
        proc = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, check=False,
            input=stdin,
        )
    except FileNotFoundError as err:
        raise CommandError(f"{argv[0]} not found", "run scripts/install-deps") from err
    except subprocess.TimeoutExpired as err:
        raise CommandError(f"{' '.join(argv)} timed out after {timeout:.0f} s") from err
    if check and proc.returncode not in ok:
        raise CommandError(
            f"{' '.join(argv)} failed ({proc.returncode})", proc.stderr.strip() or None
        )
    return proc.stdout


def in_ns(ns: str, argv: Sequence[str]) -> list[str]:
    """argv run inside network namespace ns (ip netns exec execs, keeping the pid)."""
    return ["ip", "netns", "exec", ns, *argv]


def ns_run(ns: str, argv: Sequence[str], *, check: bool = True, timeout: float = 30.0,
           stdin: str | None = None) -> str:
    return run(in_ns(ns, argv), check=check, timeout=timeout, stdin=stdin)


def ip_batch(ns: str | None, commands: Sequence[str], *, check: bool = True) -> str:
    """`ip` commands (without the leading "ip") run by one `ip -batch` process,
    in network namespace ns (None: the root's); it stops at the first that
    fails (unless check is False: then it goes on, -force) and names its line.
    One process instead of one per command: every test's testbed pays for them."""
    argv = ["ip", *(["-n", ns] if ns else []), *([] if check else ["-force"]), "-batch", "-"]
    return run(argv, check=check, stdin="".join(f"{c}\n" for c in commands))

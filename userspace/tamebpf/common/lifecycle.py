"""How a long-running command ends: signals that must unwind like an exit.

Every command that runs for long goes through here: `watch` and `export`
(terminate_as_exit), and the commands that probe, `advise` and `cap set` /
`cap apply` with `auto` caps (terminate_as_interrupt)."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator
from types import FrameType
from typing import NoReturn


@contextlib.contextmanager
def _handled(signals: tuple[signal.Signals, ...],
             handler: Callable[[int, FrameType | None], NoReturn]) -> Iterator[None]:
    old = {s: signal.signal(s, handler) for s in signals}
    try:
        yield
    finally:
        for s, previous in old.items():
            signal.signal(s, previous)


@contextlib.contextmanager
def terminate_as_exit(on_hangup: Callable[[], None] | None = None) -> Iterator[None]:
    """SIGTERM (and SIGHUP) raise SystemExit, so every `finally` runs: the
    terminal is restored and the BPF programs detached. SIGTERM is how a
    service manager stops us, so it is a clean exit (0); a hang-up is not,
    unless `on_hangup` is given: a daemon with nothing to re-read (export)
    says so through it and stops cleanly, as on SIGTERM."""

    def stop(signum: int, frame: FrameType | None) -> NoReturn:
        if signum == signal.SIGHUP and on_hangup is not None:
            on_hangup()
            raise SystemExit(0)
        raise SystemExit(0 if signum == signal.SIGTERM else 128 + signum)

    with _handled((signal.SIGTERM, signal.SIGHUP), stop):
        yield


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM, SIGHUP (the terminal closed) and SIGQUIT raise
    KeyboardInterrupt, as Ctrl-C does: a probe stopped any of these ways
    removes its cgroup, stops its traffic and detaches its BPF programs
    (advise/probes.py), and the command ends "interrupted" (130). Left to
    their default, HUP and QUIT would end the process at once and leave the
    probe's cgroup behind."""

    def interrupt(signum: int, frame: FrameType | None) -> NoReturn:
        raise KeyboardInterrupt

    with _handled((signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT), interrupt):
        yield

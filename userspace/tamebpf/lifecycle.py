"""How a long-running command ends: signals that must unwind like an exit."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType
from typing import NoReturn


@contextlib.contextmanager
def terminate_as_exit() -> Iterator[None]:
    """SIGTERM (and SIGHUP) raise SystemExit, so every `finally` runs: the
    terminal is restored and the BPF programs detached. SIGTERM is how a
    service manager stops us, so it is a clean exit (0); a hang-up is not."""

    def stop(signum: int, frame: FrameType | None) -> NoReturn:
        raise SystemExit(0 if signum == signal.SIGTERM else 128 + signum)

    old = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)

"""How the commands' signals end them (lifecycle.py)."""

from __future__ import annotations

import os
import signal

import pytest

from tamebpf.lifecycle import terminate_as_exit, terminate_as_interrupt


def test_sigterm_interrupts_a_probe_and_the_handler_is_restored() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt), terminate_as_interrupt():
        os.kill(os.getpid(), signal.SIGTERM)
        signal.pause()  # not reached: the handler raises first
    assert signal.getsignal(signal.SIGTERM) is before


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 0), (signal.SIGHUP, 128 + 1)])
def test_sigterm_and_sighup_exit(sig: signal.Signals, code: int) -> None:
    before = signal.getsignal(sig)
    with pytest.raises(SystemExit) as exc, terminate_as_exit():
        os.kill(os.getpid(), sig)
        signal.pause()
    assert exc.value.code == code
    assert signal.getsignal(sig) is before

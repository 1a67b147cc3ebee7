"""How the commands' signals end them (common/lifecycle.py)."""

from __future__ import annotations

import os
import signal

import pytest

from tamebpf.common.lifecycle import terminate_as_exit, terminate_as_interrupt


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT])
def test_term_hup_and_quit_interrupt_a_probe_and_the_handler_is_restored(
        sig: signal.Signals) -> None:
    before = signal.getsignal(sig)
    with pytest.raises(KeyboardInterrupt), terminate_as_interrupt():
        os.kill(os.getpid(), sig)
        signal.pause()  # not reached: the handler raises first
    assert signal.getsignal(sig) is before


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 0), (signal.SIGHUP, 128 + 1)])
def test_sigterm_and_sighup_exit(sig: signal.Signals, code: int) -> None:
    before = signal.getsignal(sig)
    with pytest.raises(SystemExit) as exc, terminate_as_exit():
        os.kill(os.getpid(), sig)
        signal.pause()
    assert exc.value.code == code
    assert signal.getsignal(sig) is before


def test_a_hangup_with_a_handler_is_said_and_a_clean_exit() -> None:
    said: list[str] = []
    with pytest.raises(SystemExit) as exc, terminate_as_exit(on_hangup=lambda: said.append("hup")):
        os.kill(os.getpid(), signal.SIGHUP)
        signal.pause()
    assert exc.value.code == 0 and said == ["hup"]

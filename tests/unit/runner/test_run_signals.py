"""`tamebpf run` passes a signal on to CMD's process group once
(runner/signals.Job): a signal the terminal sent while CMD's group holds
it has reached CMD already; any other has not. CMD runs in a process group
of its own, so a signal to run's group does not reach it directly. One
that came during set-up means CMD is not started (runner/child.start).
Real child processes and signals, no root."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from tamebpf.runner.child import NotStarted, start
from tamebpf.runner.signals import SI_KERNEL, Job

# The child blocks SIGINT, says it is ready, and after a while says whether
# a SIGINT is pending.
CHILD = ("import signal, time; signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}); "
         "print('ready', flush=True); time.sleep(0.5); "
         "print(signal.SIGINT in signal.sigpending(), flush=True)")


def test_a_signal_run_gets_reaches_cmds_group_once() -> None:
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True,
                             process_group=0)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        # A group of its own, as CMD's; no terminal handed to it.
        Job(child, None).on_signal(SimpleNamespace(si_code=SI_KERNEL, si_signo=signal.SIGINT))
        assert child.stdout.readline().strip() == "True", "SIGINT not passed on"
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGQUIT], ids=lambda s: s.name)
def test_a_signal_held_during_set_up_means_cmd_is_not_started(tmp_path: Path,
                                                             sig: signal.Signals) -> None:
    ran = tmp_path / "ran"
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {sig})
    try:
        signal.pthread_kill(threading.get_ident(), sig)  # pending, as in run's set-up
        with pytest.raises(NotStarted) as got:
            start(["touch", str(ran)], str(tmp_path), None)
    finally:
        signal.sigtimedwait({sig}, 0)
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    assert (got.value.exit_code, str(got.value)) == (
        128 + sig, f"interrupted by {sig.name} before touch started"), got.value
    assert not ran.exists(), f"CMD started with {sig.name} pending"

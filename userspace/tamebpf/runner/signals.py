"""How `tamebpf run` passes signals to CMD and shares its terminal.

CMD runs in a process group of its own, so a signal sent to run's group
(`kill -TERM -PGID`, as a service manager or a batch system sends it)
reaches run alone, and run passes it on: CMD's group gets it once. When
run is the foreground job of a terminal it hands the terminal to CMD's
group, as a shell does for a job: Ctrl-C and Ctrl-Z then reach CMD
straight from the terminal, and CMD can read from it. When CMD stops
(Ctrl-Z), run takes the terminal back and stops too, so the shell sees the
job stopped; continued (`fg`, `bg`, SIGCONT), run hands the terminal over
again if it is in the foreground and continues CMD.

SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTSTP and SIGCONT, and SIGCHLD, are
held blocked from the first step of set-up to the last of the tidy, so
none can leave a cap, a cgroup, a BPF program or a process behind; while
CMD runs they are waited for (sigtimedwait) and acted on here. SIGTTOU is
held too: run may set the terminal's foreground and write its summary
from the background. SIGKILL and SIGSTOP cannot be caught, so they are
not passed on: a SIGKILL of run's group leaves CMD running, paced, until
it ends (the next tamebpf command tidies after it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from typing import Any

# Passed on to CMD's group as they come.
PASSED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
# Waited for while CMD runs: the passed ones, job control, CMD's state.
WAITED = (*PASSED, signal.SIGTSTP, signal.SIGCONT, signal.SIGCHLD)
# Blocked in run from set-up to tidy; CMD unblocks them before exec.
HELD = (*WAITED, signal.SIGTTOU)
SI_KERNEL = 0x80  # si_code of a signal the kernel sent (a terminal's Ctrl-C, a hang-up)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """HELD blocked while the block runs, for sigtimedwait or for later;
    those still pending on the way out are dropped: CMD has ended (or
    never started) and all is tidied."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
    try:
        yield
    finally:
        while signal.sigtimedwait(WAITED, 0) is not None:
            pass
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def foreground_terminal() -> int | None:
    """A descriptor of run's terminal when run is its foreground job (so
    CMD should have it), else None: no terminal, or run in the background."""
    for fd in (0, 1, 2):
        with contextlib.suppress(OSError):
            if os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp():
                return fd
    return None


def give_terminal(fd: int | None, pgid: int) -> None:
    """Makes `pgid` the terminal's foreground group (with SIGTTOU blocked:
    a background group may set it then)."""
    if fd is not None:
        with contextlib.suppress(OSError):
            os.tcsetpgrp(fd, pgid)


class Job:
    """CMD's process group, as run's one job."""

    def __init__(self, child: subprocess.Popen[bytes], terminal: int | None) -> None:
        self.child, self.terminal, self.pgid = child, terminal, child.pid
        # Also here, not only in CMD before its exec: whichever runs first.
        with contextlib.suppress(OSError):
            os.setpgid(child.pid, child.pid)
        give_terminal(terminal, self.pgid)

    def holds_terminal(self) -> bool:
        with contextlib.suppress(OSError):
            return self.terminal is not None and os.tcgetpgrp(self.terminal) == self.pgid
        return False

    def take_terminal(self) -> None:
        """The terminal back to run's group, if CMD's group has it."""
        if self.holds_terminal():
            give_terminal(self.terminal, os.getpgrp())

    def on_signal(self, info: Any) -> None:
        """What a signal run waited for means for CMD."""
        sig = info.si_signo
        if sig == signal.SIGCHLD:
            self._stop_if_stopped()
        elif sig == signal.SIGCONT:
            self._continue()
        elif info.si_code == SI_KERNEL and self.holds_terminal():
            pass  # the terminal sent it to its foreground group, CMD's, already
        else:
            self._send(sig)

    def _send(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, sig)

    def _stop_if_stopped(self) -> None:
        """CMD stopped (Ctrl-Z, SIGTSTP): so does run, the terminal back
        with it, as a shell's job stops. Continued, it gets SIGCONT."""
        try:
            state = os.waitid(os.P_PID, self.child.pid, os.WSTOPPED | os.WNOHANG)
        except ChildProcessError:
            return
        if state is None or state.si_code != os.CLD_STOPPED:
            return
        self.take_terminal()
        os.kill(os.getpid(), signal.SIGSTOP)

    def _continue(self) -> None:
        if self.terminal is not None and foreground_terminal() is not None:
            give_terminal(self.terminal, self.pgid)  # `fg`: the foreground again
        self._send(signal.SIGCONT)

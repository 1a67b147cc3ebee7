"""CMD, started the way a shell starts a job, in the run's cgroup (sockets
belong to the cgroup of the task that creates them), in a process group of
its own (runner/signals.py) and, when asked, in a network namespace; and
its exit status as a shell reports it."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
from collections.abc import Sequence

from tamebpf.common.errors import TamebpfError
from tamebpf.kernel.netns import enter_netns
from tamebpf.runner.signals import HELD, PASSED

# As a shell gives them: the command was not found, or found but could not
# be executed.
EXIT_NOT_FOUND, EXIT_NOT_EXECUTABLE = 127, 126


class NotStarted(TamebpfError):
    """CMD could not be started: exit 127 or 126, as a shell gives (128+N
    when signal N came first)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def start(argv: Sequence[str], cgroup: str, netns: str | None,
          terminal: int | None = None) -> subprocess.Popen[bytes]:
    """CMD running, with our stdin, stdout and stderr, in CGROUP and a
    process group of its own, the foreground one of TERMINAL if given; not
    started when one of the PASSED signals came during set-up (held
    pending): 128+N, as a shell gives."""
    if not argv[0]:
        raise NotStarted("'': command not found", EXIT_NOT_FOUND)  # as sh says of ""
    came = set(PASSED) & signal.sigpending()
    if came:
        sig = min(came)
        raise NotStarted(f"interrupted by {sig.name} before {argv[0]} started", 128 + sig)

    def enter() -> None:
        # In the child, before exec: no Python thread runs here. The
        # terminal is taken while SIGTTOU is still blocked (a background
        # group may then set it): before CMD can read from it.
        if terminal is not None:
            with contextlib.suppress(OSError):
                os.tcsetpgrp(terminal, os.getpgrp())
        signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD)
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
        if netns:
            enter_netns(netns)

    try:
        return subprocess.Popen(list(argv), preexec_fn=enter, close_fds=False,
                                process_group=0)
    except FileNotFoundError:
        raise NotStarted(f"{argv[0]}: command not found", EXIT_NOT_FOUND) from None
    except OSError as err:
        code = EXIT_NOT_FOUND if err.errno == errno.ENOENT else EXIT_NOT_EXECUTABLE
        raise NotStarted(f"{argv[0]}: {err.strerror}", code) from None
    except subprocess.SubprocessError as err:  # the preexec step failed
        raise TamebpfError(f"cannot start {argv[0]} in {cgroup}: {err}") from None


def shell_status(returncode: int) -> int:
    """Popen's returncode as a shell's $?: a death by signal N is 128 + N."""
    return 128 - returncode if returncode < 0 else returncode

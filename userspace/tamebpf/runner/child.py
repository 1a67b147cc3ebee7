"""CMD, started the way a shell would, in the run's cgroup (sockets belong
to the cgroup of the task that creates them) and, when asked, in a network
namespace; and its exit status as a shell reports it."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
from collections.abc import Sequence

from tamebpf.errors import TamebpfError
from tamebpf.kernel.netns import enter_netns

# As a shell gives them: the command was not found, or found but could not
# be executed.
EXIT_NOT_FOUND, EXIT_NOT_EXECUTABLE = 127, 126
# The signals the run passes on to CMD, and those it waits for: session.py
# holds them blocked from set-up to tidy; CMD must not inherit them blocked.
PASSED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
WAITED = (*PASSED, signal.SIGCHLD)


class NotStarted(TamebpfError):
    """CMD could not be started: exit 127 or 126, as a shell gives (128+N
    when signal N came first)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def start(argv: Sequence[str], cgroup: str, netns: str | None) -> subprocess.Popen[bytes]:
    """CMD running, with our stdin, stdout and stderr, in CGROUP; not
    started when one of the PASSED signals came during set-up (held
    pending): 128+N, as a shell gives."""
    came = set(PASSED) & signal.sigpending()
    if came:
        sig = min(came)
        raise NotStarted(f"interrupted by {sig.name} before {argv[0]} started", 128 + sig)

    def enter() -> None:
        # In the child, before exec: no Python thread runs here.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, WAITED)
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
        if netns:
            enter_netns(netns)

    try:
        return subprocess.Popen(list(argv), preexec_fn=enter, close_fds=False)
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

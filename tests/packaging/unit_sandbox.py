#!/usr/bin/python3
"""Run a command under the kernel-side restrictions a hardened unit of
docs/ puts on it, without systemd (PID 1 on the test machines is not
systemd): no_new_privs, memory that is never writable and executable
(PR_SET_MDWE, MemoryDenyWriteExecute=), and a seccomp filter that allows the
unit's SystemCallFilter= (a call outside it fails with EPERM, as
SystemCallErrorNumber=EPERM does) and socket() only for the unit's
RestrictAddressFamilies=. Run by the system Python, which has libseccomp's
bindings (python3-seccomp):

    unit_sandbox.py SYSCALLS_FILE FAMILIES -- COMMAND...

SYSCALLS_FILE lists the allowed system calls, one a line; FAMILIES is a
comma-separated list of address family numbers.
"""

import contextlib
import ctypes
import errno
import os
import sys

import seccomp

PR_SET_NO_NEW_PRIVS, PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN = 38, 65, 1


def main() -> None:
    names_file, families, sep, *command = sys.argv[1:]
    assert sep == "--" and command, __doc__
    libc = ctypes.CDLL(None, use_errno=True)
    for option, value in ((PR_SET_NO_NEW_PRIVS, 1), (PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN)):
        if libc.prctl(option, value, 0, 0, 0) != 0:
            sys.exit(f"unit_sandbox: prctl({option}) failed: {os.strerror(ctypes.get_errno())}")
    rules = seccomp.SyscallFilter(defaction=seccomp.ERRNO(errno.EPERM))
    with open(names_file) as f:
        names = {line.strip() for line in f if line.strip()}
    for name in sorted(names - {"socket"}):
        # A name that is no system call on this architecture is skipped.
        with contextlib.suppress(RuntimeError, ValueError):
            rules.add_rule(seccomp.ALLOW, name)
    if "socket" in names:
        for family in families.split(","):
            rules.add_rule(seccomp.ALLOW, "socket", seccomp.Arg(0, seccomp.EQ, int(family)))
    rules.load()
    os.execv(command[0], command)


if __name__ == "__main__":
    main()

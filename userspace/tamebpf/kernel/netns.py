"""Network namespaces by name: where `ip netns` keeps them, and entering one."""

from __future__ import annotations

import ctypes
import os

CLONE_NEWNET = 0x40000000


def netns_path(name: str) -> str:
    """A namespace as `ip netns` names it, or a path such as /proc/PID/ns/net."""
    return name if "/" in name else f"/run/netns/{name}"


def enter_netns(name: str) -> None:
    """setns(2) this thread into a network namespace (os.setns needs Python
    3.12). For a forked child that will live there: the C library enters a
    namespace only around creating an iterator (tb_iter_create_in)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(netns_path(name), os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {name}")
    finally:
        os.close(fd)

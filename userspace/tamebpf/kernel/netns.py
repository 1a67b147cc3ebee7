"""Network namespaces by name: where `ip netns` keeps them, entering one, and
reading the settings a namespace has of its own."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import threading

from tamebpf.common.errors import UsageError

CLONE_NEWNET = 0x40000000
NS_GET_NSTYPE = 0xB703  # _IO(0xb7, 0x3), linux/nsfs.h


def netns_path(name: str) -> str:
    """A namespace as `ip netns` names it, or a path such as /proc/PID/ns/net."""
    return name if "/" in name else f"/run/netns/{name}"


def open_netns(name: str, option: str = "--netns") -> int:
    """An fd of a network namespace named as `ip netns` does or by a path
    (/proc/PID/ns/net). Anything else (no such name, a file that is no
    namespace: /etc/passwd, another kind of namespace) is a usage error
    naming the input, before anything is loaded."""
    path = netns_path(name)
    hint = "name one from 'ip netns list', or give /proc/PID/ns/net"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else str(exc)
        raise UsageError(f"{option} {name!r}: {why}", hint) from None
    try:
        kind = fcntl.ioctl(fd, NS_GET_NSTYPE)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.ENOTTY, errno.EINVAL):
            raise UsageError(f"{option} {name!r}: {path} is not a namespace", hint) from None
        raise UsageError(f"{option} {name!r}: {exc.strerror}", hint) from None
    if kind != CLONE_NEWNET:
        os.close(fd)
        raise UsageError(f"{option} {name!r}: {path} is not a network namespace", hint)
    return fd


def check_netns(name: str, option: str = "--netns") -> None:
    os.close(open_netns(name, option))


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


def read_in_netns(name: str | None, path: str) -> str:
    """A /proc/sys/net file as seen from inside a namespace (None: ours).
    Those files show the namespace of whoever opens them, so a short-lived
    thread enters it and reads; this process's own threads stay where they
    are."""
    if name is None:
        with open(path, encoding="ascii") as f:
            return f.read().strip()
    out: list[str | BaseException] = []

    def read() -> None:
        try:
            enter_netns(name)
            with open(path, encoding="ascii") as f:
                out.append(f.read().strip())
        except BaseException as err:  # noqa: BLE001 - handed to the caller
            out.append(err)

    reader = threading.Thread(target=read, name="read_in_netns")
    reader.start()
    reader.join()
    if isinstance(out[0], BaseException):
        raise out[0]
    return out[0]


def default_congestion_control(name: str | None) -> str:
    """The congestion control a new TCP socket gets in this namespace."""
    return read_in_netns(name, "/proc/sys/net/ipv4/tcp_congestion_control")

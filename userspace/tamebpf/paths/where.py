"""Which path a destination is on: its prefix, the namespace, and the
congestion control (paths/entry.PathKey)."""

from __future__ import annotations

import ipaddress
import os
import socket
import threading
import urllib.parse
from typing import Any

from tamebpf.common.errors import TamebpfError, UsageError
from tamebpf.common.values import shown
from tamebpf.paths.entry import REMOTE_CC, PathKey

RESOLVE_S = 10.0  # a name server that has not answered by then is not going to
# The resolver's answers that mean "no such name", not "could not ask".
NO_SUCH_NAME = {socket.EAI_NONAME, socket.EAI_NODATA, socket.EAI_FAIL, socket.EAI_SERVICE}

AddrInfo = tuple[Any, ...]


def lookup(host: str, port: int | None, seconds: float) -> list[AddrInfo] | OSError | None:
    """getaddrinfo's answer, its error, or None when none came within
    `seconds` (it has no time limit of its own: it runs in a thread)."""
    found: list[list[AddrInfo] | OSError] = []

    def ask() -> None:
        try:
            found.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except OSError as err:
            found.append(err)
        except UnicodeError as err:  # the idna codec's, for a name values.parse_host refuses
            found.append(OSError(str(err)))

    asker = threading.Thread(target=ask, name="resolve", daemon=True)
    asker.start()
    asker.join(seconds)
    return found[0] if found else None


def resolve(host: str, option: str, port: int | None = None,
            seconds: float = RESOLVE_S) -> list[AddrInfo]:
    """The host's addresses. A name that does not exist is bad input (exit
    2, naming OPTION); a resolver that fails or does not answer is an
    error (exit 1)."""
    answer = lookup(host, port, seconds)
    if isinstance(answer, list) and answer:
        return answer
    hint = "give an address or a name this host resolves"
    if answer is None:
        raise TamebpfError(f"{option} {shown(host)}: no answer from the name server within "
                           f"{seconds:g} s", hint)
    why = answer.strerror if isinstance(answer, OSError) and answer.strerror else "no address"
    if not isinstance(answer, socket.gaierror) or answer.errno in NO_SUCH_NAME:
        raise UsageError(f"bad {option} {shown(host)}: cannot resolve it ({why})", hint)
    raise TamebpfError(f"{option} {shown(host)}: cannot resolve it ({why})", hint)


def host_prefix(host: str) -> str:
    """The host's address as a /32 or /128 (names are resolved)."""
    try:
        return str(ipaddress.ip_network(host))
    except ValueError:
        pass
    return str(ipaddress.ip_network(resolve(host, "host")[0][4][0]))


def netns_id(name: str | None) -> str:
    """The namespace as path memory names it: an `ip netns` name as given,
    'host' for the init namespace, else 'inode:N' of our own."""
    if name:
        return name
    ours = os.stat("/proc/self/ns/net").st_ino
    try:
        init = os.stat("/proc/1/ns/net").st_ino
    except OSError:
        init = None
    return "host" if ours == init else f"inode:{ours}"


def path_key(host: str, netns: str | None, congestion: str, direction: str = "send") -> PathKey:
    """A download's path is kept under REMOTE_CC, whatever its probes asked
    the server to run: transfers that teach it cannot tell."""
    if direction == "receive":
        return PathKey(host_prefix(host), netns_id(netns), REMOTE_CC, "receive")
    return PathKey(host_prefix(host), netns_id(netns), congestion)


def check_url_host(url: str | None, option: str, seconds: float = RESOLVE_S) -> None:
    """A URL's host that does not exist is bad input, said before anything
    else; a name server that fails or is slow is not (the request then says
    so, and the command goes on without it)."""
    host = urllib.parse.urlsplit(url).hostname if url else None
    if host:
        try:
            resolve(host, option, seconds=seconds)
        except UsageError:
            raise
        except TamebpfError:
            pass

"""Which path a destination is on: its prefix, the namespace, and the
congestion control (paths/entry.PathKey)."""

from __future__ import annotations

import ipaddress
import os
import socket

from tamebpf.errors import TamebpfError
from tamebpf.paths.entry import PathKey


def host_prefix(host: str) -> str:
    """The host's address as a /32 or /128 (names are resolved)."""
    try:
        return str(ipaddress.ip_network(host))
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError as err:
        raise TamebpfError(f"cannot resolve {host!r}: {err}",
                           hint="give an address or a name this host resolves") from err
    return str(ipaddress.ip_network(infos[0][4][0]))


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


def path_key(host: str, netns: str | None, congestion: str) -> PathKey:
    return PathKey(host_prefix(host), netns_id(netns), congestion)

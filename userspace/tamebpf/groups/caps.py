"""Caps as watch and export see them (CapLimit), and what they say of a group:
the tightest stream cap, whether the group runs more streams than one
allows, and the pace cap it is held to."""

from __future__ import annotations

import ipaddress
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple


@dataclass(frozen=True)
class CapLimit:
    """A limit on streams set by `tamebpf cap`, as watch and export see it.

    None in cgroup or remote means "any"; cgroup covers its subtree; remote
    is an address or a network (CIDR); port None means every port, and
    port_end the last port of a range (None: just `port`)."""

    streams: int
    cgroup: str | None = None
    remote: str | None = None
    port: int | None = None
    pace_bps: float | None = None  # a pace cap: the group's target, bit/s (streams unused)
    port_end: int | None = None
    follows: bool = False  # a pace cap whose target the agent keeps on the path

    def covers_port(self, port: int) -> bool:
        if self.port is None:
            return True
        return self.port <= port <= (self.port if self.port_end is None else self.port_end)

    def matches(self, cgroups: Iterable[str | None], remote_addr: str) -> bool:
        if self.cgroup is not None and not any(
            c is not None and (c == self.cgroup or c.startswith(self.cgroup.rstrip("/") + "/"))
            for c in cgroups
        ):
            return False
        if self.remote is None:
            return True
        try:
            net = ipaddress.ip_network(self.remote, strict=False)
            return ipaddress.ip_address(remote_addr) in net
        except ValueError:
            return self.remote == remote_addr


class CapMarks(NamedTuple):
    cap: int | None  # the tightest matching stream cap, in streams
    over_cap: bool  # a matching cap counts more streams than it allows
    paced_bps: float | None  # the tightest matching pace cap's target, bit/s
    paced_follows: bool  # ... and that cap follows the path (cap/follow.py)
    pacer: CapLimit | None  # that cap: groups it paces share its target


def cap_marks(caps: Sequence[CapLimit], cgroups: Collection[str | None], remote_addr: str,
              streams: int, ports: Mapping[int, int]) -> CapMarks:
    """What the caps say of a group of `streams` streams (`ports`: how many
    toward each remote port) from `cgroups` to remote_addr."""
    matching = [c for c in caps if c.matches(cgroups, remote_addr)]
    pacers = [c for c in matching if c.pace_bps is not None]
    pacer = min(pacers, key=lambda c: c.pace_bps or 0.0) if pacers else None
    matching = [c for c in matching if c.pace_bps is None]  # pace caps refuse nothing
    over_cap = any(
        (streams if c.port is None
         else sum(n for p, n in ports.items() if c.covers_port(p))) > c.streams
        for c in matching
    )
    return CapMarks(
        cap=min(c.streams for c in matching) if matching else None,
        over_cap=over_cap,
        paced_bps=None if pacer is None else pacer.pace_bps,
        paced_follows=pacer is not None and pacer.follows,
        pacer=pacer,
    )

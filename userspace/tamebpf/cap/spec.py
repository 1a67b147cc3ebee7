"""Stream caps as data: destinations (CIDR[:PORT]), the checks every cap
passes, and one cap as asked for (CapSpec). Pure: no kernel, no root; the
caps file is read by cap/load.py, the kernel side is cap/table.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from tamebpf.common.errors import UsageError
from tamebpf.common.values import (
    Network,
    parse_count,
    parse_network,
    parse_port_range,
    rate_bytes_per_s,
)

MAX_STREAMS = 2**32 - 1


@dataclass(frozen=True)
class Dest:
    """A destination prefix, optionally one port or a range of ports
    (port None: every port; port_end None: just `port`)."""

    network: Network
    port: int | None = None
    port_end: int | None = None  # last port of a range, included

    @property
    def family(self) -> str:
        return "ipv4" if self.network.version == 4 else "ipv6"

    @property
    def ports(self) -> tuple[int, int] | None:
        """(first, last) port, or None for every port."""
        if self.port is None:
            return None
        return (self.port, self.port_end if self.port_end is not None else self.port)

    def covers_port(self, port: int) -> bool:
        span = self.ports
        return span is None or span[0] <= port <= span[1]

    def __str__(self) -> str:
        span = self.ports
        if span is None:
            return str(self.network)
        ports = str(span[0]) if span[0] == span[1] else f"{span[0]}-{span[1]}"
        if self.network.version == 6:
            return f"[{self.network}]:{ports}"
        return f"{self.network}:{ports}"


DEST_FORMS = "198.18.0.0/15, 198.18.0.2:5201, 198.51.100.0/24:50000-51000, [fd00::/64]:5201"


def parse_dest(text: str, option: str = "--dest") -> Dest:
    """'198.18.0.0/15', '198.18.0.2:5201', '198.51.100.0/24:50000-51000',
    'fd00::/64', '[fd00::/64]:5201'. A bare address is a /32 (/128). Host
    bits set in the prefix are refused, so a typo does not silently cap a
    different network; so is a zone ('fe80::1%eth0'): a cap matches the
    destination address of every interface, and dropping the zone silently
    would cap more than was asked."""
    if not isinstance(text, str):
        raise UsageError(f"bad {option} {text!r}: expected a string such as {DEST_FORMS}")
    raw = text.strip()
    ports: tuple[int, int] | None = None
    net_text = raw
    if raw.startswith("["):
        close = raw.find("]")
        if close < 0 or (close + 1 < len(raw) and raw[close + 1] != ":"):
            raise UsageError(f"bad {option} {text!r}: expected [IPv6-CIDR]:PORT")
        net_text, rest = raw[1:close], raw[close + 1:]
        if rest:
            ports = parse_port_range(rest[1:], option, text)
    elif raw.count(":") == 1:  # IPv4 with a port; IPv6 has two or more colons
        net_text, port_text = raw.split(":")
        ports = parse_port_range(port_text, option, text)
    if "%" in net_text:
        addr, _, zone = net_text.partition("%")
        raise UsageError(
            f"bad {option} {text!r}: a cap cannot be limited to one interface "
            f"(zone {'%' + zone!r})",
            f"give the address without the zone ({addr.split('/')[0]!r}): the cap then "
            "covers it on every interface")
    network = parse_network(net_text, option, DEST_FORMS, text)
    if ports is None:
        return Dest(network)
    return Dest(network, ports[0], ports[1] if ports[1] != ports[0] else None)


def check_max_streams(value: object, option: str = "--max-streams") -> int:
    return parse_count(value, option, 1, MAX_STREAMS)


def check_cgroup_text(value: object, option: str, all_processes: bool = False) -> str:
    """A cgroup as written: non-empty, and the cgroup v2 root only when
    written as '/' and confirmed (--all-processes / all_processes = true).
    (An unset shell variable must not cap every process on the host.)"""
    if not isinstance(value, str) or not value.strip():
        raise UsageError(f"{option} {value!r}: empty",
                         "name the cgroup to cap, e.g. transfer.slice")
    text = value.strip()
    if all_processes and text != "/":
        raise UsageError(f"{option} {value!r} with all processes: only for the root",
                         "write the root as '/' to cap every process, or drop "
                         "--all-processes")
    if text.strip("/.") == "" and text != "/":
        raise UsageError(f"{option} {value!r}: that is the cgroup v2 root (every process)",
                         "name the cgroup to cap; to cap every process write '/' and add "
                         "--all-processes (all_processes = true in a caps file)")
    if text == "/" and not all_processes:
        raise UsageError(f"{option} '/': that caps every process on the host",
                         "confirm with --all-processes (all_processes = true in a caps "
                         "file), or name a cgroup")
    return text


@dataclass(frozen=True)
class CapSpec:
    """One cap as asked for. Refuse mode: a fixed N, or N from the advisor
    (auto). Pace mode: a fixed rate, or the advisor's throughput (auto)."""

    cgroup: str
    dest: Dest
    max_streams: int | None = None
    auto: str | None = None  # HOST[:PORT] for the advisor
    max_impact: str | None = None  # "5%" or "0.05", as the CLI takes it
    mode: str = "refuse"  # "refuse" or "pace"
    rate: str | None = None  # pace mode: "500M", "2G" or Mbit/s, as the CLI takes it
    congestion: str = "system"  # auto: the probes' congestion control (advise --congestion)
    # auto: what to use when the advisor cannot run (N in refuse mode, a rate
    # in pace mode); None: keep the value in force, or fail (docs/cap.md)
    fallback: str | None = None
    all_processes: bool = False  # cgroup "/" confirmed: cap every process
    # auto: the agent (tamebpf export) recomputes the pace target or N as
    # the path changes (docs/paths.md, "Caps that follow the path")
    follow: bool = False
    # pace mode: what it paces, what the streams send, what they receive
    # (their receive window), or both (PACE_DIRECTIONS)
    direction: str = "both"
    # follow, pace mode: the site's Prometheus, whose budget the cap shares
    # with the site's other nodes (site/follow.py), and this node's name
    # there (None: the agent's own, `export --node`)
    site: str | None = None
    node: str | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.cgroup.strip("/"), str(self.dest))


MODES = ("refuse", "pace")
PACE_DIRECTIONS = ("both", "send", "receive")
LIMIT_KEY = {"refuse": "max_streams", "pace": "rate"}  # each mode's fixed limit


def check_follow(has_auto: bool, where: str, follow: str, auto: str) -> None:
    """Following needs a cap whose limit comes from the advisor: the agent
    recomputes it (a pace cap's target, a refuse cap's N)."""
    if not has_auto:
        raise UsageError(f"{where}: {follow} needs {auto} (with max_impact)",
                         "the target is the advisor's, recomputed as the path changes")


def check_site(site: str | None, follow: bool, mode: str, where: str, key: str) -> None:
    """A site's share is a following pace cap's target."""
    if site is not None and (not follow or mode != "pace"):
        raise UsageError(f"{where}: {key} goes with a following pace cap",
                         "give --mode pace --auto HOST --follow (mode = \"pace\", "
                         "follow = true in a caps file)")


def check_fallback(text: str, mode: str) -> None:
    """An auto cap's fallback: N streams (refuse mode) or a rate (pace)."""
    if mode == "pace":
        rate_bytes_per_s(text, "fallback")
    else:
        check_max_streams(text, "fallback")

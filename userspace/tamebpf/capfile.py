"""Stream caps as data: destinations (CIDR[:PORT]) and the declarative caps
file (TOML). Pure: no kernel, no root; the kernel side is tamebpf.kernel.cap.

A caps file::

    # /etc/tamebpf/caps.toml
    [[cap]]
    cgroup = "transfer.slice"          # below the cgroup v2 root, or absolute
    dest = "198.18.0.0/15"             # CIDR, CIDR:PORT[-PORT], [IPv6-CIDR]:PORT
    max_streams = 8

    [[cap]]
    cgroup = "transfer.slice"          # GridFTP data channels: the ports of
    dest = "198.51.100.0/24:50000-51000"  # GLOBUS_TCP_PORT_RANGE, not 2811
    auto = "dtn2.example.org"          # instead of max_streams: ask the
    max_impact = "5%"                  # advisor (tamebpf advise), probing
    congestion = "cubic"               # as the transfers run (default: system)
    fallback = 4                       # if the advisor cannot run (at boot)

    [[cap]]
    cgroup = "transfer.slice"
    dest = "192.0.2.7/32"
    mode = "pace"
    auto = "192.0.2.7"
    max_impact = "10%"
    congestion = "cubic"
    follow = true                      # the agent keeps the target on the path

    [[cap]]
    cgroup = "backup.slice"
    dest = "203.0.113.0/24"
    mode = "pace"                      # never refuse; the streams share
    rate = "2G"                        # this rate (or auto + max_impact)
"""

from __future__ import annotations

import ipaddress
import tomllib
from dataclasses import dataclass
from typing import Any

from tamebpf.errors import UsageError
from tamebpf.values import (
    IPERF3_PORT,
    parse_count,
    parse_fraction,
    parse_host_port,
    parse_port_range,
    rate_bytes_per_s,
)

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
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
    if not net_text.isascii():
        raise UsageError(f"bad {option} {text!r}: not an IP address or CIDR",
                         f"give one of {DEST_FORMS}")
    try:
        network = ipaddress.ip_network(net_text, strict=True)
    except ValueError as exc:
        hint = f"give one of {DEST_FORMS}"
        try:
            loose = ipaddress.ip_network(net_text, strict=False)
            hint = f"did you mean {loose}?"
        except ValueError:
            pass
        raise UsageError(f"bad {option} {text!r}: {exc}", hint) from None
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

    @property
    def key(self) -> tuple[str, str]:
        return (self.cgroup.strip("/"), str(self.dest))


CAP_KEYS = {"cgroup", "dest", "max_streams", "auto", "max_impact", "mode", "rate",
            "congestion", "fallback", "all_processes", "follow"}
CONGESTION = ("reno", "cubic", "bbr", "system")
MODES = ("refuse", "pace")
LIMIT_KEY = {"refuse": "max_streams", "pace": "rate"}  # each mode's fixed limit


def parse_capfile(text: str, name: str = "caps file") -> list[CapSpec]:
    """Every cap in a TOML caps file, checked as a whole: any error refuses
    the file (UsageError naming the entry), so nothing is half applied."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{name}: not valid TOML: {exc}") from None
    unknown = set(data) - {"cap"}
    if unknown:
        raise UsageError(f"{name}: unknown top-level key(s) {', '.join(sorted(unknown))}",
                         "caps are [[cap]] tables")
    entries = data.get("cap", [])
    if not isinstance(entries, list):
        raise UsageError(f"{name}: 'cap' must be an array of tables ([[cap]])")
    specs: list[CapSpec] = []
    seen: dict[tuple[str, str], int] = {}
    for i, entry in enumerate(entries, 1):
        try:
            specs.append(_spec(entry, f"{name}: cap #{i}"))
        except UsageError as exc:
            if exc.message.startswith(name):
                raise
            raise UsageError(f"{name}: cap #{i}: {exc.message}", exc.hint) from None
        key = specs[-1].key
        if key in seen:
            raise UsageError(f"{name}: cap #{i} repeats cap #{seen[key]} "
                             f"({key[1]} on {specs[-1].cgroup})")
        seen[key] = i
    return specs


def _spec(entry: Any, where: str) -> CapSpec:
    if not isinstance(entry, dict):
        raise UsageError(f"{where}: must be a table")
    unknown = set(entry) - CAP_KEYS
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))}",
                         f"known keys: {', '.join(sorted(CAP_KEYS))}")
    for key in ("cgroup", "dest"):
        if not isinstance(entry.get(key), str) or not entry[key]:
            raise UsageError(f"{where}: '{key}' (a string) is required")
    all_processes = entry.get("all_processes", False)
    if not isinstance(all_processes, bool):
        raise UsageError(f"{where}: all_processes must be true or false")
    cgroup = check_cgroup_text(entry["cgroup"], "cgroup", all_processes)
    dest = parse_dest(entry["dest"], "dest")
    mode = entry.get("mode", "refuse")
    if mode not in MODES:
        raise UsageError(f"{where}: mode {mode!r} is not one of {', '.join(MODES)}")
    other = "pace" if mode == "refuse" else "refuse"
    key, other_key = LIMIT_KEY[mode], LIMIT_KEY[other]
    if other_key in entry:
        raise UsageError(f"{where}: {other_key} goes with mode = \"{other}\""
                         + (" (pace mode never refuses a connect)" if mode == "pace" else ""))
    has_limit, has_auto = key in entry, "auto" in entry
    if has_limit == has_auto:
        raise UsageError(f"{where}: give either {key} or auto (with max_impact)")
    follow = entry.get("follow", False)
    if not isinstance(follow, bool):
        raise UsageError(f"{where}: follow must be true or false")
    if follow:
        check_follow(has_auto, where, "follow = true", "auto")
    common: dict[str, Any] = {"mode": mode, "all_processes": all_processes, "follow": follow}
    if has_limit:
        for extra in ("max_impact", "fallback", "congestion"):
            if extra in entry:
                raise UsageError(f"{where}: {extra} goes with auto, not {key}")
        if mode == "pace":
            rate = _text(entry["rate"], "rate")
            rate_bytes_per_s(rate, "rate")
            return CapSpec(cgroup, dest, rate=rate, **common)
        n = check_max_streams(entry["max_streams"], "max_streams")
        return CapSpec(cgroup, dest, max_streams=n, **common)
    if not isinstance(entry["auto"], str) or "max_impact" not in entry:
        raise UsageError(f"{where}: auto needs a host name and max_impact")
    parse_host_port(entry["auto"], "auto", default_port=IPERF3_PORT)
    impact = _text(entry["max_impact"], "max_impact")
    parse_fraction(impact, "max_impact")
    cc = entry.get("congestion", "system")
    if cc not in CONGESTION:
        raise UsageError(f"{where}: congestion {cc!r}: one of {', '.join(CONGESTION)}")
    fallback = None
    if "fallback" in entry:
        fallback = _text(entry["fallback"], "fallback")
        check_fallback(fallback, mode)
    return CapSpec(cgroup, dest, auto=entry["auto"], max_impact=impact, congestion=cc,
                   fallback=fallback, **common)


def _text(value: object, key: str) -> str:
    """A caps-file value given as a string or a number (rate = 500 or
    "500M"); anything else is refused naming the key."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise UsageError(f"{key} {value!r}: expected a number or a string")
    return value if isinstance(value, str) else repr(value)


def check_follow(has_auto: bool, where: str, follow: str, auto: str) -> None:
    """Following needs a cap whose limit comes from the advisor: the agent
    recomputes it (a pace cap's target, a refuse cap's N)."""
    if not has_auto:
        raise UsageError(f"{where}: {follow} needs {auto} (with max_impact)",
                         "the target is the advisor's, recomputed as the path changes")


def check_fallback(text: str, mode: str) -> None:
    """An auto cap's fallback: N streams (refuse mode) or a rate (pace)."""
    if mode == "pace":
        rate_bytes_per_s(text, "fallback")
    else:
        check_max_streams(text, "fallback")

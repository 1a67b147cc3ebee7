"""Stream caps as data: destinations (CIDR[:PORT]) and the declarative caps
file (TOML). Pure: no kernel, no root; the kernel side is tamebpf.kernel.cap.

A caps file::

    # /etc/tamebpf/caps.toml
    [[cap]]
    cgroup = "transfer.slice"          # below the cgroup v2 root, or absolute
    dest = "198.18.0.0/15"             # CIDR, CIDR:PORT, [IPv6-CIDR]:PORT
    max_streams = 8

    [[cap]]
    cgroup = "transfer.slice"
    dest = "[fd00:7462::/48]:2811"
    auto = "dtn2.example.org"          # instead of max_streams: ask the
    max_impact = "5%"                  # advisor (tamebpf advise), probing
    congestion = "cubic"               # as the transfers run (default: system)

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
from tamebpf.options import parse_rate_mbps

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
MAX_STREAMS = 2**32 - 1


@dataclass(frozen=True)
class Dest:
    """A destination prefix, optionally one port (None: every port)."""

    network: Network
    port: int | None = None

    @property
    def family(self) -> str:
        return "ipv4" if self.network.version == 4 else "ipv6"

    def __str__(self) -> str:
        if self.port is None:
            return str(self.network)
        if self.network.version == 6:
            return f"[{self.network}]:{self.port}"
        return f"{self.network}:{self.port}"


def parse_dest(text: str, option: str = "--dest") -> Dest:
    """'198.18.0.0/15', '198.18.0.2:5201', 'fd00::/64', '[fd00::/64]:5201'.
    A bare address is a /32 (/128). Host bits set in the prefix are refused,
    so a typo does not silently cap a different network."""
    raw = text.strip()
    port: int | None = None
    net_text = raw
    if raw.startswith("["):
        close = raw.find("]")
        if close < 0 or (close + 1 < len(raw) and raw[close + 1] != ":"):
            raise UsageError(f"bad {option} {text!r}: expected [IPv6-CIDR]:PORT")
        net_text, rest = raw[1:close], raw[close + 1:]
        if rest:
            port = _port(rest[1:], text, option)
    elif raw.count(":") == 1:  # IPv4 with a port; IPv6 has two or more colons
        net_text, port_text = raw.split(":")
        port = _port(port_text, text, option)
    try:
        network = ipaddress.ip_network(net_text, strict=True)
    except ValueError as exc:
        hint = None
        try:
            loose = ipaddress.ip_network(net_text, strict=False)
            hint = f"did you mean {loose}?"
        except ValueError:
            pass
        raise UsageError(f"bad {option} {text!r}: {exc}", hint) from None
    return Dest(network, port)


def _port(text: str, whole: str, option: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise UsageError(f"bad {option} {whole!r}: port must be 1..65535")
    return int(text)


def check_max_streams(value: object, option: str = "--max-streams") -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            value = int(str(value), 10)
        except ValueError:
            raise UsageError(f"bad {option} {value!r}: expected a whole number") from None
    if not 1 <= value <= MAX_STREAMS:
        raise UsageError(f"bad {option} {value}: must be at least 1 (and below 2^32)")
    return value


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

    @property
    def key(self) -> tuple[str, str]:
        return (self.cgroup.strip("/"), str(self.dest))


CAP_KEYS = {"cgroup", "dest", "max_streams", "auto", "max_impact", "mode", "rate",
            "congestion"}
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
        raise UsageError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}",
                         f"known keys: {', '.join(sorted(CAP_KEYS))}")
    for key in ("cgroup", "dest"):
        if not isinstance(entry.get(key), str) or not entry[key]:
            raise UsageError(f"{where}: '{key}' (a string) is required")
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
    if has_limit:
        if "max_impact" in entry:
            raise UsageError(f"{where}: max_impact goes with auto, not {key}")
        if mode == "pace":
            rate = str(entry["rate"])
            parse_rate_mbps(rate, "rate")
            return CapSpec(entry["cgroup"], dest, mode="pace", rate=rate)
        n = check_max_streams(entry["max_streams"], "max_streams")
        return CapSpec(entry["cgroup"], dest, max_streams=n)
    if not isinstance(entry["auto"], str) or "max_impact" not in entry:
        raise UsageError(f"{where}: auto needs a host name and max_impact")
    cc = entry.get("congestion", "system")
    if cc not in CONGESTION:
        raise UsageError(f"{where}: congestion {cc!r}: one of {', '.join(CONGESTION)}")
    return CapSpec(entry["cgroup"], dest, auto=entry["auto"],
                   max_impact=str(entry["max_impact"]), mode=mode, congestion=cc)

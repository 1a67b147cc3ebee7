"""The declarative caps file (TOML) read into CapSpecs, checked as a whole.
Pure: no kernel, no root.

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
    site = "http://prometheus.example:9090"   # ... at this node's share of the site's

    [[cap]]
    cgroup = "backup.slice"
    dest = "203.0.113.0/24"
    mode = "pace"                      # never refuse; the streams share
    rate = "2G"                        # this rate (or auto + max_impact)
"""

from __future__ import annotations

import tomllib
from typing import Any

from tamebpf.cap.spec import (
    LIMIT_KEY,
    MODES,
    PACE_DIRECTIONS,
    CapSpec,
    check_cgroup_text,
    check_fallback,
    check_follow,
    check_max_streams,
    check_site,
    parse_dest,
)
from tamebpf.common.defaults import CONGESTION
from tamebpf.common.errors import UsageError
from tamebpf.common.values import (
    IPERF3_PORT,
    parse_fraction,
    parse_host_port,
    parse_node,
    parse_url,
    rate_bytes_per_s,
)

CAP_KEYS = {"cgroup", "dest", "max_streams", "auto", "max_impact", "mode", "rate", "direction",
            "congestion", "fallback", "all_processes", "follow", "site", "node"}

def parse_capfile(text: str, name: str = "caps file") -> list[CapSpec]:
    """Every cap in a TOML caps file, checked as a whole: any error refuses
    the file (UsageError naming the entry), so nothing is half applied."""
    try:
        data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError) as exc:  # nesting past the stack
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
    direction = entry.get("direction", "both")
    if direction != "both" and mode != "pace":
        raise UsageError(f"{where}: direction goes with mode = \"pace\"")
    if direction not in PACE_DIRECTIONS:
        raise UsageError(f"{where}: direction {direction!r} is not one of "
                         f"{', '.join(PACE_DIRECTIONS)}")
    site = entry.get("site")
    node = entry.get("node")
    if site is not None:
        site = parse_url(_text(site, "site"), f"{where}: site")
        check_site(site, follow, mode, where, "site")
        if node is not None:
            node = parse_node(_text(node, "node"), f"{where}: node")
    elif node is not None:
        raise UsageError(f"{where}: node goes with site")
    common: dict[str, Any] = {"mode": mode, "all_processes": all_processes, "follow": follow,
                              "direction": direction, "site": site, "node": node}
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

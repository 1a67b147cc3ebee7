"""What a testbed is: its configuration, names and address plan (pure, no I/O).

Topology (the bottleneck is the router's link to and from the receiver)::

    sender  (NAME-snd) --snd0-+
    sender2 (NAME-sn2) --sn20-+-- router (NAME-rtr) --rcv0-- receiver (NAME-rcv)
    cross   (NAME-crs) --crs0-+

sender2 exists only with senders=2.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from tamebpf.common.errors import UsageError

# Every role a testbed can have; sender2 only where senders=2 (roles()).
ROLES = ("sender", "cross", "router", "receiver", "sender2")
HOSTS = tuple(r for r in ROLES if r != "router")
SUFFIX = {"sender": "snd", "cross": "crs", "router": "rtr", "receiver": "rcv",
          "sender2": "sn2"}
MAX_SENDERS = 2
AQMS = ("droptail", "red")
CCS = ("reno", "cubic", "bbr")
# Short so that NAME-xxx stays readable; interfaces live inside the namespaces
# and need no prefix, so the 15-character interface limit never bites.
NAME_RE = re.compile(r"^[a-z][a-z0-9]{0,11}$")

# Benchmarking range (RFC 2544) and a ULA prefix; identical in every testbed
# because each testbed has its own namespaces and no route out.
IPV4 = {
    "sender": "198.18.1.2",
    "cross": "198.18.2.2",
    "receiver": "198.18.3.2",
    "sender2": "198.18.4.2",
    "router.sender": "198.18.1.1",
    "router.cross": "198.18.2.1",
    "router.receiver": "198.18.3.1",
    "router.sender2": "198.18.4.1",
}
IPV6 = {
    "sender": "fd74:6d65:6270:1::2",
    "cross": "fd74:6d65:6270:2::2",
    "receiver": "fd74:6d65:6270:3::2",
    "sender2": "fd74:6d65:6270:4::2",
    "router.sender": "fd74:6d65:6270:1::1",
    "router.cross": "fd74:6d65:6270:2::1",
    "router.receiver": "fd74:6d65:6270:3::1",
    "router.sender2": "fd74:6d65:6270:4::1",
}
PREFIX4, PREFIX6 = 24, 64
TESTBED_NET4, TESTBED_NET6 = "198.18.0.0/15", "fd74:6d65:6270::/48"
# Interface names: in the router one per neighbour, in each host "eth0".
ROUTER_IF = {"sender": "snd0", "cross": "crs0", "receiver": "rcv0", "sender2": "sn20"}
HOST_IF = "eth0"
MTU = 1500
FRAME = MTU + 14  # what the link counts per full-size packet (layer 2, as a qdisc)
MSS_TS = 1448  # TCP payload per full-size packet with timestamps


@dataclass(frozen=True)
class RedParams:
    """RED thresholds in packets (ns-2 style, "gentle")."""

    min_th: float
    max_th: float
    max_p: float = 0.1
    w_q: float = 0.002

    @staticmethod
    def for_queue(queue_pkts: int) -> RedParams:
        # ns-2's defaults are 5/15 for its usual 50-packet queue; scale with
        # the queue so that max_th stays below the hard limit.
        return RedParams(min_th=max(1.0, 0.2 * queue_pkts), max_th=max(2.0, 0.6 * queue_pkts))


@dataclass(frozen=True)
class TestbedConfig:
    rate_mbit: float
    rtt_ms: float
    queue_pkts: int
    aqm: str = "droptail"
    loss_pct: float = 0.0
    cross_rtt_ms: float | None = None
    cc: str = "cubic"
    seed: int = 1
    red: RedParams | None = field(default=None)
    rate_back_mbit: float | None = None  # receiver -> senders; None: rate_mbit
    senders: int = 1

    def __post_init__(self) -> None:
        if not 0 < self.rate_mbit <= 10000:
            raise UsageError(f"rate {self.rate_mbit} Mbit/s out of range", "use 0 < rate <= 10000")
        if self.rate_back_mbit is not None and not 0 < self.rate_back_mbit <= 10000:
            raise UsageError(f"back rate {self.rate_back_mbit} Mbit/s out of range",
                             "use 0 < rate <= 10000")
        if not 0 <= self.rtt_ms <= 10000:
            raise UsageError(f"rtt {self.rtt_ms} ms out of range", "use 0..10000 ms")
        if self.cross_rtt_ms is not None and not 0 <= self.cross_rtt_ms <= 10000:
            raise UsageError(f"cross rtt {self.cross_rtt_ms} ms out of range", "use 0..10000 ms")
        if not 1 <= self.queue_pkts <= 100000:
            raise UsageError(f"queue {self.queue_pkts} packets out of range", "use 1..100000")
        if self.aqm not in AQMS:
            raise UsageError(f"unknown aqm {self.aqm!r}", f"use one of {', '.join(AQMS)}")
        if not 0 <= self.loss_pct < 100:
            raise UsageError(f"loss {self.loss_pct}% out of range", "use 0 <= loss < 100")
        if self.cc not in CCS:
            raise UsageError(f"unknown congestion control {self.cc!r}", f"use {', '.join(CCS)}")
        if not 1 <= self.senders <= MAX_SENDERS:
            raise UsageError(f"{self.senders} senders", f"use 1..{MAX_SENDERS}")
        if self.aqm == "red" and self.red is None:
            object.__setattr__(self, "red", RedParams.for_queue(self.queue_pkts))

    @property
    def effective_cross_rtt_ms(self) -> float:
        return self.rtt_ms if self.cross_rtt_ms is None else self.cross_rtt_ms

    @property
    def effective_rate_back_mbit(self) -> float:
        return self.rate_mbit if self.rate_back_mbit is None else self.rate_back_mbit

    @property
    def goodput_mbit(self) -> float:
        """TCP goodput one full-size-segment flow can reach: R x 1448/1514."""
        return self.rate_mbit * MSS_TS / FRAME

    @property
    def goodput_back_mbit(self) -> float:
        """The same for a download (receiver -> sender): R_back x 1448/1514."""
        return self.effective_rate_back_mbit * MSS_TS / FRAME

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(d: dict[str, Any]) -> TestbedConfig:
        d = dict(d)
        red = d.pop("red", None)
        return TestbedConfig(**d, red=RedParams(**red) if red else None)


def check_name(name: str) -> str:
    if not NAME_RE.match(name):
        raise UsageError(
            f"bad testbed name {name!r}",
            "use 1-12 lower-case letters/digits, starting with a letter",
        )
    return name


def roles(senders: int = 1) -> tuple[str, ...]:
    """The roles of a testbed with `senders` senders."""
    return ROLES[:4] + ("sender2",)[:senders - 1]


def hosts(senders: int = 1) -> tuple[str, ...]:
    """Its end hosts: every role but the router."""
    return tuple(r for r in roles(senders) if r != "router")


def namespaces(name: str, senders: int = 1) -> dict[str, str]:
    """role -> namespace; senders=MAX_SENDERS names every one a testbed of
    this name can have (what teardown looks for)."""
    return {role: f"{name}-{SUFFIX[role]}" for role in roles(senders)}


def addresses(family: int = 4, senders: int = 1) -> dict[str, str]:
    table = IPV4 if family == 4 else IPV6
    return {h: table[h] for h in hosts(senders)}

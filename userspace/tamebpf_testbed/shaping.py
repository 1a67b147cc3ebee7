"""The NFQUEUE rules that hand both directions to the emulated links.

The bottleneck (rate and queue) and the delays live in userspace processes,
`tamebpf-delayline` (delay.py), on a virtual clock: a qdisc's token bucket
loses link time for good whenever the host wakes its timer late, which this
VM does by up to milliseconds after hours of uptime (docs/testbed.md, "The
link"). One process is the forward link (toward the receiver), one the back
link (from it).
"""

from __future__ import annotations

from tamebpf_testbed import config as C
from tamebpf_testbed.sh import ns_run

# Queue numbers in the router namespace (NFQUEUE numbers are per namespace),
# one per source and direction: each source has its own one-way delay on the
# forward link; all of a direction's queues share its link.
FORWARD_QUEUE = {"sender": 1, "cross": 2, "sender2": 5}  # host -> receiver
BACK_QUEUE = {"sender": 3, "cross": 4, "sender2": 6}  # receiver -> host
# Packets from the receiver up to this size (IP header included) skip the
# back link: pure ACKs, SACK blocks and all (at most 80 bytes in IPv4, 100
# in IPv6). The forward link's delay already gives an upload's ACKs their
# RTT, and a userspace release would bunch them, while tamebpf's upload
# estimators read their spacing.
ACK_MAX_BYTES = 128


def sources(senders: int = 1) -> tuple[str, ...]:
    """The hosts whose traffic crosses the bottleneck, in queue order."""
    return ("sender", "cross", "sender2")[:senders + 1]


def queue_rules(senders: int = 1) -> list[list[str]]:
    """iptables arguments (mangle FORWARD) sending packets to the links.

    Forward: everything from a source to the receiver. All delay sits on
    this path, after the bottleneck: for TCP that is the same as a link
    delay, and it gives a download's ACKs their RTT too. Back: what the
    receiver sends a source, except the small packets (ACK_MAX_BYTES).
    Never --queue-bypass: without a listener packets must be dropped, not
    let through unshaped.
    """
    rcv = C.ROUTER_IF["receiver"]
    rules = []
    for host in sources(senders):
        rules.append(["-i", C.ROUTER_IF[host], "-o", rcv,
                      "-j", "NFQUEUE", "--queue-num", str(FORWARD_QUEUE[host])])
    for host in sources(senders):
        rules.append(["-i", rcv, "-o", C.ROUTER_IF[host],
                      "-m", "length", "--length", f"{ACK_MAX_BYTES + 1}:65535",
                      "-j", "NFQUEUE", "--queue-num", str(BACK_QUEUE[host])])
    return rules


def install_rules(ns: str, senders: int = 1) -> None:
    """All rules in one transaction per family (-restore --noflush appends
    them): one process each, not one per rule, for every testbed brought up."""
    table = "".join(f"-A FORWARD {' '.join(rule)}\n" for rule in queue_rules(senders))
    for tool in ("iptables-restore", "ip6tables-restore"):
        ns_run(ns, [tool, "-w", "--noflush"], stdin=f"*mangle\n{table}COMMIT\n")

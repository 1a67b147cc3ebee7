"""The NFQUEUE rules that hand the data direction to the emulated link.

The bottleneck (rate and queue) and the delays live in one userspace
process, `tamebpf-delayline` (delay.py), on a virtual clock: a qdisc's token
bucket loses link time for good whenever the host wakes its timer late,
which this VM does by up to milliseconds after hours of uptime
(docs/testbed.md, "The link").
"""

from __future__ import annotations

from tamebpf_testbed import config as C
from tamebpf_testbed.sh import ns_run

# Queue numbers in the router namespace (NFQUEUE numbers are per namespace):
# one per source, because each has its own one-way delay; both share the link.
Q_SENDER = 1  # sender -> receiver: the sender's RTT
Q_CROSS = 2  # cross -> receiver: the cross traffic's RTT


def queue_rules() -> list[list[str]]:
    """iptables arguments (mangle FORWARD) sending data packets to the link.

    All delay sits on the data path, after the bottleneck: for TCP that is
    the same as a link delay, and it leaves one userspace crossing per data
    packet (ACKs pass untouched). Never --queue-bypass: without a listener
    packets must be dropped, not let through unshaped.
    """
    rcv, snd, crs = (C.ROUTER_IF[h] for h in ("receiver", "sender", "cross"))
    return [
        ["-i", snd, "-o", rcv, "-j", "NFQUEUE", "--queue-num", str(Q_SENDER)],
        ["-i", crs, "-o", rcv, "-j", "NFQUEUE", "--queue-num", str(Q_CROSS)],
    ]


def install_rules(ns: str) -> None:
    """Both rules in one transaction per family (-restore --noflush appends
    them): one process each, not one per rule, for every testbed brought up."""
    table = "".join(f"-A FORWARD {' '.join(rule)}\n" for rule in queue_rules())
    for tool in ("iptables-restore", "ip6tables-restore"):
        ns_run(ns, [tool, "-w", "--noflush"], stdin=f"*mangle\n{table}COMMIT\n")


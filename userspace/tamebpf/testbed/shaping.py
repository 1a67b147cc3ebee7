"""The bottleneck (TBF + pfifo on the router's egress toward the receiver) and
the NFQUEUE rules that hand packets to the delay lines."""

from __future__ import annotations

from tamebpf.testbed import config as C
from tamebpf.testbed.sh import ns_run

# Queue numbers in the router namespace (NFQUEUE numbers are per namespace).
Q_SENDER_ACKS = 1  # receiver -> sender: the sender's whole RTT is applied here
Q_CROSS_ACKS = 2  # receiver -> cross: the cross traffic's RTT
Q_DATA = 3  # sender/cross -> receiver: random loss and RED, no delay

BURST_FRAMES = 2  # TBF burst: two MTUs (notes); more lets bursts skip the queue


def install_bottleneck(ns: str, cfg: C.TestbedConfig) -> None:
    dev = C.ROUTER_IF["receiver"]
    burst = BURST_FRAMES * C.FRAME
    # TBF's own limit is in bytes; its child pfifo makes the queue a packet count.
    ns_run(ns, ["tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "tbf",
                "rate", f"{cfg.rate_mbit}mbit", "burst", str(burst),
                "limit", str(cfg.queue_pkts * C.FRAME)])
    ns_run(ns, ["tc", "qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:",
                "pfifo", "limit", str(cfg.queue_pkts)])


def queue_rules(cfg: C.TestbedConfig) -> list[list[str]]:
    """iptables arguments (mangle FORWARD) sending traffic to the delay lines.

    All delay sits on the ACK path: data meets the bottleneck queue at once,
    which for TCP is the same as a link delay, and ACKs are fewer packets to
    handle (the notes measured it as the more accurate split). Never
    --queue-bypass: without a listener packets must be dropped, not let
    through undelayed.
    """
    rcv, snd, crs = (C.ROUTER_IF[h] for h in ("receiver", "sender", "cross"))
    rules = [
        ["-i", rcv, "-o", snd, "-j", "NFQUEUE", "--queue-num", str(Q_SENDER_ACKS)],
        ["-i", rcv, "-o", crs, "-j", "NFQUEUE", "--queue-num", str(Q_CROSS_ACKS)],
    ]
    if cfg.needs_dataline:
        rules += [
            ["-i", snd, "-o", rcv, "-j", "NFQUEUE", "--queue-num", str(Q_DATA)],
            ["-i", crs, "-o", rcv, "-j", "NFQUEUE", "--queue-num", str(Q_DATA)],
        ]
    return rules


def install_rules(ns: str, cfg: C.TestbedConfig) -> None:
    for tool in ("iptables", "ip6tables"):
        for rule in queue_rules(cfg):
            ns_run(ns, [tool, "-w", "-t", "mangle", "-A", "FORWARD", *rule])


def qdisc_stats(ns: str) -> str:
    return ns_run(ns, ["tc", "-s", "qdisc", "show", "dev", C.ROUTER_IF["receiver"]])

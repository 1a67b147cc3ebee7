"""A bottleneck's link rate as the TCP goodput it carries (`advise --capacity`).

Users know their path's capacity as a link rate (a 10 Gbit/s circuit, a
100 Mbit/s shaper); the model and the probes count TCP payload.  Every
full-sized segment carries MSS bytes of payload in a frame of MSS + the
TCP timestamps option (12; Linux's MSS already leaves room for it) + TCP
(20) + IP (20, or 40 for IPv6) + Ethernet (14) bytes.  This is what a
shaper that counts layer-2 bytes (tc, most routers) delivers; with a 1500-byte
MTU and IPv4 it is 1448/1514 of the rate, with jumbo frames 8948/9014.
"""

from __future__ import annotations

TIMESTAMPS, TCP_HEADER, ETHERNET = 12, 20, 14
IP_HEADER = {4: 20, 6: 40}
# Records without a measured MSS (older eval records): 1500-byte MTU, IPv4.
DEFAULT_MSS = 1448


def tcp_goodput_mbps(link_mbps: float, mss: int | None, ipv6: bool) -> float:
    """Goodput of full-sized TCP segments on a link of `link_mbps`."""
    payload = mss or DEFAULT_MSS
    frame = payload + TIMESTAMPS + TCP_HEADER + IP_HEADER[6 if ipv6 else 4] + ETHERNET
    return link_mbps * payload / frame


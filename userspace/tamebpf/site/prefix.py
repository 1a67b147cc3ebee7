"""The path a site's nodes share: the destination's network and the
direction of the data. A remote site is reached at more than one address
(its data-transfer nodes, an XRootD cluster's servers), behind the same
uplink, so the site budgets by prefix, not by host."""

from __future__ import annotations

import ipaddress

PREFIX_V4 = 24
PREFIX_V6 = 64


def site_prefix(addr: str) -> str:
    """The site path's destination for an address: its /24 (IPv4) or /64
    (IPv6) network, e.g. "198.18.3.0/24". An IPv4-mapped IPv6 address is
    its IPv4 one. Raises ValueError for what is no address."""
    ip = ipaddress.ip_address(addr.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    bits = PREFIX_V4 if ip.version == 4 else PREFIX_V6
    return str(ipaddress.ip_network(f"{ip}/{bits}", strict=False))

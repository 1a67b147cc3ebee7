"""Namespaces, veths, addresses, routes and per-namespace sysctls."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from pathlib import Path

from tamebpf_testbed import config as C
from tamebpf_testbed.sh import ip_batch, ns_run

NETNS_DIR = Path("/run/netns")  # where `ip netns` keeps the names it gives


def existing_namespaces() -> set[str]:
    """The names `ip netns list` shows."""
    try:
        return set(os.listdir(NETNS_DIR))
    except FileNotFoundError:  # no `ip netns add` since boot
        return set()


def pids_inside(nss: Iterable[str]) -> list[int]:
    """The processes in network namespaces nss: what `ip netns pids` lists for
    each, found in one pass over /proc rather than one `ip` process each."""
    wanted = set()
    for ns in nss:
        with contextlib.suppress(OSError):
            st = os.stat(NETNS_DIR / ns)
            wanted.add((st.st_dev, st.st_ino))
    found = []
    for entry in os.scandir("/proc") if wanted else ():
        if entry.name.isdigit():
            try:
                st = os.stat(f"/proc/{entry.name}/ns/net")
            except OSError:  # gone, or a kernel thread
                continue
            if (st.st_dev, st.st_ino) in wanted:
                found.append(int(entry.name))
    return found


def delete_namespaces(nss: Iterable[str]) -> None:
    """`ip netns del` of each (one process; one that is gone already is no error)."""
    ip_batch(None, [f"netns del {ns}" for ns in nss], check=False)


def _sysctls(ns: str, settings: dict[str, str], check: bool = True) -> None:
    ns_run(ns, ["sysctl", "-q", "-w", *(f"{k}={v}" for k, v in settings.items())], check=check)


def _offloads_off(ns: str, ifname: str) -> None:
    # Segmentation offloads make pfifo count 64 KB super-packets as one packet
    # (testbed notes, pitfall 1): the queue limit and delay would be wrong.
    ns_run(ns, ["ethtool", "-K", ifname, "tso", "off", "gso", "off", "gro", "off"])


def _link_up(ifname: str, addr4: str, addr6: str) -> list[str]:
    """`ip` commands that address interface ifname and bring it up."""
    return [f"addr add {addr4}/{C.PREFIX4} dev {ifname}",
            f"addr add {addr6}/{C.PREFIX6} dev {ifname} nodad",
            f"link set {ifname} mtu {C.MTU} up"]


def build(name: str, cfg: C.TestbedConfig) -> dict[str, str]:
    """Creates the namespaces (four, five with a second sender) and links
    them; returns role -> namespace.

    The `ip` commands go in batches (one process per namespace and step):
    every test that uses a testbed waits for them."""
    nss = C.namespaces(name, cfg.senders)
    hosts = C.hosts(cfg.senders)
    rtr = nss["router"]
    ip_batch(None, [f"netns add {ns}" for ns in nss.values()])
    # Each veth is created inside the router namespace, its peer moved
    # straight into the host's: nothing ever appears in the root namespace.
    ip_batch(rtr, ["link set lo up", *(
        f"link add {C.ROUTER_IF[h]} type veth peer name {C.HOST_IF} netns {nss[h]}"
        for h in hosts)])
    for host in hosts:
        _offloads_off(rtr, C.ROUTER_IF[host])
        _offloads_off(nss[host], C.HOST_IF)
    _sysctls(rtr, {"net.ipv4.ip_forward": "1", "net.ipv6.conf.all.forwarding": "1"})
    ip_batch(rtr, [cmd for h in hosts for cmd in _link_up(
        C.ROUTER_IF[h], C.IPV4[f"router.{h}"], C.IPV6[f"router.{h}"])])
    for host in hosts:
        # Only the testbed's own prefixes are routed: no default route, no way out.
        ip_batch(nss[host], [
            "link set lo up", *_link_up(C.HOST_IF, C.IPV4[host], C.IPV6[host]),
            f"route add {C.TESTBED_NET4} via {C.IPV4[f'router.{host}']}",
            f"route add {C.TESTBED_NET6} via {C.IPV6[f'router.{host}']}"])
        _tune_host(nss[host], cfg)
    return nss


def _tune_host(ns: str, cfg: C.TestbedConfig) -> None:
    # New namespaces inherit bbr. A namespace may only default to a CC in the
    # (global) allowed list, which we do not touch; so this is best effort and
    # every tool we start also sets the CC per socket (iperf3 -C).
    _sysctls(ns, {"net.ipv4.tcp_congestion_control": cfg.cc}, check=False)
    _sysctls(ns, {
        # The metrics cache leaks ssthresh between runs (pitfall 2).
        "net.ipv4.tcp_no_metrics_save": "1",
        # Room for BDP + queue at the highest rates we emulate (pitfall 3).
        "net.ipv4.tcp_rmem": "4096 131072 33554432",
        "net.ipv4.tcp_wmem": "4096 16384 33554432",
    })


def flush_tcp_metrics(ns: str) -> None:
    ns_run(ns, ["ip", "tcp_metrics", "flush", "all"], check=False)

"""The probes' SYN timeout (bpf/synrto.bpf.c) on real sockets: the receiver
drops the first SYN of every connection, and the connect time shows which
timeout the sender used."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tamebpf.kernel.synrto import SynRto
from tests.integration.kernel_fixtures import (
    NetnsPair,
    cgroup,
    free_port,
    netns_pair,
    sh,
    spawn,
    stop,
)

pytestmark = pytest.mark.root

DEFAULT_SYN_RTO_S = 1.0  # the kernel's TCP_TIMEOUT_INIT

# Connects `count` times in a row to HOST:PORT and prints each connect's
# seconds as a JSON list.
CONNECTS = """
import json, socket, sys, time
host, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
times = []
for _ in range(count):
    t = time.monotonic()
    with socket.create_connection((host, port), timeout=10):
        times.append(time.monotonic() - t)
print(json.dumps(times))
"""

LISTENER = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(64)
print("ready", flush=True)
while True:
    s.accept()[0].close()
"""


@pytest.fixture
def path() -> Iterator[tuple[NetnsPair, int]]:
    """A sender and a receiver whose listener never sees a connection's
    first SYN: the receiver drops every other SYN, and a connection's second
    SYN is its resent one."""
    port = free_port()
    with netns_pair("syn") as pair:
        for rule in ("add table inet tbsyn",
                     "add chain inet tbsyn in { type filter hook input priority 0; }",
                     f"add rule inet tbsyn in tcp dport {port} tcp flags & (syn | ack) == syn "
                     "numgen inc mod 2 == 0 drop"):
            sh("nft", rule, netns=pair.receiver)
        listener = spawn([sys.executable, "-c", LISTENER, str(port)], netns=pair.receiver,
                         stdout=subprocess.PIPE)
        try:
            assert listener.stdout is not None
            assert listener.stdout.readline().strip() == b"ready"
            yield pair, port
        finally:
            stop(listener)


def connect_times(pair: NetnsPair, port: int, cg: str, count: int) -> list[float]:
    proc = spawn([sys.executable, "-c", CONNECTS, pair.receiver_addr, str(port), str(count)],
                 cgroup_path=cg, netns=pair.sender, stdout=subprocess.PIPE)
    try:
        out, _ = proc.communicate(timeout=30)
    finally:
        stop(proc)
    times: list[float] = json.loads(out)
    return times


def test_syn_timeout_follows_the_path_rtt_once_a_connection_is_up(
        path: tuple[NetnsPair, int]) -> None:
    pair, port = path
    with cgroup() as probe_cg, SynRto(probe_cg) as syn_rto:
        times = connect_times(pair, port, probe_cg, 3)
        state = syn_rto.state()
    # The first SYN goes out before any RTT is known: the kernel's 1 s.
    assert times[0] >= 0.9 * DEFAULT_SYN_RTO_S, times
    # Later ones are resent after 3 x RTT, at least 200 ms (veth RTT ~0.1 ms).
    assert all(0.15 <= t <= 0.5 for t in times[1:]), times
    assert 0 < state.srtt_us < 50_000, state
    assert state.timeouts_set >= 2, state


def test_seeded_rtt_shortens_the_first_syn_and_other_cgroups_keep_the_default(
        path: tuple[NetnsPair, int]) -> None:
    pair, port = path
    with cgroup() as probe_cg, cgroup() as other_cg, SynRto(probe_cg, srtt_us=1000):
        ours = connect_times(pair, port, probe_cg, 1)
        other = connect_times(pair, port, other_cg, 1)
    assert ours[0] <= 0.5, ours
    assert other[0] >= 0.9 * DEFAULT_SYN_RTO_S, other


def test_closing_detaches_the_program(path: tuple[NetnsPair, int]) -> None:
    pair, port = path
    with cgroup() as probe_cg:
        with SynRto(probe_cg, srtt_us=1000):
            attached = sh("bpftool", "cgroup", "show", probe_cg)
        detached = sh("bpftool", "cgroup", "show", probe_cg)
        after = connect_times(pair, port, probe_cg, 1)
    assert "sock_ops" in attached and "set_syn_rto" in attached, attached
    assert "sock_ops" not in detached, detached
    assert after[0] >= 0.9 * DEFAULT_SYN_RTO_S, after


def test_first_syn_uses_the_guess_until_an_rtt_is_known(path: tuple[NetnsPair, int]) -> None:
    pair, port = path
    with cgroup() as probe_cg, SynRto(probe_cg, first_rto_us=400_000) as syn_rto:
        times = connect_times(pair, port, probe_cg, 2)
        state = syn_rto.state()
    assert 0.35 <= times[0] <= 0.7, times  # the guess, not 1 s
    assert 0.15 <= times[1] <= 0.35, times  # then 3 x RTT, at least 200 ms
    assert state.srtt_us > 0, state

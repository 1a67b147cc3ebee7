"""Testbed.ping reads iputils ping's output: one RTT a reply by sequence
number, lost sequence numbers from 0, duplicates not counted, and output it
cannot read refused (the samples are in the form of ping 20221126, Debian
12, with a duplicate and longer RTTs written in)."""

from __future__ import annotations

import pytest

from tamebpf_testbed.sh import CommandError
from tamebpf_testbed.testbed import ping_result

LOSSY = """\
PING 198.18.250.2 (198.18.250.2) 56(84) bytes of data.
64 bytes from 198.18.250.2: icmp_seq=2 ttl=64 time=0.234 ms
64 bytes from 198.18.250.2: icmp_seq=3 ttl=64 time=0.035 ms
64 bytes from 198.18.250.2: icmp_seq=6 ttl=64 time=104 ms
64 bytes from 198.18.250.2: icmp_seq=5 ttl=64 time=20.3 ms
64 bytes from 198.18.250.2: icmp_seq=5 ttl=64 time=20.4 ms (DUP!)
64 bytes from 198.18.250.2: icmp_seq=8 ttl=64 time=1.48 ms
64 bytes from 198.18.250.2: icmp_seq=9 ttl=64 time=0.049 ms

--- 198.18.250.2 ping statistics ---
9 packets transmitted, 6 received, +1 duplicates, 33.3333% packet loss, time 125ms
rtt min/avg/max/mdev = 0.035/21.0/104.0/37.5 ms
"""

V6 = """\
PING fd00:250::2(fd00:250::2) 56 data bytes
64 bytes from fd00:250::2: icmp_seq=1 ttl=64 time=0.123 ms
64 bytes from fd00:250::2: icmp_seq=2 ttl=64 time=0.046 ms

--- fd00:250::2 ping statistics ---
2 packets transmitted, 2 received, 0% packet loss, time 45ms
rtt min/avg/max/mdev = 0.046/0.084/0.123/0.038 ms
"""

DEAD = """\
PING 198.18.250.2 (198.18.250.2) 56(84) bytes of data.

--- 198.18.250.2 ping statistics ---
3 packets transmitted, 0 received, 100% packet loss, time 48ms

"""


def test_replies_by_sequence_number_and_the_lost_from_zero() -> None:
    got = ping_result(LOSSY)
    assert got == {"sent": 9, "received": 6, "rtt_ms": [0.234, 0.035, 20.3, 104.0, 1.48, 0.049],
                   "lost_seq": [0, 3, 6]}, f"from ping's output, got {got}"


def test_ipv6_and_a_dead_path() -> None:
    assert ping_result(V6) == {"sent": 2, "received": 2, "rtt_ms": [0.123, 0.046],
                               "lost_seq": []}
    assert ping_result(DEAD) == {"sent": 3, "received": 0, "rtt_ms": [], "lost_seq": [0, 1, 2]}


@pytest.mark.parametrize("out,words", [
    ("ping: connect: Network is unreachable\n", "no statistics"),
    (LOSSY.replace("icmp_seq=9 ttl=64 time=0.049 ms", "icmp_seq=9 ttl=64 Zeit=0,049 ms"),
     "6 replies, 5 reply lines read"),
])
def test_output_it_cannot_read_is_refused(out: str, words: str) -> None:
    with pytest.raises(CommandError, match=words):
        ping_result(out)

"""Pace caps that follow their path (docs/cap.md, "Scout and follow rate"):
sockets of a paced cgroup send real data across a veth while the scout and
the follow rate are set, moved and removed; each socket's
SO_MAX_PACING_RATE is read back from the socket itself."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest

from tamebpf.cap.spec import parse_dest
from tamebpf.cap.table import PACE_NO_LIMIT, Add, CapTable
from tamebpf.common.errors import TamebpfError
from tamebpf.kernel.abi import TbCapFollow
from tests.integration.kernel_fixtures import OTHER_PORT, PORT, Net, read_line, spawn, stop, the_cap

pytestmark = pytest.mark.root
UNLIMITED = 2**64 - 1  # sk_max_pacing_rate when nothing limits it
RATE = 8_000_000  # the cap's own rate, bytes/s: 4 streams get 2 MB/s each
FOLLOW = 3_000_000  # the follow rate: 3 paced streams get 1 MB/s each

# K sockets that keep sending (app-limited, about 3 MB/s each, so every one
# has ACKs with RTT samples and checks in every epoch). First line out: the
# socket cookies (SO_COOKIE, 57); then for each line in, the sockets'
# SO_MAX_PACING_RATE (47), 8 bytes (unlimited is ~0UL).
SENDERS = r"""
import json, socket, struct, sys, threading, time
host, port, k = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
socks = [socket.create_connection((host, port), timeout=20) for _ in range(k)]
def send(s):
    chunk = bytes(16384)
    try:
        while True:
            s.sendall(chunk)
            time.sleep(0.005)
    except OSError:
        pass
for s in socks:
    threading.Thread(target=send, args=(s,), daemon=True).start()
def opt(name):
    return json.dumps([struct.unpack("Q", s.getsockopt(socket.SOL_SOCKET, name, 8))[0]
                       for s in socks])
print(opt(57), flush=True)
while sys.stdin.readline().strip():
    print(opt(47), flush=True)
"""


class Senders:
    def __init__(self, net: Net, cg: str, k: int) -> None:
        self.proc: subprocess.Popen[str] = spawn(  # type: ignore[assignment]
            [sys.executable, "-c", SENDERS, net.server_v4, str(PORT), str(k)],
            cgroup_path=cg, netns=net.pair.sender, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True)
        self.cookies: list[int] = json.loads(read_line(self.proc, 20, "senders"))

    def rates(self) -> list[int]:
        assert self.proc.stdin is not None
        self.proc.stdin.write("rates\n")
        self.proc.stdin.flush()
        return json.loads(read_line(self.proc, 10, "senders"))  # type: ignore[no-any-return]

    def wait(self, cond: Callable[[list[int]], bool], what: str, timeout: float = 8) -> None:
        """Until the rates read back meet cond: shares move with the 250-ms
        check-in epochs, a step's first recomputes can still see the last."""
        deadline = time.monotonic() + timeout
        rates = self.rates()
        while not cond(rates) and time.monotonic() < deadline:
            time.sleep(0.05)
            rates = self.rates()
        assert cond(rates), f"expected {what}; rates after {timeout} s: {rates}"


@contextlib.contextmanager
def senders(net: Net, cg: str, k: int) -> Iterator[Senders]:
    s = Senders(net, cg, k)
    try:
        yield s
    finally:
        stop(s.proc)  # type: ignore[arg-type]


def near(rates: list[int], share: float) -> bool:
    """Every rate within 10% of share: 3 paced streams' share is 25% above
    4's and a third below 2's, so a miscount never passes."""
    return all(abs(r / share - 1) <= 0.10 for r in rates)


def test_scout_is_unpaced_and_the_others_share_the_follow_rate(
        net: Net, pins: str, cg: str) -> None:
    dest = f"{net.server_v4}/32:{PORT}"
    table = CapTable()
    # A second cap keeps the pin directory (and cap_follow) after cap rm, so
    # the entry has to be deleted, not dropped with the map.
    table.add(cg, parse_dest(f"{net.server_v4}/32:{OTHER_PORT}"), 3)
    cap = table.add(cg, parse_dest(dest), PACE_NO_LIMIT, pace_bytes_per_s=RATE)
    assert table.follow(cap.id) is None, "a new cap follows nothing"
    with senders(net, cg, 4) as s:
        cookie = s.cookies
        assert len(set(cookie)) == 4 and all(cookie), f"socket cookies {cookie}"
        s.wait(lambda r: near(r, RATE / 4), f"4 streams paced at {RATE / 4:.0f} B/s")

        table.set_follow(cap.id, cookie[0], FOLLOW)
        assert table.follow(cap.id) == (cookie[0], FOLLOW)
        s.wait(lambda r: r[0] == UNLIMITED and near(r[1:], FOLLOW / 3),
               f"socket 0 (the scout) unpaced, 1-3 at {FOLLOW / 3:.0f} B/s")

        table.set_follow(cap.id, cookie[1], FOLLOW)
        s.wait(lambda r: r[1] == UNLIMITED and near([r[0], *r[2:]], FOLLOW / 3),
               "the scout moved to socket 1, socket 0 paced again with 2 and 3")

        table.set_follow(cap.id, cookie[1], 0)  # follow rate 0: the cap's own
        s.wait(lambda r: r[1] == UNLIMITED and near([r[0], *r[2:]], RATE / 3),
               f"sockets 0, 2, 3 at the cap's {RATE / 3:.0f} B/s")

        table.remove(cg, parse_dest(dest))
        assert os.path.exists(os.path.join(pins, "cap_follow")), "the other cap keeps the map"
        assert table.follow(cap.id) is None, "cap rm leaves its follow entry behind"
        s.wait(lambda r: r == [UNLIMITED] * 4, "every socket unpaced after cap rm")

        again = table.add(cg, parse_dest(dest), PACE_NO_LIMIT, pace_bytes_per_s=RATE)
        assert again.id != cap.id and table.follow(again.id) is None, (
            "a cap set anew starts without a follow entry")


def test_follow_needs_a_pace_cap_and_goes_with_it(net: Net, pins: str, cg: str) -> None:
    """Refused for a refuse cap and an unknown id; cleared at will; gone
    when a commit replaces the cap; an entry whose cap is gone (a killed
    command's) removed by the next command."""
    table = CapTable()
    refuse = table.add(cg, parse_dest(f"{net.server_v4}/32:{OTHER_PORT}"), 3)
    with pytest.raises(TamebpfError, match="not a pace cap"):
        table.set_follow(refuse.id, 1, 1)
    with pytest.raises(TamebpfError, match="no cap with id"):
        table.set_follow(refuse.id + 1000, 1, 1)
    dest = f"{net.server_v4}/32:{PORT}"
    paced = table.add(cg, parse_dest(dest), PACE_NO_LIMIT, pace_bytes_per_s=RATE)
    table.set_follow(paced.id, 7, 1000)
    assert table.follow(paced.id) == (7, 1000)
    table.clear_follow(paced.id)
    assert table.follow(paced.id) is None
    table.clear_follow(paced.id)  # nothing to clear: no error

    table.set_follow(paced.id, 7, 1000)
    new = table.commit([the_cap(table, cg, dest),
                        Add(cg, parse_dest(dest), PACE_NO_LIMIT, RATE * 2)])[0]
    assert (table.follow(paced.id), table.follow(new.id)) == (None, None), (
        "a commit replacing a cap drops its entry; the new cap has none")

    orphan = new.id + 1000
    libbpf = ctypes.CDLL("libbpf.so.1", use_errno=True)
    libbpf.bpf_obj_get.argtypes = [ctypes.c_char_p]
    libbpf.bpf_map_update_elem.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                           ctypes.c_uint64]
    fd = libbpf.bpf_obj_get(os.path.join(pins, "cap_follow").encode())
    assert fd >= 0, f"cannot open the pinned cap_follow: errno {ctypes.get_errno()}"
    try:
        key, value = ctypes.c_uint64(orphan), TbCapFollow(5, 5)
        assert libbpf.bpf_map_update_elem(fd, ctypes.byref(key), ctypes.byref(value), 0) == 0
    finally:
        os.close(fd)
    assert table.follow(orphan) == (5, 5)
    table.list()  # tidies first
    assert table.follow(orphan) is None, "an entry of no cap survived the next command"

"""FlowReader.changes against the real kernel: the library's comparison of
successive snapshots names exactly the flows that changed, closed or went
away, so that views and scrapes touch only those (issue 17)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from tamebpf.common.records import FlowChanges
from tamebpf.kernel.flows import FlowReader

pytestmark = pytest.mark.root


@pytest.fixture
def pairs() -> Iterator[tuple[int, list[tuple[socket.socket, socket.socket]]]]:
    """20 idle loopback connections to a listener of our own."""
    lst = socket.create_server(("127.0.0.1", 0))
    port = lst.getsockname()[1]
    out = []
    try:
        for _ in range(20):
            c = socket.create_connection(("127.0.0.1", port))
            s, _ = lst.accept()
            out.append((c, s))
        yield port, out
    finally:
        for c, s in out:
            c.close()
            s.close()
        lst.close()


def ours(ch: FlowChanges, port: int) -> list[int]:
    return sorted(f.cookie for f in ch.changed
                  if port in (f.local_port, f.remote_port) and not f.closed)


def cookie(sock: socket.socket) -> int:
    return int.from_bytes(sock.getsockopt(socket.SOL_SOCKET, 57, 8), "little")  # SO_COOKIE


def test_changes_name_what_changed(pairs: tuple[int, list[tuple[socket.socket,
                                                                  socket.socket]]]) -> None:
    port, conns = pairs
    everything = {cookie(x) for pair in conns for x in pair}
    with FlowReader() as reader:
        first = reader.changes()
        assert set(ours(first, port)) == everything, "the first snapshot is all new"
        assert first.open_flows >= len(everything)
        assert first.read_ns <= time.monotonic_ns()

        idle = reader.changes()
        assert ours(idle, port) == [], "idle connections changed nothing"
        assert not everything & set(idle.vanished)

        for c, _ in conns[:3]:
            c.sendall(b"x" * 10_000)
        time.sleep(0.2)
        moved = reader.changes()
        want = {cookie(x) for pair in conns[:3] for x in pair}  # sender and receiver
        assert set(ours(moved, port)) == want

        gone = {cookie(x) for pair in conns[15:] for x in pair}
        for c, s in conns[15:]:
            c.close()
            s.close()
        del conns[15:]
        time.sleep(0.2)
        closing = reader.changes()
        ended = {f.cookie for f in closing.changed if f.closed} | set(closing.vanished)
        assert gone <= ended, f"closed flows not reported: {gone - ended}"
        assert not set(ours(closing, port)) & gone

        # What the changes add up to is what a full snapshot of another
        # reader shows: the same open flows of ours.
        with FlowReader() as other:
            full = {f.cookie for f in other.snapshot()
                    if port in (f.local_port, f.remote_port) and not f.closed}
        assert full == everything - gone

"""The exporter under clients that connect and never finish a request: a
scrape is still answered within a second, the thread count does not grow
with them, each is closed at its deadline, and past --max-connections a
connection is closed at once."""

from __future__ import annotations

import contextlib
import os
import selectors
import socket
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

from tamebpf.exporter.server import HEAD_TIMEOUT_S
from tests.integration.test_export import exporter, http_get

pytestmark = pytest.mark.root

HALF = b"GET /metrics HTTP/1.1\r\nHost: tamebpf\r\n"  # no blank line: never complete


def threads_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("Threads:", 1)[1].split()[0])


@contextlib.contextmanager
def held(address: tuple[str, int], n: int) -> Iterator[list[socket.socket]]:
    """n connections, each sent half a request."""
    socks = []
    try:
        for _ in range(n):
            s = socket.create_connection(address, timeout=5)
            s.sendall(HALF)
            socks.append(s)
        yield socks
    finally:
        for s in socks:
            s.close()


def closed_within(socks: list[socket.socket], seconds: float) -> dict[int, float]:
    """Which of socks the server closed within `seconds`, and when (s)."""
    start = time.monotonic()
    sel = selectors.DefaultSelector()
    for i, s in enumerate(socks):
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, i)
    when: dict[int, float] = {}
    while len(when) < len(socks) and time.monotonic() - start < seconds:
        for key, _ in sel.select(0.2):
            try:
                data = key.fileobj.recv(4096)  # type: ignore[union-attr]
            except BlockingIOError:
                continue
            except ConnectionResetError:
                data = b""  # closed with our request unread: a reset
            if not data:
                when[key.data] = time.monotonic() - start
                sel.unregister(key.fileobj)
    sel.close()
    return when


def test_500_half_sent_requests_hold_no_thread_and_no_scrape(pins: str) -> None:
    with exporter("--no-learn") as (proc, url):
        parts = urllib.parse.urlsplit(url)
        address = (parts.hostname or "127.0.0.1", parts.port or 80)
        http_get(url)  # the workers exist from here on
        before = threads_of(proc.pid)
        with held(address, 500) as socks:
            opened = time.monotonic()
            t0 = time.monotonic()
            body = http_get(url, timeout=5)
            took = time.monotonic() - t0
            during = threads_of(proc.pid)
            assert "tamebpf_" in body, "the scrape did not answer with metrics"
            assert took < 1.0, f"a scrape took {took:.2f} s beside 500 slow clients"
            assert during <= before, f"threads {before} -> {during} with 500 held connections"
            when = closed_within(socks, HEAD_TIMEOUT_S + 5)
            elapsed = time.monotonic() - opened
        assert len(when) == 500, f"{500 - len(when)} held connections still open after " \
            f"{elapsed:.1f} s"
        early = [t for t in when.values() if t < HEAD_TIMEOUT_S - 2]
        assert not early, f"{len(early)} closed before their deadline, e.g. {min(early):.1f} s"
        assert proc.poll() is None, "the exporter died"


def test_connections_past_the_limit_are_closed_at_once(pins: str) -> None:
    with exporter("--no-learn", "--max-connections", "20") as (proc, url):
        parts = urllib.parse.urlsplit(url)
        address = (parts.hostname or "127.0.0.1", parts.port or 80)
        with held(address, 20) as socks, held(address, 5) as extra:
            time.sleep(0.5)  # the loop has accepted the first 20 (and refused the rest)
            refused = closed_within(extra, 2.0)
            kept = closed_within(socks, 0.5)
        assert len(refused) == 5, f"{5 - len(refused)} of 5 over the limit left open"
        assert not kept, f"{len(kept)} of 20 within the limit closed early"
        assert proc.poll() is None and os.path.exists(f"/proc/{proc.pid}"), "exporter died"

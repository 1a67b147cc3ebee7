"""Our iperf3-protocol client against the real iperf3 server, on loopback.

The server must accept our parameters, streams and results exactly as it
accepts iperf3's own client: its JSON report names our stream count and the
bytes it received, and that count is what the client returns. In reverse
mode (as iperf3 -R) it sends, with the congestion control we asked for, and
reports what it sent and retransmitted.
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest

from tamebpf.advise import iperf3_client
from tamebpf.advise.iperf3_client import Iperf3Client, Iperf3Error, make_cookie
from tamebpf_testbed.iperf import wait_for

HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def listening(port: int, proc: subprocess.Popen[bytes]) -> bool:
    # Not by connecting: iperf3 -s would take that for a client (and -1 exit).
    assert proc.poll() is None, "iperf3 -s exited"
    return bool(subprocess.run(["ss", "-tlnH", f"sport = :{port}"], capture_output=True,
                               text=True, check=True).stdout.strip())


@contextlib.contextmanager
def server(*extra: str) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    port = free_port()
    proc = subprocess.Popen(["iperf3", "-s", "-p", str(port), "-B", HOST, *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: listening(port, proc), 5.0, f"iperf3 -s on port {port}")
        yield port, proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def test_server_counts_our_streams_and_bytes() -> None:
    with server("-1", "-J") as (port, proc):
        res = iperf3_client.run(HOST, port, 3, 0.4, "reno")
        out, _ = proc.communicate(timeout=10)
    report = json.loads(out)
    assert "error" not in report, report.get("error")
    streams = report["end"]["streams"]
    assert len(streams) == 3, f"server saw {len(streams)} streams"
    server_bytes = int(report["end"]["sum_received"]["bytes"])
    assert res.received_bytes == server_bytes, (res.received_bytes, server_bytes)
    assert 0 < server_bytes <= res.sent_bytes
    assert 0.35 <= res.seconds <= 1.0, res.seconds
    assert res.received_mbps and res.received_mbps > 0
    assert report["start"]["test_start"]["num_streams"] == 3
    cookies = res.data_cookies
    assert len(cookies) == 3 and len(set(cookies)) == 3 and all(cookies), cookies


def test_busy_server_is_refused_by_name() -> None:
    with server() as (port, _):
        first = Iperf3Client(HOST, port, 1, 2.0)
        try:
            first.connect()
            t0 = time.monotonic()
            with pytest.raises(Iperf3Error, match="busy"):
                iperf3_client.run(HOST, port, 1, 0.2, timeout_s=2.0, busy_wait_s=1.0)
            waited = time.monotonic() - t0
            assert 0.7 <= waited <= 3.0, f"asked a busy server again for {waited:.1f} s, not ~1"
        finally:
            first.close()


def test_a_server_still_finishing_a_test_is_asked_again() -> None:
    """The server refuses while another test ends (often our own previous
    probe, its last packets delayed at a full queue); asked again, it runs ours."""
    with server() as (port, _):
        first = Iperf3Client(HOST, port, 1, 1.0)
        first.connect()

        def finish_later() -> None:
            try:
                first.send_until(first.started + 0.8)
                first.finish()
            finally:
                first.close()

        ender = threading.Thread(target=finish_later)
        ender.start()
        try:
            res = iperf3_client.run(HOST, port, 2, 0.3, timeout_s=2.0, busy_wait_s=5.0)
        finally:
            ender.join(10)
        assert res.received_bytes and res.received_bytes > 0, res


def test_server_gone_mid_test_raises_instead_of_hanging() -> None:
    with server() as (port, proc):
        client = Iperf3Client(HOST, port, 2, 5.0, timeout_s=2.0)
        try:
            client.connect()
            client.send_until(time.monotonic() + 0.1)
            proc.kill()
            proc.wait()
            t0 = time.monotonic()
            with pytest.raises(Iperf3Error):
                client.send_until(time.monotonic() + 3.0)
                client.finish()
            assert time.monotonic() - t0 < 5.0
        finally:
            client.close()


@pytest.mark.parametrize("reverse", [False, True], ids=["upload", "reverse"])
def test_nothing_listening_names_host_and_port(reverse: bool) -> None:
    port = free_port()
    t0 = time.monotonic()
    with pytest.raises(Iperf3Error, match=f"{HOST}:{port}"):
        iperf3_client.run(HOST, port, 1, 0.2, reverse=reverse)
    waited = time.monotonic() - t0
    assert waited < 1.0, f"a refused connection took {waited:.2f} s to report, not < 1"


def test_unknown_congestion_control_is_named() -> None:
    with server() as (port, _), pytest.raises(Iperf3Error, match="no-such-cc"):
        iperf3_client.run(HOST, port, 1, 0.2, "no-such-cc")


def test_data_connections_wait_until_the_server_took_the_control_connection() -> None:
    # Played by hand on a real listener: iperf3 takes the first connection it
    # accepts for the control connection. A data connection queued before the
    # server answered PARAM_EXCHANGE could come out of accept() first (when
    # the control connection's last ACK is lost) and deadlock the server.
    with socket.create_server((HOST, 0)) as listener:
        port = listener.getsockname()[1]
        client = Iperf3Client(HOST, port, 2, 0.2, timeout_s=3.0)
        errors: list[BaseException] = []

        def connect() -> None:
            try:
                client.connect()
            except Iperf3Error as err:
                errors.append(err)
            finally:
                client.close()

        thread = threading.Thread(target=connect)
        thread.start()
        try:
            control, _ = listener.accept()
            with control:
                readable, _, _ = select.select([listener], [], [], 0.3)
                assert not readable, "a data connection came before PARAM_EXCHANGE"
                control.sendall(struct.pack("b", iperf3_client.PARAM_EXCHANGE))
                readable, _, _ = select.select([listener], [], [], 3.0)
                assert readable, "no data connection after PARAM_EXCHANGE"
                for _ in range(2):
                    listener.accept()[0].close()
        finally:
            thread.join(10)
        assert not thread.is_alive()
        assert errors, "the client went on although the server closed the control connection"


def _per_stream_bytes_before(report: dict, seconds: float) -> list[int]:
    """Bytes each stream delivered in the server's intervals that ended by
    `seconds` into the test."""
    totals: dict[int, int] = {}
    for interval in report["intervals"]:
        for s in interval["streams"]:
            if s["end"] <= seconds + 1e-6:
                totals[s["socket"]] = totals.get(s["socket"], 0) + int(s["bytes"])
    return sorted(totals.values(), reverse=True)


def test_stages_send_on_the_first_streams_then_on_all() -> None:
    """Two probes as one test: 1 stream, then 3. The others are connected
    but silent in the first stage (the server's own per-stream intervals
    show it), and the stage callback names the sending streams."""
    stages: list[tuple[int, float, tuple[int, ...]]] = []
    with server("-1", "-J", "-i", "0.1") as (port, proc):
        res = iperf3_client.run_stages(
            HOST, port, [(1, 0.6), (3, 0.4)], "reno",
            on_stage=lambda k, t, cookies: stages.append((k, t, cookies)))
        out, _ = proc.communicate(timeout=10)
    report = json.loads(out)
    assert "error" not in report, report.get("error")
    assert [(k, len(c)) for k, _, c in stages] == [(0, 1), (1, 3)], stages
    assert stages[1][2][0] == stages[0][2][0], "the first stream goes on sending"
    assert set(stages[1][2]) == set(res.data_cookies)
    assert 0.55 <= stages[1][1] - stages[0][1] <= 0.8, "the first stage lasted its 0.6 s"
    first = _per_stream_bytes_before(report, 0.5)
    assert len(first) == 3 and first[0] > 0, first
    assert first[1] == first[2] == 0, f"streams sent before their stage: {first}"
    whole = sorted((int(s["receiver"]["bytes"]) for s in report["end"]["streams"]),
                   reverse=True)
    assert all(b > 0 for b in whole), f"a stream never sent in the second stage: {whole}"
    assert res.received_bytes == sum(whole)


def test_stopping_a_stage_early_ends_that_stage_only() -> None:
    stages: list[float] = []
    with server() as (port, _):
        res = iperf3_client.run_stages(
            HOST, port, [(1, 5.0), (2, 0.5)], "reno",
            stop=lambda k: k == 0, on_stage=lambda k, t, cookies: stages.append(t))
    assert len(stages) == 2
    assert stages[1] - stages[0] < 0.3, "stage 0 was asked to stop at once"
    assert 0.45 <= res.seconds <= 1.2, f"stage 1 should still run its 0.5 s: {res.seconds}"


def test_stages_need_rising_stream_counts() -> None:
    with pytest.raises(ValueError, match="rising"):
        iperf3_client.run_stages(HOST, 1, [(4, 1.0), (2, 1.0)])


def _reports(out: bytes) -> list[dict]:
    """The JSON report of each test a server (no -1) ran; not the one it
    prints when it is stopped."""
    text, reports, at = out.decode(), [], 0
    decoder = json.JSONDecoder()
    while text[at:].strip():
        at += len(text[at:]) - len(text[at:].lstrip())
        report, at = decoder.raw_decode(text, at)
        if "test_start" in report.get("start", {}):
            assert "error" not in report, report["error"]
            reports.append(report)
    return reports


def connected(port: int) -> bool:
    """Whether the server still holds a connection it has not closed."""
    states = ["state", "established", "state", "close-wait", "state", "last-ack"]
    return bool(subprocess.run(["ss", "-tnH", *states, f"( sport = :{port} )"],
                               capture_output=True, text=True, check=True).stdout.strip())


def server_data_congestion(port: int) -> list[str]:
    """The congestion control of each of the server's data connections: its
    established sockets on `port` that received only our 37-byte cookie
    (the control connection also received the parameters)."""
    out = subprocess.run(["ss", "-tinH", "state", "established", f"( sport = :{port} )"],
                         capture_output=True, text=True, check=True).stdout
    names = []
    for line in out.splitlines():
        fields = line.split()
        if line.startswith(("\t", " ")) and f"bytes_received:{len(make_cookie())}" in fields:
            names.append(fields[0])
    return names


@pytest.mark.parametrize("streams", [1, 4])
def test_reverse_streams_bring_the_servers_data_to_us(streams: int) -> None:
    """The server sends on every stream with the congestion control asked
    for; we count what came within a few % of what it says it sent, and
    take its retransmissions from its results."""
    with server("-1", "-J") as (port, proc):
        client = Iperf3Client(HOST, port, streams, 1.0, "reno", reverse=True)
        try:
            client.connect()
            seen = server_data_congestion(port)
            client.receive_until(client.started + 1.0)
            res = client.finish()
        finally:
            client.close()
        out, _ = proc.communicate(timeout=10)
    report = json.loads(out)
    assert "error" not in report, report.get("error")
    start, end = report["start"]["test_start"], report["end"]
    assert (start["reverse"], start["num_streams"]) == (1, streams), start
    assert seen == ["reno"] * streams, f"server's data sockets ran {seen}, not reno"
    assert res.reverse and res.server_congestion == "reno", res
    sent = int(end["sum_sent"]["bytes"])
    assert res.sent_bytes == sent, f"server sent {sent}, we report {res.sent_bytes}"
    assert res.received_bytes is not None and 0.95 * sent <= res.received_bytes <= sent, (
        f"received {res.received_bytes} B, not within 5 % below the {sent} B sent")
    assert res.sender_retransmits == int(end["sum_sent"]["retransmits"]), res
    assert 0.95 <= res.seconds <= 1.3, res.seconds
    assert res.received_mbps and res.received_mbps > 0
    cookies = res.data_cookies
    assert len(cookies) == streams and len(set(cookies)) == streams and all(cookies), cookies


def test_reverse_stages_are_tests_of_their_own() -> None:
    """1 stream, then 4: two tests, one after the other, each its own
    streams, cookies and counts; the second starts soon after the first."""
    stages: list[tuple[int, float, tuple[int, ...]]] = []
    seen: list[list[str]] = []

    def begins(k: int, t: float, cookies: tuple[int, ...]) -> None:
        stages.append((k, t, cookies))
        seen.append(server_data_congestion(port))

    with server("-J") as (port, proc):
        res = iperf3_client.run_stages(HOST, port, [(1, 0.4), (4, 0.4)], "cubic",
                                       reverse=True, on_stage=begins)
        # It writes a test's report before it closes the control connection.
        wait_for(lambda: not connected(port), 5.0, "the server to close our last test")
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
    reports = _reports(out)
    assert [(r["start"]["test_start"]["num_streams"], r["start"]["test_start"]["reverse"])
            for r in reports] == [(1, 1), (4, 1)], "the server ran other tests than ours"
    assert [(k, len(c)) for k, _, c in stages] == [(0, 1), (1, 4)], stages
    assert seen == [["cubic"], ["cubic"] * 4], f"server's data sockets ran {seen}"
    first, second = stages[0][2], stages[1][2]
    assert not set(first) & set(second), "the second test reused a stream of the first"
    assert res.data_cookies == first + second
    assert [r.data_cookies for r in res.stages] == [first, second]
    for r, report in zip(res.stages, reports, strict=True):
        assert r.sent_bytes == int(report["end"]["sum_sent"]["bytes"]), (r, report["end"])
        assert r.received_bytes and r.received_bytes > 0, r
    assert res.received_bytes == res.stages[1].received_bytes
    assert res.setup_s == res.stages[0].setup_s and res.finish_s == res.stages[1].finish_s
    gap = stages[1][1] - stages[0][1] - 0.4
    assert 0 <= gap < 0.3, f"the second test began {gap:.3f} s after the first's 0.4 s"


def test_reverse_stages_ask_a_restarting_server_again() -> None:
    """The server listens anew after each test; a test that comes just then
    is refused or reset, and asked again, not failed."""
    with server() as (port, _):
        for _ in range(10):
            res = iperf3_client.run_stages(HOST, port, [(1, 0.02)] * 4, reverse=True)
            assert len(res.stages) == 4 and all(r.received_bytes for r in res.stages), res


def test_stopping_a_reverse_stage_early_ends_that_stage_only() -> None:
    stages: list[float] = []
    with server() as (port, _):
        res = iperf3_client.run_stages(
            HOST, port, [(1, 5.0), (2, 0.5)], "reno", reverse=True,
            stop=lambda k: k == 0, on_stage=lambda k, t, cookies: stages.append(t))
    assert len(stages) == 2
    assert stages[1] - stages[0] < 0.3, "stage 0 was asked to stop at once"
    assert res.stages[0].seconds < 0.1, f"stage 0 ran {res.stages[0].seconds:.2f} s"
    assert 0.45 <= res.seconds <= 1.2, f"stage 1 should still run its 0.5 s: {res.seconds}"


def test_reverse_server_names_the_congestion_control_it_fell_back_to() -> None:
    """A server without the one asked for warns and sends with its default;
    its results say which that was."""
    with server("-1") as (port, _):
        client = Iperf3Client(HOST, port, 1, 0.2, "no-such-cc", reverse=True)
        try:
            client.connect()
            client.receive_until(client.started + 0.2)
            res = client.finish()
        finally:
            client.close()
    assert res.server_congestion not in (None, "no-such-cc"), res
    assert res.received_bytes and res.received_bytes > 0, res


def test_reverse_server_gone_mid_test_raises_instead_of_hanging() -> None:
    with server() as (port, proc):
        client = Iperf3Client(HOST, port, 2, 5.0, timeout_s=2.0, reverse=True)
        try:
            client.connect()
            client.receive_until(time.monotonic() + 0.1)
            assert sum(client.received) > 0, "no data came before the kill"
            proc.kill()
            proc.wait()
            t0 = time.monotonic()
            with pytest.raises(Iperf3Error):
                client.receive_until(time.monotonic() + 3.0)
                client.finish()
            assert time.monotonic() - t0 < 5.0
        finally:
            client.close()

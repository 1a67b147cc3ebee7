"""A minimal iperf3 client: n TCP streams to an `iperf3 -s` server, we send
(or, in reverse mode, as `iperf3 -c HOST -R`, the server sends and we receive).

Why not run the iperf3 binary: its client connects the streams one after
another (n round trips before any data moves) and, at the end, waits for the
result exchange before it exits. At 50 ms RTT that is about 1.2 s of every
two-probe advice in which no probe data flows. This client opens all data
connections at once, sends for a time given in fractions of a second, and
still asks the server for its own count of bytes received (the figure
`iperf3 -c` prints as "receiver"), so the report keeps iperf3's number beside
the kernel's.

The wire protocol (iperf3 3.x, TCP only): a 37-byte cookie opens every
connection; the server drives the control connection with one-byte states;
parameters and results are JSON, each preceded by its length (4 bytes,
network order). Reverse mode changes only the parameters ("reverse": true)
and which side writes on the data connections; the states and the result
exchange are the same, each side reporting its own per-stream count.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import json
import math
import os
import select
import socket
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tamebpf.common.units import mbps_over

# Control states (iperf_api.h).
TEST_START = 1
TEST_RUNNING = 2
TEST_END = 4
PARAM_EXCHANGE = 9
CREATE_STREAMS = 10
SERVER_TERMINATE = 11
EXCHANGE_RESULTS = 13
DISPLAY_RESULTS = 14
IPERF_DONE = 16
ACCESS_DENIED = -1
SERVER_ERROR = -2

COOKIE_CHARS = b"abcdefghijklmnopqrstuvwxyz234567"
BLOCK = 128 * 1024  # iperf3's default TCP block
MULTISEND = 10
MAX_JSON = 1 << 20
UNRESOLVED = "cannot resolve"  # the error's start: advise/probes.py words its hint by it
NO_SERVER = "cannot connect to"  # ... and tells "no server answers" by this one
SO_COOKIE = getattr(socket, "SO_COOKIE", 57)  # Linux's value; older Pythons lack the name


class Iperf3Error(Exception):
    """The server refused, failed, or the path broke; the text says which."""


class ServerBusy(Iperf3Error):
    """The server is running another test (it answered ACCESS_DENIED)."""


class NotListening(Iperf3Error):
    """The control connection was refused, or reset before the server took
    it: nothing listens there, or an iperf3 server is between two tests (it
    closes its listening socket after each test and opens a new one)."""


@dataclass(frozen=True)
class Iperf3Result:
    """One test, or the stages of one run_stages. Each byte count is its
    side's own: the sender's of what it wrote into its sockets, the
    receiver's of what it read. Upload (the default) we send and the server
    receives; reverse the server sends and we receive."""

    # Upload: ours. Reverse: the server's (None: it sent no results); above
    # received_bytes by what was in flight and in buffers at TEST_END, so a
    # cross-check, not the measurement.
    sent_bytes: int | None
    # Upload: the server's (None: it sent no results), the figure iperf3 -c
    # prints as "receiver". Reverse: ours, read from TEST_RUNNING to
    # TEST_END as `seconds` runs (iperf3 -R also counts what arrives until
    # the server answers TEST_END: about a round trip's worth of data more).
    received_bytes: int | None
    seconds: float  # from TEST_RUNNING to TEST_END
    # Socket cookies of the data connections (what the BPF side keys flows
    # by), so the probe measures exactly these and never the control one.
    data_cookies: tuple[int, ...] = ()
    # Where a probe's wall time goes besides the test itself: connecting
    # until TEST_RUNNING, and TEST_END until the server's results.
    setup_s: float = 0.0
    finish_s: float = 0.0
    reverse: bool = False
    # Reverse: the server's retransmissions, summed over its streams (None:
    # it reported none). Upload: None (the kernel counts ours).
    sender_retransmits: int | None = None
    # The congestion control the server's data sockets used, as its results
    # say (None: they do not). In reverse mode the sender's, so worth
    # checking: a server that lacks the one asked for warns and goes on with
    # its default, and one asked for none uses its default or, as iperf3
    # 3.12 does, the last one any client asked for.
    server_congestion: str | None = None
    # run_stages in reverse mode: each stage's own test, in order (the
    # fields above then combine them; see run_stages). Otherwise empty.
    stages: tuple[Iperf3Result, ...] = ()

    @property
    def received_mbps(self) -> float | None:
        if self.received_bytes is None or self.seconds <= 0:
            return None
        return mbps_over(self.received_bytes, self.seconds)


def socket_cookie(sock: socket.socket) -> int:
    """The kernel's socket cookie (SO_COOKIE), as bpf_get_socket_cookie sees it."""
    raw = sock.getsockopt(socket.SOL_SOCKET, SO_COOKIE, 8)
    return int(struct.unpack("=Q", raw)[0])


def make_cookie() -> bytes:
    return bytes(COOKIE_CHARS[b % 32] for b in os.urandom(36)) + b"\0"


def _deadline_left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise Iperf3Error("timed out waiting for the server")
    return left


def _recv_exact(sock: socket.socket, n: int, deadline: float) -> bytes:
    buf = b""
    while len(buf) < n:
        sock.settimeout(_deadline_left(deadline))
        try:
            chunk = sock.recv(n - len(buf))
        except TimeoutError:
            raise Iperf3Error("timed out waiting for the server") from None
        if not chunk:
            raise Iperf3Error("the server closed the control connection")
        buf += chunk
    return buf


def _json_message(obj: dict[str, Any]) -> bytes:
    data = json.dumps(obj).encode()
    return struct.pack("!I", len(data)) + data


def _recv_json(sock: socket.socket, deadline: float) -> dict[str, Any]:
    (size,) = struct.unpack("!I", _recv_exact(sock, 4, deadline))
    if size > MAX_JSON:
        raise Iperf3Error(f"the server sent {size} bytes of JSON; is this an iperf3 server?")
    obj = json.loads(_recv_exact(sock, size, deadline))
    if not isinstance(obj, dict):
        raise Iperf3Error("the server sent results that are not a JSON object")
    return obj


class Iperf3Client:
    """One test: `connect()`, `send_until()` (repeatable), `finish()`; in
    reverse mode `receive_until()` instead of `send_until()`."""

    def __init__(self, host: str, port: int, streams: int, seconds: float,
                 congestion: str | None = None, timeout_s: float = 3.0,
                 pipelined: bool = True, reverse: bool = False) -> None:
        # pipelined=False waits for every server state before the next step,
        # as iperf3 does: the baseline that the pipelined probes' time is
        # compared with.
        self.pipelined = pipelined
        self.reverse = reverse
        self.host, self.port, self.streams = host, port, streams
        self.seconds, self.congestion, self.timeout_s = seconds, congestion, timeout_s
        self.cookie = make_cookie()
        self.control: socket.socket | None = None
        self.data: list[socket.socket] = []
        self.sent = [0] * streams
        self.received = [0] * streams
        self.connecting = self.started = 0.0
        self.taken = False  # the server answered PARAM_EXCHANGE
        if reverse:
            self.buffer = memoryview(bytearray(BLOCK))
        else:
            self.block = memoryview(os.urandom(BLOCK))

    # -- set-up ----------------------------------------------------------------
    def _address(self) -> tuple[int, Any]:
        try:
            info = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
        except socket.gaierror as err:
            raise Iperf3Error(f"{UNRESOLVED} {self.host}: {err.strerror}") from None
        family, _, _, _, addr = info[0]
        return family, addr

    def _state(self, deadline: float) -> int:
        assert self.control is not None
        (state,) = struct.unpack("b", _recv_exact(self.control, 1, deadline))
        if state == ACCESS_DENIED:
            raise ServerBusy("the server is busy with another test (access denied)")
        if state == SERVER_ERROR:
            code, err = struct.unpack("!ii", _recv_exact(self.control, 8, deadline))
            reason = f" ({os.strerror(err)})" if err else ""
            raise Iperf3Error(f"the server reported iperf3 error {code}{reason}")
        if state == SERVER_TERMINATE:
            raise Iperf3Error("the server terminated the test")
        return int(state)

    def _expect(self, want: int, deadline: float) -> None:
        got = self._state(deadline)
        if got != want:
            raise Iperf3Error(f"unexpected iperf3 state {got} (wanted {want})")

    def _set_congestion(self, s: socket.socket) -> None:
        if not self.congestion:
            return
        try:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, self.congestion.encode())
        except OSError as err:
            raise Iperf3Error(f"congestion control {self.congestion!r} is not available "
                              f"here ({err.strerror})") from None

    def connect(self) -> None:
        """Control connection, parameters, all data connections; returns when
        the server says the test runs.

        Pipelined: the parameters follow the cookie without waiting for the
        server's PARAM_EXCHANGE, and the data connections start without
        waiting for CREATE_STREAMS. The server reads the cookie and the
        parameters in one go when it accepts a control connection
        (iperf_accept), so by the time a data connection's handshake completes
        it is in CREATE_STREAMS and takes it as a stream. One round trip fewer
        per probe. (An iperf3 3.12 server accepts this; see finish() for what
        it does not accept.)

        The data connections wait for PARAM_EXCHANGE, though: it says the
        server has accepted the control connection. The server accepts in the
        order handshakes complete on its side; when a full queue drops the
        control connection's last ACK and the cookie behind it, a data
        connection completes first, the server takes it for the control
        connection and blocks reading a cookie that never comes (seen on a
        20 Mbit/s path with 30 cross flows: the probe timed out)."""
        family, addr = self._address()
        self.connecting = time.monotonic()
        deadline = self.connecting + self.timeout_s
        self.control = socket.socket(family, socket.SOCK_STREAM)
        self.control.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.control.settimeout(self.timeout_s)
        try:
            self.control.connect(addr)
        except OSError as err:
            failed = NotListening if isinstance(err, ConnectionRefusedError) else Iperf3Error
            raise failed(f"{NO_SERVER} {self.host}:{self.port}: "
                         f"{err.strerror or err}") from None
        # "time" is whole seconds on the wire; the server only uses it for
        # a watchdog, we end the test ourselves.
        params: dict[str, Any] = {"tcp": True, "omit": 0, "time": math.ceil(self.seconds),
                                  "parallel": self.streams, "len": BLOCK, "pacing_timer": 1000,
                                  "client_version": "tamebpf"}
        if self.congestion:
            params["congestion"] = self.congestion
        if self.reverse:
            params["reverse"] = True
        try:
            self._set_up(family, addr, params, deadline)
        except OSError as err:  # a reset or a failed path, mid set-up
            lost = isinstance(err, ConnectionResetError | BrokenPipeError) and not self.taken
            raise (NotListening if lost else Iperf3Error)(
                f"the connection to {self.host}:{self.port} failed during "
                f"the set-up: {err.strerror or err}") from None
        self.started = time.monotonic()

    def _set_up(self, family: int, addr: Any, params: dict[str, Any], deadline: float) -> None:
        """connect() after the control connection is up (see its docstring)."""
        assert self.control is not None
        if self.pipelined:
            self.control.sendall(self.cookie + _json_message(params))
            self._expect(PARAM_EXCHANGE, deadline)
            self.taken = True
            self._start_streams(family, addr)
            self._expect(CREATE_STREAMS, deadline)
        else:
            self.control.sendall(self.cookie)
            self._expect(PARAM_EXCHANGE, deadline)
            self.taken = True
            self.control.sendall(_json_message(params))
            self._expect(CREATE_STREAMS, deadline)
            self._start_streams(family, addr)
        self._finish_streams(deadline)
        self._expect(TEST_START, deadline)
        self._expect(TEST_RUNNING, deadline)

    def _start_streams(self, family: int, addr: Any) -> None:
        """Every data connection's SYN at once (iperf3 connects them one by
        one). Sockets go into self.data at once, so close() closes them
        whatever fails."""
        for _ in range(self.streams):
            s = socket.socket(family, socket.SOCK_STREAM)
            self.data.append(s)
            s.setblocking(False)
            rc = s.connect_ex(addr)
            if rc not in (0, errno.EINPROGRESS):
                raise Iperf3Error(f"cannot open a data connection: {os.strerror(rc)}")

    def _finish_streams(self, deadline: float) -> None:
        """Wait for each data connection, then send it the cookie."""
        for s in self.data:
            _, w, _ = select.select([], [s], [], _deadline_left(deadline))
            if not w:
                raise Iperf3Error("timed out opening the data connections")
            rc = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if rc:
                raise Iperf3Error(f"cannot open a data connection: {os.strerror(rc)}")
            s.setblocking(True)
            s.sendall(self.cookie)
            # After the connection is up, as iperf3 -C does: the flow starts with
            # the system's congestion control, and Linux keeps that one's pacing
            # state (BBR's) across the switch. Setting it before connect gives
            # unpaced flows that lose in slow start at half the window on a
            # small queue (docs/advise.md), so the probes would not behave like
            # the iperf3 transfers they stand for. In reverse mode the server
            # sets it on its sending sockets (from the parameters); ours only
            # acknowledge, so theirs is the one that acts.
            if not self.reverse:
                self._set_congestion(s)
            s.setblocking(False)

    # -- the test --------------------------------------------------------------
    def send_until(self, until: float, stop: Callable[[], bool] | None = None,
                   active: int | None = None) -> None:
        """Keep the send buffers of the first `active` streams (None: all)
        full until the monotonic time `until`, or until `stop()` says the
        probe knows enough. The others stay connected and silent."""
        assert self.control is not None
        sending = self.data[:active]
        while True:
            left = until - time.monotonic()
            if left <= 0 or (stop is not None and stop()):
                return
            r, w, _ = select.select([self.control], sending, [], min(left, 0.05))
            if r:  # the server speaks during a test only to stop it
                self._state(time.monotonic() + self.timeout_s)
                raise Iperf3Error("the server ended the test early")
            for s in w:
                i = self.data.index(s)
                try:
                    # Up to MULTISEND blocks per wake-up, as iperf3 does: the buffer
                    # stays full, and the clock is still checked on a fast path.
                    for _ in range(MULTISEND):
                        self.sent[i] += s.send(self.block)
                except BlockingIOError:
                    pass
                except OSError as err:
                    raise Iperf3Error(f"the path failed during the test: {err.strerror}") from None

    def receive_until(self, until: float, stop: Callable[[], bool] | None = None) -> None:
        """Reverse mode: read every data connection as fast as the server
        fills it until the monotonic time `until`, or until `stop()` says the
        probe knows enough."""
        assert self.control is not None and self.reverse
        index = {s.fileno(): i for i, s in enumerate(self.data)}
        while True:
            left = until - time.monotonic()
            if left <= 0 or (stop is not None and stop()):
                return
            r, _, _ = select.select([self.control, *self.data], [], [], min(left, 0.05))
            if self.control in r:  # the server speaks during a test only to stop it
                self._state(time.monotonic() + self.timeout_s)
                raise Iperf3Error("the server ended the test early")
            for s in r:
                if not self._read(index[s.fileno()]):
                    raise Iperf3Error("the server closed a data connection during the test")

    def _read(self, i: int) -> bool:
        """What data connection i holds, up to MULTISEND buffers (as many
        reads per wake-up as send_until writes); False at its end."""
        s = self.data[i]
        try:
            for _ in range(MULTISEND):
                n = s.recv_into(self.buffer)
                if n == 0:
                    return False
                self.received[i] += n
        except BlockingIOError:
            pass
        except OSError as err:
            raise Iperf3Error(f"the path failed during the test: {err.strerror}") from None
        return True

    def finish(self) -> Iperf3Result:
        """TEST_END, then the result exchange: ours first, then the server's.
        Not pipelined: an iperf3 3.12 server sent with TEST_END and our
        results in one write answered the exchange, but then reset the next
        client's control connection."""
        assert self.control is not None
        ending = time.monotonic()
        seconds = ending - self.started
        deadline = ending + self.timeout_s
        self.control.sendall(struct.pack("b", TEST_END))
        self._expect(EXCHANGE_RESULTS, deadline)
        # The server numbers streams 1, 3, 4, ... (an iperf3 quirk) in the order
        # it accepted them; it rejects results naming any other id. Which of
        # our streams it gave which id is unknown, so the per-stream counts it
        # prints as the sender's may be swapped; the sums are right.
        ids = [1] + list(range(3, self.streams + 2))
        ours = self.received if self.reverse else self.sent
        self.control.sendall(_json_message({
            "cpu_util_total": 0.0, "cpu_util_user": 0.0, "cpu_util_system": 0.0,
            # -1 from a receiver, as iperf3's own says it has none to report.
            "sender_has_retransmits": -1 if self.reverse else 0,
            "streams": [{"id": sid, "bytes": b, "retransmits": -1, "jitter": 0, "errors": 0,
                         "packets": 0, "start_time": 0, "end_time": seconds}
                        for sid, b in zip(ids, ours, strict=True)]}))
        theirs: dict[str, Any] | None = None
        counted: int | None = None
        try:
            theirs = _recv_json(self.control, deadline)
            counted = sum(int(s.get("bytes", 0)) for s in theirs.get("streams", []))
            self._expect(DISPLAY_RESULTS, deadline)
            self.control.sendall(struct.pack("b", IPERF_DONE))
        except Iperf3Error:
            counted = None  # a server that rejects our results still ran the test
        cookies = tuple(socket_cookie(s) for s in self.data)
        setup_s, finish_s = self.started - self.connecting, time.monotonic() - ending
        if not self.reverse:
            return Iperf3Result(sum(self.sent), counted, seconds, cookies, setup_s, finish_s,
                                server_congestion=_congestion_used(theirs))
        return Iperf3Result(counted, sum(self.received), seconds, cookies, setup_s, finish_s,
                            reverse=True,
                            sender_retransmits=None if counted is None else _retransmits(theirs),
                            server_congestion=_congestion_used(theirs))

    def close_data(self) -> None:
        """Close the data connections. In reverse mode what the server still
        had unsent is reset, not delivered to a connection nobody reads."""
        for s in self.data:
            s.close()

    def wait_closed(self, timeout_s: float) -> bool:
        """After finish(): whether the server closed the control connection
        within `timeout_s`. It does so as it ends the test, just before it
        listens for the next one."""
        assert self.control is not None
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.control.settimeout(left)
                if not self.control.recv(4096):
                    return True
        except ConnectionResetError:
            return True
        except OSError:
            return False

    def close(self) -> None:
        self.close_data()
        if self.control is not None:
            self.control.close()


def _congestion_used(results: dict[str, Any] | None) -> str | None:
    cc = None if results is None else results.get("congestion_used")
    return cc if isinstance(cc, str) else None


def _retransmits(results: dict[str, Any] | None) -> int | None:
    """The sender's retransmissions from its results, summed over its
    streams; None unless it has them for every stream (iperf3 writes -1
    where it has none)."""
    if results is None or results.get("sender_has_retransmits") != 1:
        return None
    counts = [s.get("retransmits") for s in results.get("streams", [])]
    if not counts or not all(isinstance(c, int | float) and c >= 0 for c in counts):
        return None
    return sum(int(c) for c in counts)


# How long a busy server is asked again before giving up. The busy one is
# often our own previous probe: its last control message or FIN lost at a
# full queue, the server holds that test for a retransmission timeout or two
# after we ended it (seen: the 10-stream probe refused on a 20 Mbit/s path
# with 4 cross flows). Another client's test, seconds long, still fails.
BUSY_WAIT_S = 3.0
BUSY_RETRY_S = 0.25


# An iperf3 server closes its listening socket after each test and opens a
# new one within a millisecond or so; a test that comes just then is refused
# or reset. Reverse stages, each a test right after the last, ask again this
# often for this long; a server that is not there is reported that much later.
RESTART_RETRY_S = 0.01
RESTART_WAIT_S = 0.2


def run(host: str, port: int, streams: int, seconds: float, congestion: str | None = None,
        timeout_s: float = 3.0, pipelined: bool = True,
        busy_wait_s: float = BUSY_WAIT_S,
        stop: Callable[[], bool] | None = None, reverse: bool = False) -> Iperf3Result:
    """One test of at most `seconds`, ended early when `stop()` is true."""
    return run_stages(host, port, [(streams, seconds)], congestion, timeout_s, pipelined,
                      busy_wait_s, lambda stage: stop is not None and stop(), reverse=reverse)


# Called as each stage begins: (stage index from 0, monotonic time, socket
# cookies of the streams that send in it).
StageStart = Callable[[int, float, tuple[int, ...]], None]


def run_stages(host: str, port: int, stages: Sequence[tuple[int, float]],
               congestion: str | None = None, timeout_s: float = 3.0,
               pipelined: bool = True, busy_wait_s: float = BUSY_WAIT_S,
               stop: Callable[[int], bool] | None = None,
               on_stage: StageStart | None = None, reverse: bool = False) -> Iperf3Result:
    """One test in stages of (streams, seconds), stream counts rising: all
    the streams connect at the start, and stage k sends on the first n_k of
    them. Two probes of 1 and 10 streams so cost one set-up and one result
    exchange instead of two each. `stop(k)` true ends stage k early.

    reverse=True: the server sends, on every stream of a test at once, so
    each stage is a test of its own (_reverse_stages says what the result
    then holds)."""
    counts = [n for n, _ in stages]
    if not stages or counts != sorted(counts) or counts[0] < 1:
        raise ValueError(f"stages need rising stream counts from 1 up, got {counts}")
    if reverse:
        return _reverse_stages(host, port, stages, congestion, timeout_s, pipelined,
                               busy_wait_s, stop, on_stage)
    total_s = sum(s for _, s in stages)
    give_up = time.monotonic() + busy_wait_s
    while True:
        client = Iperf3Client(host, port, counts[-1], total_s, congestion, timeout_s, pipelined)
        try:
            client.connect()
            begin = client.started
            for k, (n, seconds) in enumerate(stages):
                if on_stage is not None:
                    on_stage(k, begin, tuple(socket_cookie(s) for s in client.data[:n]))
                client.send_until(begin + seconds,
                                  None if stop is None else functools.partial(stop, k), n)
                begin = time.monotonic()
            return client.finish()
        except ServerBusy:
            if time.monotonic() + BUSY_RETRY_S > give_up:
                raise
        finally:
            client.close()
        time.sleep(BUSY_RETRY_S)


def _reverse_stages(host: str, port: int, stages: Sequence[tuple[int, float]],
                    congestion: str | None, timeout_s: float, pipelined: bool,
                    busy_wait_s: float, stop: Callable[[int], bool] | None,
                    on_stage: StageStart | None) -> Iperf3Result:
    """run_stages in reverse mode: stage k a test of n_k streams, one after
    another. The result is the last test's (its counts, seconds and
    received_mbps are the last stage's alone, where in upload mode they
    cover all stages), with data_cookies of every stage, setup_s of the
    first and each stage's own result in `stages`. The set-up of every
    later test falls in the stage before it: on_stage(k + 1) comes when
    test k + 1 runs."""
    results: list[Iperf3Result] = []
    for k, (n, seconds) in enumerate(stages):
        results.append(_reverse_test(
            host, port, n, seconds, congestion, timeout_s, pipelined, busy_wait_s,
            None if stop is None else functools.partial(stop, k),
            None if on_stage is None else functools.partial(on_stage, k),
            another_follows=k < len(stages) - 1))
    return dataclasses.replace(
        results[-1], data_cookies=tuple(c for r in results for c in r.data_cookies),
        setup_s=results[0].setup_s, stages=tuple(results))


def _reverse_test(host: str, port: int, streams: int, seconds: float,
                  congestion: str | None, timeout_s: float, pipelined: bool,
                  busy_wait_s: float, stop: Callable[[], bool] | None,
                  begins: Callable[[float, tuple[int, ...]], None] | None,
                  another_follows: bool) -> Iperf3Result:
    """One stage of _reverse_stages, asked again while the server is busy
    or, briefly, while it is opening its listening socket anew."""
    first = time.monotonic()
    give_up = first + busy_wait_s
    while True:
        client = Iperf3Client(host, port, streams, seconds, congestion, timeout_s, pipelined,
                              reverse=True)
        try:
            client.connect()
            if begins is not None:
                begins(client.started, tuple(socket_cookie(s) for s in client.data))
            client.receive_until(client.started + seconds, stop)
            result = client.finish()
            if another_follows:
                # The next test connects once the server has closed this one:
                # sooner, the server would refuse it as busy.
                client.close_data()
                client.wait_closed(timeout_s)
            return result
        except ServerBusy:
            retry_s = BUSY_RETRY_S
            if time.monotonic() + retry_s > give_up:
                raise
        except NotListening:
            retry_s = RESTART_RETRY_S
            if time.monotonic() + retry_s > min(give_up, first + RESTART_WAIT_S):
                raise
        finally:
            client.close()
        time.sleep(retry_s)

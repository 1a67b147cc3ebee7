"""The metrics server: HTTP GET (optionally over TLS) for a WSGI app, on one
event-loop thread and a small pool of workers.

A thread a connection let anyone who can reach the port hold a thread for
as long as they liked by sending half a request. Here the loop does the
waiting: the TLS handshake, reading the request head and writing the
answer are non-blocking, each connection has a deadline for its head
(HEAD_TIMEOUT_S from its accept) and for its answer (WRITE_TIMEOUT_S), and
at most `max_connections` are open at once; one more is closed at once.
Only a complete request head reaches a worker, which runs the app (the
scrape: a read of the kernel's maps) and hands the answer back to the
loop. So a scrape is answered however many slow clients hold connections,
and the threads are the loop's one and the workers', whatever comes.

Every answer closes its connection (HTTP/1.1 with Connection: close), as
http.server's did. prometheus_client's own servers are not used: Debian
12's (0.16) cannot be stopped cleanly, and each is a thread a connection.
"""

from __future__ import annotations

import contextlib
import queue
import resource
import selectors
import socket
import ssl
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from tamebpf.common.logs import log

HEAD_TIMEOUT_S = 10.0  # from accept to a complete request head, TLS handshake included
WRITE_TIMEOUT_S = 10.0  # for the answer to be taken by the client
MAX_HEAD = 16384  # bytes of request line and headers (an Authorization header fits)
FD_RESERVE = 128  # descriptors kept for the rest of export (maps, path memory, logs)
WORKERS = 2
SWEEP_S = 0.25  # how often deadlines are looked at
REFUSED_LOG_S = 60.0  # at most one line a minute about refused connections

App = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
REASONS = {400: "Bad Request", 405: "Method Not Allowed", 408: "Request Timeout",
           431: "Request Header Fields Too Large", 500: "Internal Server Error"}


@dataclass
class _Conn:
    sock: socket.socket
    peer: tuple[Any, ...]
    deadline: float
    handshaking: bool = False
    head: bytearray = field(default_factory=bytearray)
    out: memoryview | None = None  # the answer, once the worker made it
    working: bool = False


def connection_limit(wanted: int) -> int:
    """At most `wanted` connections, and never so many that export runs
    out of descriptors: the soft limit is raised to the hard one (up to
    what `wanted` needs) first."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = wanted + FD_RESERVE
    if soft < need and (hard == resource.RLIM_INFINITY or soft < hard):
        new = need if hard == resource.RLIM_INFINITY else min(need, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
            soft = new
    return max(1, min(wanted, soft - FD_RESERVE))


class MetricsServer:
    def __init__(self, host: str, port: int, app: App,
                 tls: Callable[[], ssl.SSLContext | None] | None = None,
                 max_connections: int = 1024) -> None:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        self.listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.listener.bind((host, port))
            self.listener.listen(socket.SOMAXCONN)
            self.listener.setblocking(False)
        except BaseException:
            self.listener.close()
            raise
        self.server_address = self.listener.getsockname()
        self.app, self.tls = app, tls
        self.max_connections = connection_limit(max_connections)
        self.conns: dict[int, _Conn] = {}
        self.refused = 0
        self._refused_said = 0.0
        self._done: queue.SimpleQueue[tuple[_Conn, bytes]] = queue.SimpleQueue()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._stop = False
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.listener, selectors.EVENT_READ, None)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="metrics-worker")
        self._thread = threading.Thread(target=self._loop, name="metrics", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        """Stops the loop, waits for the workers, closes every connection."""
        self._stop = True
        self._wake()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._pool.shutdown(wait=True, cancel_futures=True)
        for conn in list(self.conns.values()):
            self._close(conn)
        for s in (self.listener, self._wake_r, self._wake_w):
            s.close()
        self._selector.close()

    # -- the loop -------------------------------------------------------------
    def _loop(self) -> None:
        swept = time.monotonic()
        while not self._stop:
            for key, events in self._selector.select(SWEEP_S):
                if key.fileobj is self.listener:
                    self._accept()
                elif key.fileobj is self._wake_r:
                    self._answers()
                else:
                    self._step(key.data, events)
            now = time.monotonic()
            if now - swept >= SWEEP_S:
                swept = now
                for conn in [c for c in self.conns.values() if c.deadline <= now]:
                    if not conn.working:
                        self._close(conn)  # half a request, or an answer not taken
            self._say_refused(now)

    def _accept(self) -> None:
        while True:
            try:
                sock, peer = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return  # out of descriptors, a connection reset before accept
            if len(self.conns) >= self.max_connections:
                self.refused += 1
                sock.close()
                continue
            sock.setblocking(False)
            conn = _Conn(sock, peer, time.monotonic() + HEAD_TIMEOUT_S)
            context = self.tls() if self.tls is not None else None
            if context is not None:
                try:
                    conn.sock = context.wrap_socket(sock, server_side=True,
                                                    do_handshake_on_connect=False)
                except (ssl.SSLError, OSError):
                    sock.close()
                    continue
                conn.handshaking = True
            self.conns[conn.sock.fileno()] = conn
            self._selector.register(conn.sock, selectors.EVENT_READ, conn)

    def _step(self, conn: _Conn, events: int) -> None:
        try:
            if conn.handshaking:
                self._handshake(conn)
            elif conn.out is not None:
                self._write(conn)
            else:
                self._read(conn)
        except ssl.SSLWantReadError:
            self._wait_for(conn, selectors.EVENT_READ)
        except ssl.SSLWantWriteError:
            self._wait_for(conn, selectors.EVENT_WRITE)
        except (BlockingIOError, InterruptedError):
            pass
        except (ssl.SSLError, OSError):
            self._close(conn)  # a client gone, a failed handshake: not export's failure

    def _handshake(self, conn: _Conn) -> None:
        assert isinstance(conn.sock, ssl.SSLSocket)
        conn.sock.do_handshake()
        conn.handshaking = False
        self._wait_for(conn, selectors.EVENT_READ)
        self._read(conn)  # the request may have come with the handshake's last flight

    def _read(self, conn: _Conn) -> None:
        while True:
            chunk = conn.sock.recv(MAX_HEAD)
            if not chunk:
                self._close(conn)
                return
            conn.head += chunk
            end = conn.head.find(b"\r\n\r\n")
            if end >= 0:
                self._dispatch(conn, bytes(conn.head[:end]))
                return
            if len(conn.head) > MAX_HEAD:
                self._answer(conn, error_answer(431))
                return

    def _dispatch(self, conn: _Conn, head: bytes) -> None:
        environ = wsgi_environ(head, conn.peer, self.server_address,
                               "https" if isinstance(conn.sock, ssl.SSLSocket) else "http")
        if isinstance(environ, int):
            self._answer(conn, error_answer(environ))
            return
        self._selector.unregister(conn.sock)
        conn.working = True
        self._pool.submit(self._work, conn, environ)

    def _work(self, conn: _Conn, environ: dict[str, Any]) -> None:
        """In a worker: the app's answer, handed back to the loop."""
        try:
            answer = run_app(self.app, environ)
        except Exception:  # the app's own failure: a 500, logged, and export goes on
            log.exception("metrics request %s failed", environ.get("PATH_INFO"))
            answer = error_answer(500)
        self._done.put((conn, answer))
        self._wake()

    def _answers(self) -> None:
        with contextlib.suppress(OSError):
            while self._wake_r.recv(4096):
                pass
        while True:
            try:
                conn, answer = self._done.get_nowait()
            except queue.Empty:
                return
            conn.working = False
            if conn.sock.fileno() < 0:
                continue
            self._selector.register(conn.sock, selectors.EVENT_WRITE, conn)
            self._answer(conn, answer)

    def _answer(self, conn: _Conn, answer: bytes) -> None:
        conn.out = memoryview(answer)
        conn.deadline = time.monotonic() + WRITE_TIMEOUT_S
        self._wait_for(conn, selectors.EVENT_WRITE)
        self._step(conn, selectors.EVENT_WRITE)

    def _write(self, conn: _Conn) -> None:
        assert conn.out is not None
        while conn.out:
            sent = conn.sock.send(conn.out)
            conn.out = conn.out[sent:]
        self._close(conn)

    def _wait_for(self, conn: _Conn, events: int) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self._selector.modify(conn.sock, events, conn)

    def _close(self, conn: _Conn) -> None:
        fd = conn.sock.fileno()
        if fd >= 0:
            self.conns.pop(fd, None)
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(conn.sock)
        conn.sock.close()

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            self._wake_w.send(b"\0")

    def _say_refused(self, now: float) -> None:
        if self.refused and now - self._refused_said >= REFUSED_LOG_S:
            log.warning("metrics server: %d connections refused at its limit of %d open",
                        self.refused, self.max_connections,
                        extra={"event": "connections_refused", "refused": self.refused})
            self._refused_said, self.refused = now, 0


def wsgi_environ(head: bytes, peer: tuple[Any, ...], server: tuple[Any, ...],
                 scheme: str) -> dict[str, Any] | int:
    """The WSGI environ of a request head, or the HTTP status to refuse it
    with (400 malformed, 405 not GET or HEAD)."""
    try:
        lines = head.decode("iso-8859-1").split("\r\n")
        method, target, version = lines[0].split(" ")
    except (UnicodeDecodeError, ValueError):
        return 400
    if not version.startswith("HTTP/1."):
        return 400
    if method not in ("GET", "HEAD"):
        return 405
    path, _, query = target.partition("?")
    environ: dict[str, Any] = {
        "REQUEST_METHOD": method, "PATH_INFO": urllib.parse.unquote(path, "iso-8859-1"),
        "QUERY_STRING": query, "SERVER_PROTOCOL": version, "SCRIPT_NAME": "",
        "SERVER_NAME": str(server[0]), "SERVER_PORT": str(server[1]),
        "REMOTE_ADDR": str(peer[0]), "wsgi.version": (1, 0), "wsgi.url_scheme": scheme,
        "wsgi.input": _NO_BODY, "wsgi.errors": sys.stderr, "wsgi.multithread": True,
        "wsgi.multiprocess": False, "wsgi.run_once": False,
    }
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            return 400
        key = name.upper().replace("-", "_")
        if key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            environ[key] = value.strip()
        else:
            environ[f"HTTP_{key}"] = value.strip()
    return environ


class _NoBody:
    def read(self, *args: object) -> bytes:
        return b""


_NO_BODY = _NoBody()


def run_app(app: App, environ: dict[str, Any]) -> bytes:
    """The app's whole answer as bytes on the wire."""
    started: list[Any] = []

    def start_response(status: str, headers: list[tuple[str, str]],
                       exc_info: Any = None) -> Callable[[bytes], None]:
        started[:] = [status, headers]
        return lambda data: None

    body = b"".join(app(environ, start_response))
    status, headers = started
    if environ["REQUEST_METHOD"] == "HEAD":
        length, body = len(body), b""
    else:
        length = len(body)
    lines = [f"HTTP/1.1 {status}"] + [f"{k}: {v}" for k, v in headers
                                      if k.lower() not in ("content-length", "connection")]
    lines += [f"Content-Length: {length}", "Connection: close"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("iso-8859-1") + body


def error_answer(code: int) -> bytes:
    reason = REASONS.get(code, "Error")
    body = f"{reason}\n".encode()
    return (f"HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body

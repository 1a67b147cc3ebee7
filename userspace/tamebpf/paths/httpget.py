"""One HTTP GET with a deadline for the whole request and a cap on the
answer's size (advise --paths-from asks another node's Prometheus).

urllib's timeout bounds each socket operation, not the request: a server
that sends one byte a second holds it as long as it likes. Here every step
(resolving the name, connecting, the TLS handshake, sending, every read)
gets only what is left of one monotonic deadline, and the answer is read in
chunks, at most `max_bytes` of body. Redirects are not followed: the
request goes to the host the user named and no other.
"""

from __future__ import annotations

import http.client
import io
import json
import socket
import ssl
import time
import urllib.parse

from tamebpf.paths.where import lookup

CHUNK = 65536
HEAD_ROOM = 65536  # the status line and headers, beside the body's max_bytes


class FetchError(OSError):
    """The request failed or broke a limit: the message says which."""


class _Deadline:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        """Seconds left; raises FetchError when there are none."""
        left = self.end - time.monotonic()
        if left <= 0:
            raise FetchError(f"no complete answer within {self.seconds:g} s")
        return left


def get(url: str, deadline_s: float, max_bytes: int) -> bytes:
    """The body of a 200 answer to GET `url` (http or https). Raises
    FetchError for any other answer, an answer over max_bytes, a redirect,
    or a request not done within deadline_s."""
    deadline = _Deadline(deadline_s)
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    # Quoted: no space or line break of the URL's can reach the request line.
    target = urllib.parse.quote((parts.path or "/") + (f"?{parts.query}" if parts.query
                                                         else ""), safe="/?&=%:@+,;!$'()*~")
    try:
        sock = _connect(host, port, deadline)
    except FetchError:
        raise
    except OSError as err:
        raise FetchError(f"cannot connect to {host}:{port}: {err.strerror or err}") from None
    try:
        if parts.scheme == "https":
            sock.settimeout(deadline.left())  # the handshake, as one operation
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
        sock.settimeout(deadline.left())
        sock.sendall(f"GET {target} HTTP/1.1\r\nHost: {parts.netloc.rpartition('@')[2]}\r\n"
                     "Accept: application/json\r\nConnection: close\r\n\r\n".encode("ascii"))
        raw = _read(sock, deadline, max_bytes)
    except FetchError:
        raise
    except TimeoutError:
        raise FetchError(f"no complete answer within {deadline_s:g} s") from None
    except ssl.SSLError as err:
        raise FetchError(f"TLS with {host}:{port} failed: {err.reason or err}") from None
    except OSError as err:
        raise FetchError(f"{host}:{port}: {err.strerror or err}") from None
    finally:
        sock.close()
    return _body(raw, max_bytes)


def _connect(host: str, port: int, deadline: _Deadline) -> socket.socket:
    """A connected socket: the name resolved within the deadline, each
    address tried within it."""
    found = lookup(host, port, deadline.left())
    if found is None:
        raise FetchError(f"{host} not resolved within {deadline.seconds:g} s")
    if isinstance(found, OSError):
        raise FetchError(f"cannot resolve {host}: {found.strerror or found}")
    last: OSError = FetchError(f"{host} has no address")
    for family, kind, proto, _, addr in found:
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(deadline.left())
            sock.connect(addr)
            return sock
        except TimeoutError:
            sock.close()
            raise FetchError(f"no connection to {host}:{port} within "
                             f"{deadline.seconds:g} s") from None
        except OSError as err:
            sock.close()
            last = err
    raise last


def _read(sock: socket.socket, deadline: _Deadline, max_bytes: int) -> bytes:
    """Everything the server sends until it closes, or until the headers
    and the Content-Length they announce are in."""
    buf = bytearray()
    need: int | None = None
    while need is None or len(buf) < need:
        sock.settimeout(deadline.left())
        chunk = sock.recv(CHUNK)
        if not chunk:
            break
        buf += chunk
        if len(buf) > max_bytes + HEAD_ROOM:
            raise FetchError(f"the answer is larger than {max_bytes // 2**20} MiB: ignored")
        if need is None:
            need = _whole_length(buf)
    return bytes(buf)


def _whole_length(buf: bytearray) -> int | None:
    """Headers plus body, once the headers are in and give Content-Length."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return None
    for line in bytes(buf[:end]).split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length" and value.strip().isdigit():
            return end + 4 + int(value.strip())
    return None


class _Received:
    """What http.client's parser reads an answer from: the bytes in hand."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw

    def makefile(self, mode: str) -> io.BytesIO:
        return io.BytesIO(self.raw)


def _body(raw: bytes, max_bytes: int) -> bytes:
    """The body of a 200 answer; raw is bounded by _read, so read whole."""
    resp = http.client.HTTPResponse(_Received(raw))  # type: ignore[arg-type]
    try:
        resp.begin()
        length = resp.getheader("Content-Length")
        if length is not None and length.strip().isdigit() and int(length) > max_bytes:
            raise FetchError(f"the answer is larger than {max_bytes // 2**20} MiB: ignored")
        body = resp.read()
    except http.client.IncompleteRead:
        raise FetchError("the answer was cut short") from None
    except http.client.HTTPException as err:
        raise FetchError(f"not an HTTP answer ({type(err).__name__})") from None
    if len(body) > max_bytes:
        raise FetchError(f"the answer is larger than {max_bytes // 2**20} MiB: ignored")
    if 300 <= resp.status < 400:
        raise FetchError(f"answered {resp.status} {resp.reason}, a redirect to "
                         f"{resp.getheader('Location', '?')!r}: not followed")
    if resp.status != 200:
        raise FetchError(f"answered {resp.status} {resp.reason}" + _error_text(body))
    return body


def _error_text(body: bytes) -> str:
    """Prometheus's own reason, as its error answers carry it (JSON); an
    error page of something else is not worth a line."""
    try:
        error = json.loads(body).get("error")
    except (ValueError, RecursionError, AttributeError):
        return ""
    return f": {str(error)[:200]}" if error else ""

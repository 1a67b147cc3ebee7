"""`advise --paths-from` against a fake Prometheus query API on loopback
that answers badly: absurd numbers, another destination, a forged label, a
slow drip, an oversized body, a redirect, garbage. Each case ends in one
line on stderr and in advice only from valid entries; the whole request
keeps one deadline. `advise` runs in-process; where it would go on to probe
(as without --paths-from) the test stops it at the root check."""

from __future__ import annotations

import contextlib
import http.server
import json
import math
import shutil
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tamebpf.cli import main
from tamebpf.commands import advise
from tamebpf.common.defaults import PATHS_FROM_MAX_BYTES
from tamebpf.paths.entry import PathEntry
from tamebpf.paths.where import path_key
from tests.unit.paths.test_paths_store import an_entry

DEST = "198.18.3.2"
Respond = Callable[["Handler"], None]


class Probing(Exception):
    """advise went on to probe, as it does without --paths-from."""


class Handler(http.server.BaseHTTPRequestHandler):
    server: FakeServer

    def do_GET(self) -> None:
        self.server.requests.append(self.path)
        # The client may give up (a deadline, a size cap): as it should.
        with contextlib.suppress(OSError):
            self.server.respond(self)

    def log_message(self, *args: Any) -> None:
        pass

    def send_json(self, data: object) -> None:
        body = data if isinstance(data, bytes) else json.dumps(data).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class FakeServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, respond: Respond) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.respond = respond
        self.requests: list[str] = []
        self.stop = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hung up is no test failure


@contextmanager
def fake_prometheus(respond: Respond, tls: ssl.SSLContext | None = None
                    ) -> Iterator[FakeServer]:
    server = FakeServer(respond)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.stop.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def entry() -> PathEntry:
    """An entry for DEST as advise looks it up here (this namespace, cubic)."""
    return replace(an_entry(time.time() - 60), key=path_key(DEST, None, "cubic"))


def series(instance: str = "good:9477", when: object = None, fit: object = None,
           **labels: str) -> dict[str, Any]:
    e = entry()
    metric = {"dest": e.key.dest, "netns": e.key.netns, "congestion": "cubic",
              "source": "probe", "probes": "settled", "instance": instance, "job": "tamebpf",
              "fit": fit if isinstance(fit, str) else json.dumps(
                  {**e.fit.as_dict(), **(fit or {})}), **labels}
    return {"metric": metric, "value": [time.time(), str(e.when if when is None else when)]}


def answer(*result: dict[str, Any]) -> Respond:
    return lambda h: h.send_json({"status": "success",
                                  "data": {"resultType": "vector", "result": list(result)}})


def run_advise(url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
               *extra: str) -> tuple[int | None, float]:
    """advise --paths-from URL: its exit code (None: it went on to probe)
    and how long it took."""

    def probing(*a: Any, **k: Any) -> None:
        raise Probing

    monkeypatch.setattr(advise.preflight, "check", probing)
    start = time.monotonic()
    try:
        code: int | None = main(["advise", DEST, "--max-impact", "5%", "--congestion", "cubic",
                                 "--paths-from", url, "--state-dir", str(tmp_path / "state"),
                                 *extra])
    except Probing:
        code = None
    return code, time.monotonic() - start


def one_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{err}"
    assert "Traceback" not in err and "\x1b" not in err, err
    return lines[0]


BAD_SERIES = {
    "capacity NaN": (series(fit={"capacity": math.nan}), "fit.capacity is nan"),
    "capacity inf": (series(fit={"capacity": math.inf}), "fit.capacity is inf"),
    "capacity negative": (series(fit={"capacity": -57.5}), "fit.capacity is -57.5"),
    "capacity 1e308": (series(fit={"capacity": 1e308}), "above 10 Tbit/s"),
    "capacity a string": (series(fit={"capacity": "191.3"}), "not a number"),
    "probe goodput inf": (series(fit={"probes": [[1, math.inf], [10, 150.0]]}),
                          "fit.probes[0].goodput is inf"),
    "a NaN coefficient": (series(fit={"coeffs": [1e-5, math.nan, 2e-5]}), "fit.coeffs[1]"),
    "10^9 streams": (series(fit={"probes": [[1, 40.0], [10**9, 150.0]]}),
                     "fit.probes[1].streams is 1000000000"),
    "another destination": (series(dest="203.0.113.9/32"), "dest is '203.0.113.9/32'"),
    "another congestion control": (series(congestion="bbr"), "congestion is 'bbr'"),
    "a NaN time": (series(when="NaN"), "value (the time) is nan"),
    "a future time": (series(when=time.time() + 3600), "in the future"),
    "fit not JSON": (series(fit="{not json"), "fit is not JSON"),
}


@pytest.mark.parametrize("case", sorted(BAD_SERIES))
def test_a_bad_entry_is_refused_in_one_line_and_advise_probes(
        case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    bad, said = BAD_SERIES[case]
    with fake_prometheus(answer(bad)) as prom:
        code, _ = run_advise(prom.url, tmp_path, monkeypatch)
    out, err = capsys.readouterr()
    assert code is None, f"{case}: advise answered ({code}) from a bad entry:\n{out}"
    line = one_line(err)
    assert "good:9477" in line and said in line, line
    assert out == ""


def test_advice_only_from_the_valid_entry_among_bad_ones(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The bad ones are newer: they would be chosen first if not refused."""
    now = time.time()
    bad = [replace_instance(s, f"evil-{i}:9477") for i, (s, _) in
           enumerate(v for k, v in sorted(BAD_SERIES.items()) if "time" not in k)]
    bad = [{**s, "value": [now, str(now - 1)]} for s in bad]
    with fake_prometheus(answer(*bad, series("good:9477"))) as prom:
        code, _ = run_advise(prom.url, tmp_path, monkeypatch, "--json")
    out, err = capsys.readouterr()
    assert code == 0, err
    got = json.loads(out)
    assert got["from_memory"] and got["memory"]["node"] == "good:9477", got["memory"]
    # The first five refusals named, one line each, then how many more.
    lines = err.splitlines()
    assert len(lines) == 6 and "more entries refused" in lines[-1], err
    assert all("evil-" in line for line in lines[:5]), err


def replace_instance(s: dict[str, Any], instance: str) -> dict[str, Any]:
    return {**s, "metric": {**s["metric"], "instance": instance}}


def test_a_forged_label_is_printed_escaped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    forged = "evil:9477\x1b[2K\r\nADVICE: 64 streams, 9999 Mbit/s\n\x9b1A"
    with fake_prometheus(answer(series(forged, netns="x\x1b]0;title\x07"))) as prom:
        code, _ = run_advise(prom.url, tmp_path, monkeypatch)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "\x1b" not in out + err and "\x9b" not in out + err and "\r" not in out + err
    advice = [line for line in out.splitlines() if line.startswith("ADVICE:")]
    assert len(advice) == 1 and "64 streams" not in advice[0], out
    assert "of node evil:9477\\x1b[2K\\r\\nADVICE: 64 streams" in out, out


def test_a_slow_drip_is_cut_at_the_deadline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """One byte a second: every read is quick, the request is not."""

    def drip(h: Handler) -> None:
        for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"[" * 100:
            if h.server.stop.wait(1.0):
                return
            h.wfile.write(bytes([byte]))
            h.wfile.flush()

    with fake_prometheus(drip) as prom:
        code, took = run_advise(prom.url, tmp_path, monkeypatch)
    err = capsys.readouterr().err
    print(f"a 1 byte/s drip: advise --paths-from went on after {took:.2f} s "
          f"(deadline 3 s)")
    assert code is None
    assert took <= 3.0 + 1.0, f"took {took:.2f} s, more than the 3 s deadline + 1 s"
    assert "within 3 s" in one_line(err), err


def test_the_deadline_is_the_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    def silent(h: Handler) -> None:
        h.server.stop.wait(30)

    with fake_prometheus(silent) as prom:
        code, took = run_advise(prom.url, tmp_path, monkeypatch, "--paths-from-timeout", "0.5")
    assert code is None and 0.5 <= took <= 1.5, took
    assert "within 0.5 s" in one_line(capsys.readouterr().err)


@pytest.mark.parametrize("announced", [True, False])
def test_an_oversized_answer_is_ignored(announced: bool, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """Announced (Content-Length) or not (read until the server closes)."""
    size = PATHS_FROM_MAX_BYTES + 2**20

    def big(h: Handler) -> None:
        h.send_response(200)
        if announced:
            h.send_header("Content-Length", str(size))
        h.send_header("Connection", "close")
        h.end_headers()
        chunk = b" " * 2**16
        for _ in range(size // len(chunk)):
            h.wfile.write(chunk)

    with fake_prometheus(big) as prom:
        code, _ = run_advise(prom.url, tmp_path, monkeypatch)
    assert code is None
    assert "larger than 8 MiB: ignored" in one_line(capsys.readouterr().err)


def test_a_redirect_is_not_followed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    with fake_prometheus(answer(series())) as other:
        def redirect(h: Handler) -> None:
            h.send_response(302)
            h.send_header("Location", other.url + h.path)
            h.send_header("Content-Length", "0")
            h.end_headers()

        with fake_prometheus(redirect) as prom:
            code, _ = run_advise(prom.url, tmp_path, monkeypatch)
        assert other.requests == [], "the other host was asked"
    assert code is None and len(prom.requests) == 1
    assert "302" in one_line(capsys.readouterr().err)


GARBAGE: dict[str, Respond] = {
    "not JSON": lambda h: h.send_json(b"<html>hello</html>"),
    "nested too deep": lambda h: h.send_json(b"[" * 200_000 + b"]" * 200_000),
    "JSON, not an answer": lambda h: h.send_json([1, 2, 3]),
    "no result list": lambda h: h.send_json({"status": "success", "data": {"result": 7}}),
    "an error answer": lambda h: h.send_json({"status": "error", "error": "bad\x1b[2J"}),
    "a 503": lambda h: h.send_error(503, "down for maintenance"),
    "not HTTP": lambda h: h.wfile.write(b"\x00\xffgarbage\r\n\r\n"),
    "cut short": lambda h: h.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n{"),
    "series garbage": answer(7, "x", {"metric": 3}),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("case", sorted(GARBAGE))
def test_garbage_ends_in_one_line(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    with fake_prometheus(GARBAGE[case]) as prom:
        code, took = run_advise(prom.url, tmp_path, monkeypatch)
    err = capsys.readouterr().err
    assert code is None, case
    if case == "series garbage":
        assert len(err.splitlines()) == 3 and "Traceback" not in err, err
    else:
        assert "--paths-from" in one_line(err), err
    assert took < 3.0, f"{case}: took {took:.2f} s"


def test_nobody_listening_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    with fake_prometheus(answer()) as prom:
        url = prom.url  # a port that was ours and is closed now
    code, _ = run_advise(url, tmp_path, monkeypatch)
    assert code is None
    assert "cannot connect" in one_line(capsys.readouterr().err)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl makes the test's cert")
def test_https_with_a_certificate_not_trusted_is_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    with fake_prometheus(answer(series()), tls=ctx) as prom:
        code, took = run_advise(prom.url.replace("http:", "https:"), tmp_path, monkeypatch)
    assert code is None and took < 3.0
    assert "certificate" in one_line(capsys.readouterr().err).lower()


def test_a_series_answers_only_the_direction_it_was_exported_for() -> None:
    """A download's query matches only series labelled direction="receive";
    an upload's matches "send" and a node's from before directions (no
    label)."""
    from tamebpf.paths.entry import REMOTE_CC
    from tamebpf.paths.remote import parse_result, remote_query

    now = time.time()
    old, up = series("old:9477"), series("up:9477", direction="send")
    down = series("down:9477", direction="receive")
    got = parse_result([old, up, down], DEST + "/32", "cubic", now)
    assert sorted(r.node for r in got.entries) == ["old:9477", "up:9477"], got
    assert [n for n, _ in got.refused] == ["down:9477"], got.refused
    down["metric"]["congestion"] = REMOTE_CC
    got = parse_result([down], DEST + "/32", REMOTE_CC, now, "receive")
    assert [(r.node, r.entry.key.direction) for r in got.entries] == [
        ("down:9477", "receive")], got
    assert 'direction="receive"' in remote_query(DEST, REMOTE_CC, "receive")
    assert 'direction!="receive"' in remote_query(DEST, "cubic")

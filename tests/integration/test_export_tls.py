"""`tamebpf export --web-config FILE`: TLS and basic auth, in the Prometheus
exporter toolkit's format. A real Prometheus (Debian package `prometheus`)
scrapes the exporter over TLS with basic auth; a wrong password and no
credentials get 401 with WWW-Authenticate; plain HTTP gets no answer.
The certificate is a fresh self-signed one made with the openssl command."""

from __future__ import annotations

import base64
import contextlib
import http.client
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Iterator

import pytest

from tests.integration.kernel_fixtures import wait_for
from tests.integration.test_export import exporter, loopback_target, prometheus, value

pytestmark = [pytest.mark.root]

USER, PASSWORD = "scraper", "s3cret-for-the-test"


def self_signed(d: str, name: str, cn: str = "127.0.0.1") -> None:
    """NAME.pem and NAME-key.pem in d: a self-signed certificate (for
    127.0.0.1 by default), from the openssl command."""
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                    "-keyout", os.path.join(d, f"{name}-key.pem"), "-out",
                    os.path.join(d, f"{name}.pem"), "-days", "1", "-subj", f"/CN={cn}",
                    "-addext", f"subjectAltName=IP:{cn}" if cn[0].isdigit() else
                    f"subjectAltName=DNS:{cn}"],
                   check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def made_cert() -> Iterator[str]:
    """A directory holding a self-signed certificate for 127.0.0.1 (cert.pem,
    cert-key.pem), made once for this module's tests: each copies it into a
    directory of its own (an RSA key can take openssl seconds to make)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed")
    with tempfile.TemporaryDirectory(prefix="tamebpf-test-tls-cert-") as d:
        self_signed(d, "cert")
        yield d


@contextlib.contextmanager
def web_config(made: str) -> Iterator[tuple[str, str]]:
    """A temporary directory with the certificate `made` holds (made_cert)
    and web.yml naming it (relative paths, as the toolkit reads them) and one
    bcrypt user; yields (web.yml, the certificate)."""
    bcrypt = pytest.importorskip("bcrypt", reason="bcrypt: pip install 'tamebpf[web]'")
    pytest.importorskip("yaml", reason="PyYAML: pip install 'tamebpf[web]'")
    with tempfile.TemporaryDirectory(prefix="tamebpf-test-tls-") as d:
        shutil.copy(os.path.join(made, "cert.pem"), d)
        shutil.copy(os.path.join(made, "cert-key.pem"), os.path.join(d, "key.pem"))
        hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=10)).decode()
        path = os.path.join(d, "web.yml")
        with open(path, "w") as f:
            f.write("tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n"
                    f"basic_auth_users:\n  {USER}: '{hashed}'\n")
        yield path, os.path.join(d, "cert.pem")


def get(netloc: str, cafile: str, auth: tuple[str, str] | None) -> http.client.HTTPResponse:
    ctx = ssl.create_default_context(cafile=cafile)
    conn = http.client.HTTPSConnection(netloc, context=ctx, timeout=10)
    headers = {}
    if auth is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(
            f"{auth[0]}:{auth[1]}".encode()).decode()
    conn.request("GET", "/metrics", headers=headers)
    return conn.getresponse()


def scrape_job(cert: str, password: str) -> str:
    """Prometheus's job settings for the exporter: https, trusting `cert`,
    basic auth as USER with `password`."""
    return ("    scheme: https\n"
            f"    tls_config: {{ca_file: '{cert}'}}\n"
            f"    basic_auth: {{username: {USER}, password: '{password}'}}\n")


def test_prometheus_scrapes_over_tls_with_basic_auth_and_others_are_refused(
        made_cert: str) -> None:
    target = loopback_target()
    start = time.monotonic()
    with web_config(made_cert) as (path, cert), \
            prometheus(target, job_extra=scrape_job(cert, PASSWORD)) as prom, \
            exporter("--web-config", path, listen=target) as (_, url):
        assert url.startswith("https://"), f"the exporter should say it serves https: {url}"
        netloc = urllib.parse.urlparse(url).netloc

        ok = get(netloc, cert, (USER, PASSWORD))
        assert ok.status == 200 and b"tamebpf_" in ok.read(), f"right password: {ok.status}"
        for auth in ((USER, "wrong"), ("nobody", PASSWORD), None):
            r = get(netloc, cert, auth)
            assert r.status == 401, f"credentials {auth}: expected 401, got {r.status}"
            assert r.getheader("WWW-Authenticate", "").startswith("Basic"), r.getheaders()

        # Plain HTTP: the TLS server answers no HTTP at all.
        host, port = netloc.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            try:
                answer = s.recv(4096)
            except (ConnectionResetError, TimeoutError) as err:
                answer = f"<{err.__class__.__name__}>".encode()
        assert not answer.startswith(b"HTTP/"), f"plain HTTP was answered: {answer[:80]!r}"

        wait_for(lambda: value(prom, 'up{job="tamebpf"}') == 1.0, 30,
                 "prometheus to scrape the exporter over TLS with basic auth", step=0.3)
        wait_for(lambda: value(prom, 'tamebpf_up{job="tamebpf"}') == 1.0, 10,
                 "prometheus to store the exporter's tamebpf_up 1")
        print(f"prometheus scraped over TLS + basic auth {time.monotonic() - start:.1f} s "
              "after it started")


def test_prometheus_with_a_wrong_password_is_refused(made_cert: str) -> None:
    target = loopback_target()
    with web_config(made_cert) as (path, cert), \
            prometheus(target, job_extra=scrape_job(cert, "wrong")) as prom, \
            exporter("--web-config", path, listen=target):
        wait_for(lambda: value(prom, 'up{job="tamebpf"}') is not None, 30,
                 "prometheus to try a scrape", step=0.3)
        time.sleep(2)  # a few more scrapes, all of the exporter listening: none may succeed
        assert value(prom, 'up{job="tamebpf"}') == 0.0, "a wrong password was let in"
        assert value(prom, 'max_over_time(up{job="tamebpf"}[1m])') == 0.0


@pytest.mark.parametrize(("text", "named"), [
    ("tls_server_config:\n  cert_file: missing.pem\n  key_file: key.pem\n",
     "tls_server_config.cert_file"),
    ("tls_server_config:\n  cert_file: cert.pem\n", "tls_server_config.key_file"),
    ("tls_server_config:\n  cert_file: key.pem\n  key_file: cert.pem\n", "cert_file/key_file"),
    ("tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n  min_version: TLS9\n",
     "tls_server_config.min_version"),
    ("tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n"
     "  cipher_suites: [TLS_AES_128_GCM_SHA256]\n", "cipher_suites"),
    ("tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n"
     "  client_auth_type: RequireAndVerifyClientCert\n", "tls_server_config.client_ca_file"),
    ("basic_auth_users:\n  alice: plaintext\n", "basic_auth_users.alice"),
    ("http_server_config:\n  http2: false\n", "http_server_config"),
    ("tls_server_config: [\n", "line"),
])
def test_a_bad_web_config_is_one_line_exit_2(text: str, named: str, made_cert: str) -> None:
    with web_config(made_cert) as (good, _):
        bad = os.path.join(os.path.dirname(good), "bad.yml")
        with open(bad, "w") as f:
            f.write(text)
        res = subprocess.run([sys.executable, "-m", "tamebpf", "export", "--listen",
                              "127.0.0.1:0", "--web-config", bad],
                             capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 2, f"{text!r}: exit {res.returncode}: {res.stderr}"
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and bad in lines[0] and named in lines[0], (
        f"{text!r}: expected one line naming {bad} and {named!r}, got {res.stderr!r}")


def test_client_certificates_when_required(made_cert: str) -> None:
    """client_auth_type RequireAndVerifyClientCert: a client without a
    certificate signed by client_ca_file fails the handshake."""
    with web_config(made_cert) as (path, cert):
        d = os.path.dirname(path)
        self_signed(d, "client", "scraper")
        with open(path) as f:
            text = f.read()
        text = text.replace(
            "  key_file: key.pem\n", "  key_file: key.pem\n  client_ca_file: client.pem\n"
            "  client_auth_type: RequireAndVerifyClientCert\n")
        with open(path, "w") as f:
            f.write(text)
        with exporter("--web-config", path) as (_, url):
            netloc = urllib.parse.urlparse(url).netloc
            host, port = netloc.rsplit(":", 1)
            ctx = ssl.create_default_context(cafile=cert)
            with pytest.raises((ssl.SSLError, ConnectionResetError)), \
                    socket.create_connection((host, int(port)), timeout=10) as raw, \
                    ctx.wrap_socket(raw, server_hostname=host) as s:
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
                s.recv(1)  # TLS 1.3 reports the missing certificate here
            ctx.load_cert_chain(os.path.join(d, "client.pem"), os.path.join(d, "client-key.pem"))
            conn = http.client.HTTPSConnection(netloc, context=ctx, timeout=10)
            conn.request("GET", "/metrics", headers={"Authorization": "Basic " + base64.b64encode(
                f"{USER}:{PASSWORD}".encode()).decode()})
            r = conn.getresponse()
            assert r.status == 200, f"with the client certificate: {r.status}"


def test_a_renewed_certificate_is_served_without_a_restart(made_cert: str) -> None:
    with web_config(made_cert) as (path, cert), exporter("--web-config", path) as (_, url):
        netloc = urllib.parse.urlparse(url).netloc
        assert get(netloc, cert, (USER, PASSWORD)).status == 200
        d = os.path.dirname(path)
        old = os.path.join(d, "old.pem")
        shutil.copy(cert, old)
        self_signed(d, "renewed")  # as certbot would: new files moved in place
        os.replace(os.path.join(d, "renewed-key.pem"), os.path.join(d, "key.pem"))
        os.replace(os.path.join(d, "renewed.pem"), cert)
        r = get(netloc, cert, (USER, PASSWORD))
        assert r.status == 200, f"with the renewed certificate: {r.status}"
        with pytest.raises(ssl.SSLCertVerificationError):
            get(netloc, old, (USER, PASSWORD))

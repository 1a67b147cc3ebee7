"""`export --web-config FILE`: TLS and basic auth for the metrics server, read
from a web config file in the format of the Prometheus exporter toolkit
(https://github.com/prometheus/exporter-toolkit/blob/master/docs/web-configuration.md),
so that a site configures tamebpf as it does its other exporters.

What is taken: tls_server_config's cert_file, key_file, client_ca_file,
client_auth_type (NoClientCert, VerifyClientCertIfGiven,
RequireAndVerifyClientCert), min_version and max_version; basic_auth_users
(user: bcrypt hash). Any other field is refused by name rather than
ignored: a security setting that silently does nothing is worse than an
exporter that does not start. Relative paths are read from the config
file's directory, as the toolkit does. Like the toolkit, the file (and the
certificate, key and CA files it names) is read again when it changes, at
the next connection: a renewed certificate or a changed password needs no
restart; a changed file that is bad is logged and the last good one stays.

PyYAML and bcrypt are imported only here, only when --web-config is given
(the `web` extra; Debian's python3-yaml and python3-bcrypt).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import ssl
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from tamebpf.common.errors import TamebpfError, UsageError
from tamebpf.common.logs import log

TLS_FIELDS = {"cert_file", "key_file", "client_ca_file", "client_auth_type", "min_version",
              "max_version"}
TLS_FILES = ("cert_file", "key_file", "client_ca_file")
TOP_FIELDS = {"tls_server_config", "basic_auth_users"}
TLS_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
                "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
# The toolkit's client_auth_type values Python's ssl module can honour:
# it cannot ask for a client certificate without verifying it, so
# RequestClientCert and RequireAnyClientCert are refused.
CLIENT_AUTH = {"NoClientCert": ssl.CERT_NONE, "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
               "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}
BCRYPT_PREFIXES = ("$2a$", "$2b$", "$2y$")
REALM = 'Basic realm="tamebpf"'


class WebConfigError(UsageError):
    """A web config file that cannot be used: one line naming the file and
    the field (exit 2, like any bad input, before anything is loaded)."""

    def __init__(self, path: str, where: str, problem: str) -> None:
        super().__init__(f"--web-config {path}: {where}: {problem}")


@dataclass
class WebConfig:
    """What the metrics server does with each connection and request."""

    path: str
    tls: ssl.SSLContext | None = None
    users: dict[str, bytes] = field(default_factory=dict)  # user -> bcrypt hash
    files: tuple[str, ...] = ()  # the config and the files it names, watched for changes
    stamp: tuple[int, ...] = ()  # their modification times when read
    # sha256 of "user:password" pairs bcrypt has accepted: a scrape a second
    # costs one hash compare, not a bcrypt round (tens of ms at cost 10).
    _good: set[bytes] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def authorized(self, header: str | None) -> bool:
        """Whether an Authorization header passes basic_auth_users (always,
        when there are none)."""
        if not self.users:
            return True
        credentials = basic_credentials(header)
        if credentials is None:
            return False
        user, password = credentials
        key = hashlib.sha256(f"{user}\0{password}".encode()).digest()
        with self._lock:
            if key in self._good:
                return True
        import bcrypt

        # An unknown user costs a bcrypt round too, so that timing does not
        # tell which user names exist.
        hashed = self.users.get(user, DUMMY_HASH)
        try:
            ok = bcrypt.checkpw(password.encode(), hashed) and user in self.users
        except ValueError:
            ok = False
        if ok:
            with self._lock:
                self._good.add(key)
        return ok

    def guard(self, app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
        """The WSGI app behind basic auth: 401 with WWW-Authenticate without it."""
        if not self.users:
            return app

        def guarded(environ: dict[str, Any], start_response: Callable[..., Any]
                    ) -> Iterable[bytes]:
            if self.authorized(environ.get("HTTP_AUTHORIZATION")):
                return app(environ, start_response)
            start_response("401 Unauthorized", [("WWW-Authenticate", REALM),
                                                ("Content-Type", "text/plain")])
            return [b"Unauthorized\n"]

        return guarded

    @property
    def scheme(self) -> str:
        return "https" if self.tls is not None else "http"

    def context(self) -> ssl.SSLContext | None:
        """The TLS context for a new connection, the config read again
        first if it changed (a few stat calls)."""
        self.refresh()
        return self.tls

    def refresh(self) -> None:
        """Reads the config again if it or a file it names changed since it
        was read (called for each new connection; a few stat calls). A bad
        new version is logged once and the last good one stays in force."""
        now = modified(self.files)
        if now == self.stamp:
            return
        try:
            fresh = load_web_config(self.path)
        except TamebpfError as err:
            log.warning("web config not reloaded, the last good one stays: %s", err,
                        extra={"event": "web_config_error"})
            self.stamp = now
            return
        with self._lock:
            self.tls, self.users, self._good = fresh.tls, fresh.users, set()
            self.files, self.stamp = fresh.files, fresh.stamp
        log.info("web config %s reloaded", self.path, extra={"event": "web_config_reloaded"})


def modified(paths: tuple[str, ...]) -> tuple[int, ...]:
    """Modification times (ns) of paths, 0 for one that cannot be read."""
    stamps = []
    for p in paths:
        try:
            stamps.append(os.stat(p).st_mtime_ns)
        except OSError:
            stamps.append(0)
    return tuple(stamps)


# A valid bcrypt hash of a random password, checked against for unknown users.
DUMMY_HASH = b"$2b$10$" + b"N9qo8uLOickgx2ZMRZoMye" + b"IjZAgcfl7p92ldGxad68LJZdL17lhWy"


def basic_credentials(header: str | None) -> tuple[str, str] | None:
    """(user, password) of an `Authorization: Basic ...` header, or None."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(token.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, password = decoded.partition(":")
    return (user, password) if sep else None


def load_web_config(path: str) -> WebConfig:
    """The web config at path, checked whole: TLS context built (certificate
    and key loaded), every hash well formed. WebConfigError otherwise."""
    try:
        import yaml
    except ModuleNotFoundError:
        raise needs_package("PyYAML", "python3-yaml", "pyyaml") from None
    (stamp,) = modified((path,))
    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except OSError as err:
        raise WebConfigError(path, "cannot read it", err.strerror or str(err)) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "YAML"
        raise WebConfigError(path, where, f"not valid YAML ({getattr(err, 'problem', err)})"
                             ) from None
    if doc is None:
        doc = {}
    check_mapping(path, "the file", doc, TOP_FIELDS)
    base = os.path.dirname(os.path.abspath(path))
    tls = doc.get("tls_server_config")
    named = tuple(os.path.join(base, tls[name]) for name in TLS_FILES
                  if isinstance(tls, dict) and isinstance(tls.get(name), str) and tls[name])
    config = WebConfig(path, files=(path, *named))
    config.stamp = (stamp, *modified(named))  # before they are read: a later change wins
    if tls is not None:
        config.tls = tls_context(path, base, tls)
    if doc.get("basic_auth_users") is not None:
        config.users = bcrypt_users(path, doc["basic_auth_users"])
    return config


def needs_package(name: str, debian: str, pip: str) -> TamebpfError:
    return TamebpfError(f"--web-config needs the Python package {name}",
                        f"install it: apt install {debian} (Debian), python3.11 -m pip install "
                        f"{pip} (EL9), or pip install 'tamebpf[web]'")


def check_mapping(path: str, where: str, value: object, known: set[str]) -> None:
    if not isinstance(value, dict):
        raise WebConfigError(path, where, "expected a mapping of fields")
    for key in value:
        if key not in known:
            raise WebConfigError(path, f"{where} field {key!r}" if where != "the file"
                                 else f"field {key!r}",
                                 f"not supported by tamebpf (it takes {', '.join(sorted(known))})")


def text_field(path: str, tls: dict[str, Any], name: str) -> str | None:
    value = tls.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise WebConfigError(path, f"tls_server_config.{name}", "expected a string")
    return value


def tls_context(path: str, base: str, tls: object) -> ssl.SSLContext:
    check_mapping(path, "tls_server_config", tls, TLS_FIELDS)
    assert isinstance(tls, dict)
    files = {name: text_field(path, tls, name) for name in TLS_FILES}
    for name in ("cert_file", "key_file"):
        if files[name] is None:
            raise WebConfigError(path, f"tls_server_config.{name}",
                                 "missing (both cert_file and key_file are needed for TLS)")
    full = {name: os.path.join(base, f) if f is not None else None for name, f in files.items()}
    for name, f in full.items():
        if f is not None and not os.access(f, os.R_OK):
            raise WebConfigError(path, f"tls_server_config.{name}", f"cannot read {f}")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = tls_version(path, tls, "min_version", ssl.TLSVersion.TLSv1_2)
    ctx.maximum_version = tls_version(path, tls, "max_version", ssl.TLSVersion.MAXIMUM_SUPPORTED)
    try:
        ctx.load_cert_chain(str(full["cert_file"]), str(full["key_file"]))
    except (ssl.SSLError, OSError) as err:
        raise WebConfigError(path, "tls_server_config.cert_file/key_file",
                             f"not a certificate and its key ({err.__class__.__name__}: "
                             f"{getattr(err, 'reason', None) or err})") from None
    auth = tls.get("client_auth_type") or "NoClientCert"
    if auth not in CLIENT_AUTH:
        raise WebConfigError(path, "tls_server_config.client_auth_type",
                             f"{auth!r} not supported (tamebpf takes "
                             f"{', '.join(CLIENT_AUTH)})")
    ctx.verify_mode = CLIENT_AUTH[auth]
    if full["client_ca_file"] is not None:
        try:
            ctx.load_verify_locations(cafile=full["client_ca_file"])
        except (ssl.SSLError, OSError) as err:
            raise WebConfigError(path, "tls_server_config.client_ca_file",
                                 f"not a CA certificate ({err})") from None
    elif auth != "NoClientCert":
        raise WebConfigError(path, "tls_server_config.client_ca_file",
                             f"needed with client_auth_type {auth}")
    return ctx


def tls_version(path: str, tls: dict[str, Any], name: str,
                default: ssl.TLSVersion) -> ssl.TLSVersion:
    value = tls.get(name)
    if value is None:
        return default
    if value not in TLS_VERSIONS:
        raise WebConfigError(path, f"tls_server_config.{name}",
                             f"{value!r}: give one of {', '.join(TLS_VERSIONS)}")
    return TLS_VERSIONS[value]


def bcrypt_users(path: str, users: object) -> dict[str, bytes]:
    if not isinstance(users, dict):
        raise WebConfigError(path, "basic_auth_users", "expected a mapping of user: bcrypt hash")
    try:
        import bcrypt  # noqa: F401 - checked now, used per request
    except ModuleNotFoundError:
        raise needs_package("bcrypt", "python3-bcrypt", "bcrypt") from None
    out: dict[str, bytes] = {}
    for user, hashed in users.items():
        if not isinstance(user, str) or not user or ":" in user:
            raise WebConfigError(path, f"basic_auth_users.{user}",
                                 "a user name is a non-empty string without ':'")
        if not isinstance(hashed, str) or not hashed.startswith(BCRYPT_PREFIXES) \
                or len(hashed) != 60:
            raise WebConfigError(path, f"basic_auth_users.{user}",
                                 "not a bcrypt hash (make one with: htpasswd -nBC 10 USER)")
        out[user] = hashed.encode()
    return out

"""tamebpf.exporter.webconfig without a server: the Authorization header, bcrypt
users (a right password, a wrong one, an unknown user) and the WSGI guard."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import pytest

from tamebpf.exporter.webconfig import WebConfigError, basic_credentials, load_web_config

bcrypt = pytest.importorskip("bcrypt", reason="bcrypt: pip install 'tamebpf[web]'")
pytest.importorskip("yaml", reason="PyYAML: pip install 'tamebpf[web]'")


def header(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.mark.parametrize(("value", "expected"), [
    (header("a", "b:c"), ("a", "b:c")),  # a password may hold ':'
    ("basic " + base64.b64encode(b"a:").decode(), ("a", "")),
    (None, None), ("", None), ("Bearer x", None), ("Basic !!!", None),
    ("Basic " + base64.b64encode(b"no-colon").decode(), None),
])
def test_basic_credentials(value: str | None, expected: tuple[str, str] | None) -> None:
    assert basic_credentials(value) == expected, value


@pytest.fixture
def users_file(tmp_path: Path) -> Path:
    hashed = bcrypt.hashpw(b"right", bcrypt.gensalt(rounds=4)).decode()
    path = tmp_path / "web.yml"
    path.write_text(f"basic_auth_users:\n  alice: '{hashed}'\n")
    return path


def test_only_the_right_password_passes(users_file: Path) -> None:
    config = load_web_config(str(users_file))
    assert config.tls is None and config.scheme == "http"
    assert config.authorized(header("alice", "right"))
    assert config.authorized(header("alice", "right")), "a remembered pair passes again"
    for user, password in (("alice", "wrong"), ("bob", "right"), ("alice", "")):
        assert not config.authorized(header(user, password)), (user, password)
    assert not config.authorized(None)


def test_guard_answers_401_with_a_challenge(users_file: Path) -> None:
    config = load_web_config(str(users_file))
    app = config.guard(lambda environ, start: (start("200 OK", []), [b"metrics"])[1])
    seen: list[Any] = []
    body = app({"HTTP_AUTHORIZATION": header("alice", "wrong")},
               lambda status, headers: seen.append((status, dict(headers))))
    assert seen[0][0].startswith("401") and seen[0][1]["WWW-Authenticate"].startswith("Basic")
    assert b"metrics" not in b"".join(body)
    seen.clear()
    body = app({"HTTP_AUTHORIZATION": header("alice", "right")},
               lambda status, headers: seen.append((status, dict(headers))))
    assert seen[0][0] == "200 OK" and b"".join(body) == b"metrics"


def test_an_empty_file_serves_plain_and_open(tmp_path: Path) -> None:
    path = tmp_path / "web.yml"
    path.write_text("")
    config = load_web_config(str(path))
    assert config.tls is None and not config.users and config.authorized(None)


@pytest.mark.parametrize(("text", "named"), [
    ("- a list\n", "the file"),
    ("basic_auth_users: [alice]\n", "basic_auth_users"),
    ("basic_auth_users:\n  'a:b': '$2b$04$" + "x" * 53 + "'\n", "basic_auth_users.a:b"),
    ("tls_server_config:\n  key_file: k.pem\n", "tls_server_config.cert_file"),
])
def test_bad_fields_are_named(tmp_path: Path, text: str, named: str) -> None:
    path = tmp_path / "web.yml"
    path.write_text(text)
    with pytest.raises(WebConfigError, match=f"{path}: {named}"):
        load_web_config(str(path))
    with pytest.raises(WebConfigError, match="cannot read"):
        load_web_config(str(tmp_path / "missing.yml"))


def test_a_changed_file_is_read_again_and_a_bad_one_keeps_the_last(users_file: Path) -> None:
    config = load_web_config(str(users_file))
    assert config.authorized(header("alice", "right"))
    hashed = bcrypt.hashpw(b"new", bcrypt.gensalt(rounds=4)).decode()
    users_file.write_text(f"basic_auth_users:\n  alice: '{hashed}'\n")
    os.utime(users_file, ns=(1, 1))  # a different mtime, however fast the test runs
    config.refresh()
    assert config.authorized(header("alice", "new")), "the new password should pass"
    assert not config.authorized(header("alice", "right")), "the old one was remembered"
    users_file.write_text("basic_auth_users: [broken\n")
    os.utime(users_file, ns=(2, 2))
    config.refresh()
    assert config.authorized(header("alice", "new")), "a bad file should keep the last good one"

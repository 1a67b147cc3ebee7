"""export's node name: --node, else [site] node of the host's settings
file, else the host name; each checked before anything starts, a bad one
one line naming where it came from and exit 2."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from tamebpf import siteconfig
from tamebpf.cli import main
from tamebpf.commands import export
from tamebpf.common.errors import UsageError
from tamebpf.common.values import NODE_MAX, parse_node


@pytest.fixture
def conf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "tamebpf.toml"
    monkeypatch.setenv(siteconfig.CONFIG_ENV, str(path))
    monkeypatch.setattr(siteconfig.socket, "gethostname", lambda: "host-7.example.org")
    return path


@pytest.mark.parametrize("name", ["dtn1", "DTN_1", "host-7.example.org", "a", "n" * NODE_MAX,
                                  "10.0.0.5", "..", "-dtn"])
def test_node_names(name: str) -> None:
    assert parse_node(name, "--node") == name


def test_the_option_then_the_settings_file_then_the_host_name(conf: Path) -> None:
    assert siteconfig.node_name(None) == "host-7.example.org"
    conf.write_text('[site]\nnode = "dtn1"\n')
    assert siteconfig.node_name(None) == "dtn1"
    assert siteconfig.node_name("dtn2") == "dtn2"


def test_a_bad_name_in_the_settings_file_names_the_file(conf: Path) -> None:
    conf.write_text('[site]\nnode = "dtn 1"\n')
    with pytest.raises(UsageError) as err:
        siteconfig.node_name(None)
    assert str(conf) in err.value.message and "[site] node" in err.value.message, err.value
    assert "'dtn 1'" in err.value.message, err.value


def test_a_host_name_that_is_no_node_name_asks_for_one(conf: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(siteconfig.socket, "gethostname", lambda: "x" * 65)
    with pytest.raises(UsageError) as err:
        siteconfig.node_name(None)
    assert "the host name" in err.value.message and "--node NAME" in str(err.value), err.value


@pytest.mark.parametrize(("setting", "host", "says"), [
    ('[site]\nnode = "a/b"\n', "ok", "bad --node ([site] node in "),
    ("", "bad name", "bad --node (the host name) 'bad name': not a node name"),
    ("", "ok", "bad --node 'a:b': not a node name"),
])
def test_refused_before_anything_starts(conf: Path, monkeypatch: pytest.MonkeyPatch,
                                        setting: str, host: str, says: str) -> None:
    conf.write_text(setting)
    monkeypatch.setattr(siteconfig.socket, "gethostname", lambda: host)

    def never(*args: object, **kw: object) -> None:
        raise AssertionError("the flow reader started for a bad node name")

    monkeypatch.setattr(export, "FlowReader", never)
    err = io.StringIO()
    argv = ["export", "--listen", "127.0.0.1:0"] + (["--node", "a:b"] if "'a:b'" in says else [])
    with contextlib.redirect_stderr(err):
        code = main(argv)
    lines = err.getvalue().strip().splitlines()
    assert code == 2, f"expected exit 2, got {code}: {lines}"
    assert len(lines) == 1 and says in lines[0], f"expected one line with {says!r}: {lines}"

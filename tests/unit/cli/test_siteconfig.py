"""The host's settings file (siteconfig.py) and advise's --paths-from
default: the option, then $TAMEBPF_PATHS_FROM, then [advise] paths_from."""

from __future__ import annotations

from pathlib import Path

import pytest

from tamebpf import siteconfig
from tamebpf.commands.advise import PATHS_FROM_ENV, paths_from_default
from tamebpf.common.errors import UsageError


@pytest.fixture
def conf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "tamebpf.toml"
    monkeypatch.setenv(siteconfig.CONFIG_ENV, str(path))
    monkeypatch.delenv(PATHS_FROM_ENV, raising=False)
    return path


def test_no_file_is_no_setting(conf: Path) -> None:
    assert paths_from_default() is None


def test_the_file_then_the_environment(conf: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conf.write_text('[advise]\npaths_from = "http://prom:9090"\n')
    assert paths_from_default() == "http://prom:9090"
    monkeypatch.setenv(PATHS_FROM_ENV, "http://other:9090")
    assert paths_from_default() == "http://other:9090"


@pytest.mark.parametrize(("text", "words"), [
    ("[advise\n", "not valid TOML"),
    ("[watch]\nx = 1\n", "unknown table [watch]"),
    ("[advise]\npaths = 'x'\n", "unknown key(s) paths"),
    ("[advise]\npaths_from = 9090\n", "must be a string"),
])
def test_a_bad_file_is_named(conf: Path, text: str, words: str) -> None:
    conf.write_text(text)
    with pytest.raises(UsageError) as err:
        paths_from_default()
    assert words in err.value.message and str(conf) in err.value.message

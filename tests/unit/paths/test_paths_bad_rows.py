"""Rows of a real paths.db that are no entry (a fit that is not JSON, short
coefficients, bad probes, a NaN or future time, a string where a number
belongs): `paths` and `advise` skip each with one line, never a traceback,
and answer from the sound rows as if the bad ones were not there. The
commands run in-process on a temporary --state-dir."""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tamebpf.cli import main
from tamebpf.commands import advise
from tamebpf.paths.entry import PathEntry
from tamebpf.paths.store import DB_NAME, PathStore
from tamebpf.paths.where import path_key
from tests.unit.paths.test_paths_store import an_entry

DEST = "198.18.3.2"


class Probing(Exception):
    """advise went on to probe: memory had no answer."""


def stop_before_probing(monkeypatch: pytest.MonkeyPatch) -> None:
    def probing(*a: Any, **k: Any) -> None:
        raise Probing

    monkeypatch.setattr(advise.preflight, "check", probing)


def entry(age_s: float, **kw: Any) -> PathEntry:
    return replace(an_entry(time.time() - age_s), key=path_key(DEST, None, "cubic"), **kw)


def fit_with(**change: object) -> str:
    return json.dumps({**entry(0).fit.as_dict(), **change})


# column -> the bad value written into it, and what the line must name
BAD_ROWS: dict[str, tuple[str, object, str]] = {
    "fit not JSON": ("fit", "{not json", "fit is not JSON"),
    "short coefficients": ("fit", fit_with(coeffs=[1e-5, 2e-5]), "fit.coeffs"),
    "bad probes": ("fit", fit_with(probes=[[0, 40.0], ["ten", 150.0]]), "fit.probes[0]"),
    "probes not a list": ("fit", fit_with(probes={"1": 40}), "fit.probes"),
    "NaN time": ("created", "NaN", "when is 'NaN'"),
    "infinite time": ("created", float("inf"), "when is inf"),
    "future time": ("created", time.time() + 7200, "in the future"),
    "string for a number": ("advised_mbps", "lots", "advised_mbps is 'lots'"),
    "string for a count": ("advised_streams", "8 streams", "advised_streams"),
    "unknown source": ("source", "gossip", "source is 'gossip'"),
}


def store_with_bad_row(state: Path, column: str, value: object) -> int:
    """A database with a sound older row and a newer row made bad; the bad
    row's id."""
    store = PathStore(str(state))
    store.put(entry(600, advised_streams=3))
    bad_id = store.put(entry(10, advised_streams=9))
    db = sqlite3.connect(state / DB_NAME)
    with db:
        db.execute(f"UPDATE paths SET {column} = ? WHERE id = ?", (value, bad_id))
    db.close()
    return bad_id


def the_line(err: str, bad_id: int) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, f"expected one line, got:\n{err}"
    assert "Traceback" not in err
    assert f"row {bad_id} skipped" in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("case", sorted(BAD_ROWS))
def test_paths_lists_the_sound_row_and_names_the_bad_one(
        case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    column, value, said = BAD_ROWS[case]
    bad_id = store_with_bad_row(tmp_path, column, value)
    assert main(["paths", "--state-dir", str(tmp_path), "--json"]) == 0
    out, err = capsys.readouterr()
    assert said in the_line(err, bad_id), err
    paths = json.loads(out)["paths"]
    assert [p["advice"]["num_flows"] for p in paths] == [3], paths
    # The table too, and the line again (a new process says it again).
    assert main(["paths", "--state-dir", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    the_line(err, bad_id)
    assert "1 path in" in out, out


@pytest.mark.parametrize("case", sorted(BAD_ROWS))
def test_advise_answers_from_the_sound_row_and_names_the_bad_one(
        case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    column, value, said = BAD_ROWS[case]
    bad_id = store_with_bad_row(tmp_path, column, value)
    stop_before_probing(monkeypatch)
    code = main(["advise", DEST, "--max-impact", "5%", "--congestion", "cubic", "--json",
                 "--state-dir", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert said in the_line(err, bad_id), err
    got = json.loads(out)
    assert got["from_memory"] and got["memory"]["when"] < time.time() - 500, got["memory"]


def test_advise_probes_when_the_only_row_is_bad(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    store = PathStore(str(tmp_path))
    bad_id = store.put(entry(10))
    db = sqlite3.connect(tmp_path / DB_NAME)
    with db:
        db.execute("UPDATE paths SET fit = '[' WHERE id = ?", (bad_id,))
    db.close()
    stop_before_probing(monkeypatch)
    with pytest.raises(Probing):
        main(["advise", DEST, "--max-impact", "5%", "--congestion", "cubic",
              "--state-dir", str(tmp_path)])
    assert "fit is not JSON" in the_line(capsys.readouterr().err, bad_id)


def test_a_rows_labels_are_printed_escaped(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    forged = "ns\x1b[2J\nADVICE: 64 streams"
    PathStore(str(tmp_path)).put(replace(entry(10), key=replace(entry(10).key, netns=forged)))
    assert main(["paths", "--state-dir", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "\x1b" not in out, (out, err)
    assert not any(line.startswith("ADVICE:") for line in out.splitlines()), out
    assert "ns\\x1b[2J\\nADVICE: 64 streams" in out, out

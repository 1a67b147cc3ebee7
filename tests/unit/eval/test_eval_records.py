"""The evaluations' records (tamebpf_eval.records):
read by their suffix, written gzipped."""

from __future__ import annotations

import gzip
import json
import lzma
from pathlib import Path

from tamebpf_eval.records import gz_name, load, read_json, save, write_json


def test_records_land_gzipped_and_read_back(tmp_path: Path) -> None:
    path = str(tmp_path / "eval-x.json.gz")
    save(path, [{"key": "a", "n": 4}])
    with gzip.open(path, "rt") as f:
        assert json.load(f) == {"records": [{"key": "a", "n": 4}]}
    assert load(path) == [{"key": "a", "n": 4}]


def test_a_plain_json_name_is_written_as_json_gz_and_resumes(tmp_path: Path) -> None:
    plain = str(tmp_path / "sub" / "eval-y.json")
    save(plain, [{"key": "b"}])
    assert not Path(plain).exists() and Path(gz_name(plain)).is_file()
    assert load(plain) == [{"key": "b"}]  # a resumed run finds what it saved
    assert load(str(tmp_path / "missing.json.gz")) == []


def test_plain_and_xz_records_are_read(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text('{"records": [1]}')
    with lzma.open(tmp_path / "b.json.xz", "wt") as f:
        f.write('{"records": [2]}')
    assert load(str(tmp_path / "a.json")) == [1]
    assert read_json(str(tmp_path / "b.json.xz")) == {"records": [2]}


def test_the_same_records_give_the_same_bytes(tmp_path: Path) -> None:
    a = write_json(str(tmp_path / "a.json.gz"), {"x": [1, 2]})
    b = write_json(str(tmp_path / "b.json.gz"), {"x": [1, 2]})
    assert Path(a).read_bytes() == Path(b).read_bytes()

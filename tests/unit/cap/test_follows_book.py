"""The follow book (cap/book.py): which caps follow, written at once
by the CLI and the agent, and a damaged file."""

from __future__ import annotations

import json
import multiprocessing
import os
from dataclasses import replace
from pathlib import Path

import pytest

from tamebpf.cap.book import MAX_CHANGES, FollowBook, FollowChange, FollowSpec
from tamebpf.paths.entry import PathKey

KEY = PathKey("198.18.3.2/32", "tb-snd", "cubic")


def spec(cgroup: str = "/dtn", dest: str = "198.18.3.2/32") -> FollowSpec:
    return FollowSpec(cgroup, dest, KEY, 0.3, "198.18.3.2", 1000.0)


def test_put_find_update_remove(tmp_path: Path) -> None:
    book = FollowBook(str(tmp_path / "state"))
    assert book.specs() == [] and book.find("/dtn", "198.18.3.2/32") is None
    book.put(spec())
    book.put(spec("dtn/"))  # the same cap spelled otherwise replaces it
    assert len(book.specs()) == 1
    book.update(spec().ident, lambda s: replace(s, target_mbps=40.0))
    got = book.find("dtn", "198.18.3.2/32")
    assert got is not None and got.target_mbps == 40.0 and got.path == KEY
    assert oct(os.stat(book.path).st_mode & 0o777) == "0o640"
    assert book.remove("/dtn", "198.18.3.2/32") and not book.remove("/dtn", "198.18.3.2/32")
    assert book.specs() == []


def test_a_read_parses_only_a_replaced_file(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """watch reads the book every refresh: the same file is parsed once,
    and a write by another process (a rename) is seen at the next read."""
    book, other = FollowBook(str(tmp_path)), FollowBook(str(tmp_path))
    book.put(spec())
    parses = []
    real = FollowBook._parse

    def counted(self: FollowBook) -> list[FollowSpec]:
        parses.append(1)
        return real(self)
    monkeypatch.setattr(FollowBook, "_parse", counted)
    for _ in range(5):
        assert [s.ident for s in book.specs()] == [spec().ident]
    assert len(parses) == 1
    # another writer's rename, then a hand edit keeping size and inode
    other.put(spec("/other"))
    assert {s.cgroup for s in book.specs()} == {"/dtn", "/other"}
    text = Path(book.path).read_text().replace('"/other"', '"/otheR"')
    with open(book.path, "r+", encoding="utf-8") as f:
        f.write(text)
    os.utime(book.path, ns=(1, 1))
    assert {s.cgroup for s in book.specs()} == {"/dtn", "/otheR"}


def test_changes_are_bounded() -> None:
    s = spec()
    for i in range(3 * MAX_CHANGES):
        s = s.changed(FollowChange(float(i), None, float(i + 1), 2.0, "test"))
    assert len(s.changes) == MAX_CHANGES and s.target_mbps == 3 * MAX_CHANGES
    assert FollowSpec.from_json(json.loads(json.dumps(s.to_json()))) == s


@pytest.mark.parametrize("text", ["{not json", '{"version": 99, "follows": []}',
                                  '{"version": 1, "follows": [{"cgroup": 1}]}', "\x00\xff"])
def test_a_damaged_file_is_one_line_and_empty(tmp_path: Path, text: str,
                                               caplog: pytest.LogCaptureFixture) -> None:
    book = FollowBook(str(tmp_path))
    Path(book.path).write_bytes(text.encode("latin-1"))
    assert book.specs() == []
    assert len([r for r in caplog.records if "cannot be read" in r.getMessage()]) == 1
    book.put(spec())  # the next write replaces it
    assert [s.ident for s in book.specs()] == [spec().ident]


def _writer(directory: str, i: int) -> None:
    book = FollowBook(directory)
    for k in range(20):
        book.put(spec(f"/w{i}-{k}"))


def test_two_writers_at_once_lose_nothing(tmp_path: Path) -> None:
    procs = [multiprocessing.Process(target=_writer, args=(str(tmp_path), i)) for i in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    assert len(FollowBook(str(tmp_path)).specs()) == 40
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".follows-")]

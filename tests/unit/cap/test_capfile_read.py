"""A caps file read whole, once, and only if it held still (cap/readfile.py),
and `cap apply --prune` of a file with no caps (exit 2 unless --allow-empty).
The race against a real rewriting loop is tests/integration/test_cap_file_race.py."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from tamebpf.cap.readfile import WholeFile, read_whole
from tamebpf.common.errors import UsageError
from tests.unit.cli.test_values import assert_usage

CAP = '[[cap]]\ncgroup = "a.slice"\ndest = "192.0.2.0/24"\nmax_streams = 2\n'


def in_thread(fn: object) -> WholeFile:
    """Off the main thread no lease can be had: the settle rule applies."""
    got: list[object] = []
    t = threading.Thread(target=lambda: got.append(_call(fn)))
    t.start()
    t.join(30)
    assert isinstance(got[0], WholeFile), got
    return got[0]


def _call(fn: object) -> object:
    try:
        return fn()  # type: ignore[operator]
    except UsageError as err:
        return err


def test_a_still_file_is_read_at_once(tmp_path: Path) -> None:
    path = tmp_path / "caps.toml"
    path.write_text(CAP)
    t0 = time.monotonic()
    got = read_whole(str(path))
    assert (got.text, got.attempts, got.met_writer) == (CAP, 1, False)
    assert time.monotonic() - t0 < 0.5, "a lease-held read must not wait"
    assert read_whole("/dev/null").text == ""


def test_without_a_lease_a_fresh_file_must_hold_still(tmp_path: Path) -> None:
    path = tmp_path / "caps.toml"
    path.write_text(CAP)
    t0 = time.monotonic()
    got = in_thread(lambda: read_whole(str(path), settle_s=0.4, within_s=2.0))
    waited = time.monotonic() - t0
    assert got.text == CAP and got.met_writer
    assert 0.3 <= waited < 1.5, f"expected to wait for the file to be 0.4 s old, waited {waited}"
    old = time.time() - 10
    os.utime(path, (old, old))  # ctime is now though: a changed file, whatever its mtime says
    t0 = time.monotonic()
    in_thread(lambda: read_whole(str(path), settle_s=0.4, within_s=2.0))
    assert time.monotonic() - t0 >= 0.3, "ctime counts as a change too"


def test_a_file_a_writer_holds_open_is_read_again_then_refused(tmp_path: Path) -> None:
    path = tmp_path / "caps.toml"
    path.write_text(CAP)
    with open(path, "a") as writer:  # an editor mid-save: the lease is refused
        t0 = time.monotonic()
        with pytest.raises(UsageError, match="kept changing") as err:
            read_whole(str(path), within_s=0.3)
        assert 0.25 <= time.monotonic() - t0 < 2.0
        assert "rename it over the old one" in str(err.value)
        writer.write("")
    assert read_whole(str(path)).text == CAP  # closed: read at once


def test_a_rename_over_it_mid_read_is_seen(tmp_path: Path) -> None:
    """The name now points at a newer file: read that one."""
    path = tmp_path / "caps.toml"
    path.write_text(CAP)
    new = tmp_path / "new.toml"
    new.write_text(CAP.replace("2\n", "3\n"))
    os.replace(new, path)
    assert read_whole(str(path)).text.endswith("max_streams = 3\n")


@pytest.mark.parametrize("text", ["", "# all commented out\n"])
def test_prune_with_no_caps_is_refused_unless_allowed(tmp_path: Path, text: str) -> None:
    path = tmp_path / "caps.toml"
    path.write_text(text)
    assert_usage(["cap", "apply", "--prune", str(path)], "--allow-empty")
    assert_usage(["cap", "apply", "--check", "--prune", str(path)], "holds no caps")
    assert_usage(["cap", "apply", "--prune", "/dev/null"], "holds no caps")

"""State files for real (paths/statedir.py): a root `advise --quick`
against a loopback iperf3 server with a link planted at paths.db in a
directory another user owns says one line, still advises, and creates
nothing at the link's target; `paths` refuses in one line; a first write on
a full or a read-only file system (tmpfs mounted here) leaves no database."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tamebpf.paths.store import DB_NAME, PathStore
from tests.integration.kernel_fixtures import free_port, iperf3_available, spawn, stop, wait_for
from tests.unit.paths.test_paths_store import an_entry

pytestmark = [pytest.mark.root]
ROOT = Path(__file__).resolve().parents[2]
OWNER = 65534  # nobody: the state directory's owner, as the exporter's user is


def tamebpf(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tamebpf", *argv], capture_output=True,
                          text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "userspace")})


@pytest.fixture
def linked_state(tmp_path: Path) -> tuple[Path, Path]:
    """DIR (owned by nobody) whose paths.db is a link to SUB/created-by-root."""
    d = tmp_path / "state"
    d.mkdir(mode=0o750)
    os.chown(d, OWNER, OWNER)
    sub = tmp_path / "sub"
    sub.mkdir()
    target = sub / "created-by-root"
    (d / DB_NAME).symlink_to(target)
    return d, target


def advise_quick(state: Path) -> subprocess.CompletedProcess[str]:
    """A root `advise --quick --json` against a loopback iperf3 server of
    our own, with `state` as its state directory."""
    port = free_port()
    server = spawn(["iperf3", "-s", "-p", str(port), "-B", "127.0.0.1"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True,
                                        text=True).stdout.strip() != "", 10, "iperf3 -s")
        # cubic: the host's default may be BBR, which loopback gives no advice for
        return tamebpf("advise", f"127.0.0.1:{port}", "--quick", "--max-impact", "10%",
                       "--congestion", "cubic", "--state-dir", str(state), "--json")
    finally:
        stop(server)


@pytest.mark.skipif(not iperf3_available(), reason="iperf3 not installed")
def test_advise_with_a_link_at_paths_db_advises_and_follows_nothing(
        linked_state: tuple[Path, Path]) -> None:
    d, target = linked_state
    res = advise_quick(d)
    assert res.returncode == 0, f"expected advice despite the link, rc {res.returncode}: " \
        f"{res.stderr}"
    assert '"num_flows"' in res.stdout or '"advice"' in res.stdout, res.stdout[:300]
    off = [line for line in res.stderr.splitlines() if "path memory is off" in line]
    assert len(off) == 1 and "symbolic link" in off[0], f"expected one refusal line: {res.stderr}"
    assert "Traceback" not in res.stderr
    assert not target.exists(), f"{target} was created through the planted link"
    assert sorted(p.name for p in d.iterdir()) == [DB_NAME] and (d / DB_NAME).is_symlink()


def test_paths_says_one_line_for_each_bad_state_dir(linked_state: tuple[Path, Path]) -> None:
    d, target = linked_state
    cmds = [(["paths", "--state-dir", str(d)], 2, "path memory is off"),
            (["paths", "--json", "--state-dir", str(d)], 2, "symbolic link"),
            (["paths", "forget", "--all", "--state-dir", str(d)], 2, "symbolic link"),
            (["paths", "--state-dir", "/etc/passwd"], 2, "not a directory"),
            (["paths", "--state-dir", ""], 2, "empty"),
            (["advise", "127.0.0.1", "--max-impact", "5%", "--max-age", "nan"], 2, "--max-age"),
            (["advise", "127.0.0.1", "--max-impact", "5%", "--max-age", "inf"], 2, "--max-age"),
            (["advise", "127.0.0.1", "--max-impact", "5%", "--max-probe-time", "nan"], 2,
             "--max-probe-time")]
    for argv, code, says in cmds:
        res = tamebpf(*argv)
        lines = res.stderr.strip().splitlines()
        assert res.returncode == code and len(lines) == 1 and says in lines[0], \
            f"{argv}: expected exit {code} and one line with {says!r}, got {res.returncode}: " \
            f"{res.stderr}"
    res = subprocess.run([sys.executable, "-m", "tamebpf", "paths"], capture_output=True,
                         text=True, timeout=60, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT / "userspace"),
                              "TAMEBPF_STATE_DIR": ""})
    assert res.returncode == 2 and "TAMEBPF_STATE_DIR='': empty" in res.stderr, res.stderr
    assert not target.exists()


@contextlib.contextmanager
def mounted_tmpfs(where: Path, *options: str) -> Iterator[Path]:
    """A tmpfs of our own (a unique source name), unmounted on the way out."""
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(("mode=0750", *options)),
                    f"tamebpf-test-{uuid.uuid4().hex[:8]}", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)


@pytest.mark.parametrize("options", [("size=8k",), ("ro",)], ids=["full", "read-only"])
def test_a_failed_first_write_leaves_no_database(tmp_path: Path, options: tuple[str]) -> None:
    with mounted_tmpfs(tmp_path / "fs", *options) as d:
        with pytest.raises(Exception) as err:  # noqa: PT011 - what matters is what is left
            PathStore(str(d)).put(an_entry())
        assert "full" in str(err.value) or "Read-only" in str(err.value), err.value
        assert list(d.iterdir()) == [], f"left behind: {list(d.iterdir())}"
        res = tamebpf("paths", "--state-dir", str(d))
        assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
        assert list(d.iterdir()) == [], "a read created something"

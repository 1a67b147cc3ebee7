"""Root writes no file through a link another user planted at a path the
user named (`run --json=FILE`, `advise --plot FILE`, `export --jsonl
FILE`): a link there before the command is refused (exit 2), and one
swapped in while it runs is not followed: what it writes goes to the file
it opened, and the link's target is untouched. The links are made by
`nobody` in a directory everyone may write, as an attacker on the host
would make them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tamebpf.kernel.cgroups import empty_and_remove
from tests.integration.kernel_fixtures import free_port, iperf3_available, spawn, stop, wait_for
from tests.integration.test_run import run_cgroup

pytestmark = pytest.mark.root
TAMEBPF = [sys.executable, "-m", "tamebpf"]
SECRET = "root's own file\n"


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory anyone may write and rename in (0777, no sticky bit),
    and beside it a root-only file for the links to point at."""
    top = Path(tempfile.mkdtemp(prefix="tamebpf-links-"))
    try:
        top.chmod(0o755)
        (top / "victim").write_text(SECRET)
        (top / "victim").chmod(0o600)
        (top / "shared").mkdir()
        (top / "shared").chmod(0o777)
        yield top / "shared"
    finally:
        shutil.rmtree(top)


def victim(shared: Path) -> str:
    return (shared.parent / "victim").read_text()


def as_nobody(*argv: str) -> None:
    subprocess.run(argv, user="nobody", check=True, timeout=10)


def plant(shared: Path, name: str) -> None:
    as_nobody("ln", "-s", str(shared.parent / "victim"), str(shared / name))


def swap(shared: Path, name: str) -> None:
    """The file root opened moved aside, a link in its place."""
    as_nobody("mv", str(shared / name), str(shared / f"{name}.moved"))
    plant(shared, name)


def test_run_json_refuses_a_planted_link(pins: str, shared: Path) -> None:
    plant(shared, "x.json")
    res = subprocess.run([*TAMEBPF, "run", f"--json={shared / 'x.json'}", "--", "true"],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 2, f"exit {res.returncode}: {res.stderr}"
    assert "symbolic link" in res.stderr, res.stderr
    assert victim(shared) == SECRET, "the link's target was written"


def test_run_json_swapped_during_cmd_goes_to_the_file_it_opened(pins: str,
                                                               shared: Path) -> None:
    go = shared.parent / "go"
    proc = subprocess.Popen([*TAMEBPF, "run", f"--json={shared / 'x.json'}", "--", "sh", "-c",
                             f"echo ready; while [ ! -e {go} ]; do sleep 0.05; done; exit 4"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        assert (shared / "x.json").is_file(), "--json's file not opened before CMD ran"
        swap(shared, "x.json")
        go.touch()
        _, err = proc.communicate(timeout=30)
    finally:
        go.touch()
        stop(proc)  # type: ignore[arg-type]
        empty_and_remove(run_cgroup(proc.pid))  # only if the test failed half-way
    assert proc.returncode == 4, f"exit {proc.returncode}: {err}"
    assert victim(shared) == SECRET, "the summary went through the swapped-in link"
    summary = json.loads((shared / "x.json.moved").read_text())
    assert summary["exit_status"] == 4, summary


def jsonl_exporter(path: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([*TAMEBPF, "export", "--listen", "off", "--no-learn",
                             "--interval", "0.1", "--jsonl", str(path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def test_export_jsonl_refuses_a_planted_link(shared: Path) -> None:
    plant(shared, "flows.jsonl")
    proc = jsonl_exporter(shared / "flows.jsonl")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2, f"exit {proc.returncode}: {err}"
    assert victim(shared) == SECRET, "the link's target was written"


def test_export_jsonl_swapped_while_it_writes_is_not_followed(shared: Path) -> None:
    path = shared / "flows.jsonl"
    proc = jsonl_exporter(path)
    try:
        wait_for(lambda: path.exists() and path.stat().st_size > 0, 20, "the first lines")
        swap(shared, "flows.jsonl")
        moved = shared / "flows.jsonl.moved"
        size = moved.stat().st_size
        wait_for(lambda: moved.stat().st_size > size, 20, "lines after the swap")
    finally:
        stop(proc)  # type: ignore[arg-type]
    assert victim(shared) == SECRET, "lines went through the swapped-in link"
    assert (shared / "flows.jsonl").is_symlink(), "the planted link was replaced"


def test_advise_plot_refuses_a_planted_link(shared: Path) -> None:
    plant(shared, "advice.png")
    res = subprocess.run([*TAMEBPF, "advise", "127.0.0.1:9", "--max-impact", "10%",
                          "--plot", str(shared / "advice.png")],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 2, f"exit {res.returncode}: {res.stderr}"
    assert victim(shared) == SECRET, "the link's target was written"


@pytest.mark.skipif(not iperf3_available(), reason="iperf3 not installed")
def test_advise_plot_swapped_while_it_probes_is_not_followed(shared: Path) -> None:
    port = free_port()
    server = spawn(["iperf3", "-s", "-p", str(port), "-B", "127.0.0.1"])
    try:
        time.sleep(0.3)
        path = shared / "advice.png"
        proc = subprocess.Popen([*TAMEBPF, "advise", f"127.0.0.1:{port}", "--max-impact",
                                 "10%", "--quick", "--fresh", "--congestion", "cubic",
                                 "--plot", str(path)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_for(lambda: path.exists() or proc.poll() is not None, 20, "the plot's file")
            assert proc.poll() is None, f"advise ended first: {proc.communicate()}"
            swap(shared, "advice.png")
            out, err = proc.communicate(timeout=60)
        finally:
            stop(proc)  # type: ignore[arg-type]
    finally:
        stop(server)
    assert proc.returncode == 0, f"exit {proc.returncode}: {err}"
    assert victim(shared) == SECRET, "the plot went through the swapped-in link"
    plot = (shared / "advice.png.moved").read_bytes()
    assert plot[:8] == b"\x89PNG\r\n\x1a\n", "the plot is not in the file advise opened"
    assert os.path.islink(path), "the planted link was replaced"

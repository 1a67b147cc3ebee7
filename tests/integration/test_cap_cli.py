"""`tamebpf cap` as an operator meets it: bad input gets one line, a non-zero
exit and changes nothing; `cap apply` makes a TOML file's caps be in force."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import time

import pytest

from tamebpf.cap.book import FollowBook, FollowSpec
from tamebpf.cli import main
from tamebpf.kernel.cgroups import cgroup2_mount, mounts
from tamebpf.paths import statedir
from tamebpf.paths.entry import PathKey
from tests.integration.kernel_fixtures import cgroup, sh
from tests.integration.unprivileged import run_as_user

pytestmark = pytest.mark.root


def tamebpf(*argv: str, user: str | None = None) -> subprocess.CompletedProcess[str]:
    """The command line, run in this process (the command's own main(), so
    quick) or, as another user, in a new one."""
    if user:
        return run_as_user(*argv, uid=int(user))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse
            code = exc.code if isinstance(exc.code, int) else 2
    return subprocess.CompletedProcess(list(argv), code, out.getvalue(), err.getvalue())


def state(pins: str, cg: str) -> tuple[list[str], str, str]:
    """Everything a cap command of a test on cgroup `cg` could change: pins,
    caps listed, and the programs attached to `cg` (and below) and to the
    cgroup root (a file or --cgroup of "/", ".", "" names it). Not the
    machine's other cgroups: no command of the test can name them, and other
    tests running at the same time attach programs to theirs. The listing
    without live rates (--window 0): they are traffic, not caps, and
    measuring them sleeps half a second a call."""
    listing = tamebpf("cap", "list", "--json", "--window", "0")
    assert listing.returncode == 0, listing.stderr
    names = sorted(os.listdir(pins)) if os.path.isdir(pins) else []
    root = cgroup2_mount()
    assert root, "cgroup v2 not mounted"
    programs = sh("bpftool", "cgroup", "show", root) + sh("bpftool", "cgroup", "tree", cg)
    return names, listing.stdout, programs


def v1_cgroup() -> str | None:
    for point, fstype, _ in mounts():
        if fstype == "cgroup":
            return point
    return None


def assert_refused(res: subprocess.CompletedProcess[str], code: int, says: str) -> None:
    lines = res.stderr.strip().splitlines()
    assert res.returncode == code, f"expected exit {code}, got {res.returncode}: {res.stderr!r}"
    assert len(lines) == 1 and lines[0].startswith("tamebpf: "), (
        f"expected one 'tamebpf: ...' line, got {lines}")
    assert says in lines[0], f"expected {says!r} in {lines[0]!r}"


def bad_inputs(cg: str) -> list[tuple[list[str], int, str]]:
    dest = ["--dest", "198.18.0.0/15"]
    cases = [
        (["set", "--cgroup", cg + "-nope", *dest, "--max-streams", "2"], 2, "no such cgroup"),
        (["set", "--cgroup", cg, "--dest", "198.18.0.1/15", "--max-streams", "2"], 2,
         "did you mean 198.18.0.0/15"),
        (["set", "--cgroup", cg, "--dest", "198.18.0.0/40", "--max-streams", "2"], 2,
         "bad --dest"),
        (["set", "--cgroup", cg, "--dest", "[fd00::/64]:70000", "--max-streams", "2"], 2,
         "port must be"),
        (["set", "--cgroup", cg, *dest, "--max-streams", "0"], 2, "at least 1"),
        (["set", "--cgroup", cg, *dest, "--max-streams", "-3"], 2, "at least 1"),
        (["set", "--cgroup", cg, *dest, "--max-streams", "many"], 2, "whole number"),
        (["set", "--cgroup", cg, *dest, "--auto", "dtn2"], 2, "--auto needs --max-impact"),
        (["rm", "--cgroup", cg, "--dest", "10.0.0.0/8"], 2, "no cap for 10.0.0.0/8"),
    ]
    v1 = v1_cgroup()
    if v1:
        cases.append((["set", "--cgroup", v1, *dest, "--max-streams", "2"], 2, "cgroup v1"))
    return cases


def test_bad_input_gets_one_line_and_changes_nothing(pins: str, cg: str) -> None:
    for argv, code, says in bad_inputs(cg):  # with no cap set: nothing is created
        assert_refused(tamebpf("cap", *argv), code, says)
        assert not os.path.exists(pins), f"{argv} created {pins}"
    ok = tamebpf("cap", "set", "--cgroup", cg, "--dest", "198.18.0.0/15", "--max-streams", "4")
    assert ok.returncode == 0, ok.stderr
    before = state(pins, cg)
    cases = [*bad_inputs(cg), (["set", "--cgroup", cg, "--dest", "198.18.0.0/15",
                                "--max-streams", "9"], 2, "already capped")]
    for argv, code, says in cases:
        assert_refused(tamebpf("cap", *argv), code, says)
        assert state(pins, cg) == before, f"{argv} changed the caps in force"
    assert tamebpf("cap", "rm", "--cgroup", cg, "--dest", "198.18.0.0/15").returncode == 0
    assert not os.path.exists(pins), "last rm left pins"


def test_rm_under_a_held_state_dir_removes_the_cap_and_says_the_book_waits(
        pins: str, cg: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`cap rm` while another writer holds the state directory (export's
    learner, say): the cap leaves the kernel, exit 0, and one warning names
    the holder and says the follow book was not updated (cap/plan.py
    sync_follows), as `cap set` says it."""
    dest = "198.18.0.0/15"
    ok = tamebpf("cap", "set", "--cgroup", cg, "--dest", dest, "--max-streams", "4")
    assert ok.returncode == 0, ok.stderr
    directory = statedir.state_dir()
    book = FollowBook(directory)  # the cap followed its path: rm takes it out of the book
    book.put(FollowSpec(cg, dest, PathKey("198.18.3.2/32", None, "cubic"), 0.05, "198.18.3.2",
                        time.time()))
    monkeypatch.setattr(statedir, "LOCK_WAIT_S", 0.3)
    with statedir.StateDir(directory) as held, held.locked():
        res = tamebpf("cap", "rm", "--cgroup", cg, "--dest", dest)
    assert res.returncode == 0, res.stderr
    said = [line for line in res.stderr.splitlines() if "follow book" in line]
    assert len(said) == 1 and f"PID {os.getpid()}" in said[0], \
        f"expected one warning naming PID {os.getpid()}: {res.stderr!r}"
    assert not os.path.exists(pins), "the cap was not removed"
    assert [spec.cgroup for spec in book.specs()] == [cg], "the book changed under the lock"


def test_not_root_gets_one_clear_line(pins: str, cg: str) -> None:
    for argv in (["list"], ["set", "--cgroup", cg, "--dest", "198.18.0.0/15",
                            "--max-streams", "2"]):
        res = tamebpf("cap", *argv, user="65534")
        assert_refused(res, 1, "needs root")
    assert not os.path.exists(pins)


def test_apply_makes_the_file_be_in_force(pins: str, cg: str, tmp_path: object) -> None:
    path = os.path.join(str(tmp_path), "caps.toml")
    rel = "/" + os.path.basename(cg)

    def write(*caps: tuple[str, str, int]) -> None:
        with open(path, "w") as f:
            for cgroup_path, dest, n in caps:
                f.write(f'[[cap]]\ncgroup = "{cgroup_path}"\ndest = "{dest}"\n'
                        f"max_streams = {n}\n\n")

    def listed() -> list[tuple[str, str, int]]:
        res = tamebpf("cap", "list", "--json", "--window", "0")  # the caps, not their rates
        assert res.returncode == 0, res.stderr
        return sorted((c["cgroup"], c["dest"], c["max_streams"]) for c in json.loads(res.stdout))

    write((rel, "198.18.0.0/15", 4), (cg, "[fd00:7462::/48]:2811", 2))
    res = tamebpf("cap", "apply", path)
    assert res.returncode == 0, res.stderr
    want = [(rel, "198.18.0.0/15", 4), (rel, "[fd00:7462::/48]:2811", 2)]
    assert listed() == sorted(want), f"after apply: expected {want}, got {listed()}"

    res = tamebpf("cap", "apply", path)
    assert res.returncode == 0 and "already" in res.stdout, res.stdout + res.stderr

    write((rel, "198.18.0.0/15", 6), (cg, "[fd00:7462::/48]:2811", 2),
          (rel + "-missing", "10.0.0.0/8", 1))
    before = listed()
    assert_refused(tamebpf("cap", "apply", path), 2, "no such cgroup")
    assert listed() == before, "a refused file changed the caps"

    write((rel, "198.18.0.0/15", 6))
    res = tamebpf("cap", "apply", path)
    assert res.returncode == 0, res.stderr
    want = [(rel, "198.18.0.0/15", 6), (rel, "[fd00:7462::/48]:2811", 2)]
    assert listed() == sorted(want), f"N changed, other cap kept: expected {want}, got {listed()}"
    res = tamebpf("cap", "apply", "--prune", path)
    assert res.returncode == 0, res.stderr
    assert listed() == [(rel, "198.18.0.0/15", 6)], f"after --prune: {listed()}"

    write()
    assert_refused(tamebpf("cap", "apply", "--prune", path), 2, "--allow-empty")
    assert_refused(tamebpf("cap", "apply", "--check", "--prune", path), 2, "holds no caps")
    assert listed() == [(rel, "198.18.0.0/15", 6)], "an empty file pruned caps"
    assert tamebpf("cap", "apply", "--prune", "--allow-empty", path).returncode == 0
    assert not os.path.exists(pins), "pruning every cap left pins"


def test_many_capped_cgroups_are_listed_and_removed(pins: str) -> None:
    """More capped cgroups than `cap list` first makes room for (16)."""
    n = 17
    with contextlib.ExitStack() as stack:
        cgs = [stack.enter_context(cgroup()) for _ in range(n)]
        for i, path in enumerate(cgs):
            res = tamebpf("cap", "set", "--cgroup", path, "--dest", "198.18.0.0/15",
                          "--max-streams", str(i + 1))
            assert res.returncode == 0, res.stderr
        res = tamebpf("cap", "list", "--json", "--window", "0")  # the caps, not their rates
        got = sorted((c["cgroup"], c["max_streams"]) for c in json.loads(res.stdout))
        want = sorted(("/" + os.path.basename(p), i + 1) for i, p in enumerate(cgs))
        assert got == want, f"expected {n} caps {want}, got {got}"
        # Only this test's cgroups: another run's leftovers elsewhere on the
        # machine must not change the count.
        tree = "".join(sh("bpftool", "cgroup", "tree", path) for path in cgs)
        assert tree.count("tb_cap_connect4") == n, f"expected {n} connect4 attachments:\n{tree}"
        for path in cgs:
            assert tamebpf("cap", "rm", "--cgroup", path, "--dest",
                           "198.18.0.0/15").returncode == 0
        assert not os.path.exists(pins), "pins left after removing every cap"
        tree = "".join(sh("bpftool", "cgroup", "tree", path) for path in cgs)
        assert "tb_cap" not in tree, f"programs left attached:\n{tree}"

"""A caps file rewritten in place never lifts the caps (issue 48): 500
`cap apply --prune` runs against a loop that rewrites the file the way
`cat new > caps.toml` does, with one of two versions; after every run the
caps in force are one whole version, never fewer caps, never none.

Each version is large (about 280 kB of comments between its entries), so
`cat` writes it in several pieces and a reader that does not wait for the
writer sees a file cut after one or two entries: valid TOML with fewer caps,
which --prune would apply. The runs are in-process (`cap apply`'s function),
the writer a shell loop of its own (REWRITE); caps go to the test's own pin directory and
cgroup."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import subprocess
import time
from pathlib import Path

import pytest

from tamebpf.cap.table import CapTable
from tamebpf.commands.cap import run_apply
from tamebpf.common.errors import TamebpfError

pytestmark = pytest.mark.root

ROUNDS = 500
# The version the writer copies changes every SWITCH_EVERY rounds: a switch
# costs the kernel a commit (~0.1 s, seconds on a loaded machine), a round
# that finds the caps already as the file says none, and what the race can
# break is the same in both: every round reads a file rewritten in place.
SWITCH_EVERY = 25
# One comment line of ~140 kB, more than cat's 128 kB buffer, between two
# entries: still TOML when the file is cut inside it, and one line, not
# 1,400 short ones, for the TOML parser (each run parses the whole file).
PAD = "#" + "x" * 140_000 + "\n"

# Rewrites the file named second in place, every 10 ms, with whatever the
# file named first holds then (the test renames a version over it).
REWRITE = """
while :; do cat "$1" > "$2"; sleep 0.01; done
"""


def version(cg: str, dests: list[tuple[str, int]]) -> str:
    return PAD.join(f'[[cap]]\ncgroup = "{cg}"\ndest = "{d}"\nmax_streams = {n}\n'
                    for d, n in dests)


def apply_prune(path: Path) -> tuple[int, str]:
    """`tamebpf cap apply --prune PATH`: its exit status and its error line."""
    args = argparse.Namespace(file=str(path), prune=True, allow_empty=False, check=False,
                              json=False, verbose=False)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            return run_apply(args), ""
    except TamebpfError as err:
        return err.exit_code, str(err)


def in_force(table: CapTable) -> frozenset[tuple[str, int]]:
    return frozenset((c.dest, c.max_streams) for c in table.list())


def test_a_file_rewritten_in_place_is_applied_whole_or_not_at_all(
        pins: str, cg: str, tmp_path: Path) -> None:
    a = [("198.18.1.1/32", 1), ("198.18.1.2/32", 2), ("198.18.1.3/32", 3)]
    b = [("198.18.2.1/32", 4), ("198.18.2.2/32", 5), ("198.18.2.3/32", 6)]
    whole = {frozenset(a): "A", frozenset(b): "B"}
    texts = [version(cg, b), version(cg, a)]  # B first: the caps start as A
    source = tmp_path / "source.toml"
    source.write_text(texts[1])
    live = tmp_path / "live.toml"
    live.write_text(texts[1])
    table = CapTable("test")
    assert apply_prune(live) == (0, "")
    assert in_force(table) == frozenset(a)

    # The file is rewritten in place every 10 ms: every rewrite is a moment
    # of a truncated file. The version it is rewritten with alternates every
    # SWITCH_EVERY rounds (a new file renamed over the source: the writer's
    # cat reads one version whole).
    writer = subprocess.Popen(["sh", "-c", REWRITE, "rewrite", str(source), str(live)])
    seen = {"A": 0, "B": 0}
    refused = met_writer = 0
    started = time.monotonic()
    try:
        for i in range(ROUNDS):
            if i % SWITCH_EVERY == 0:
                nxt = tmp_path / "next.toml"
                nxt.write_text(texts[i // SWITCH_EVERY % 2])
                os.replace(nxt, source)
            code, err = apply_prune(live)
            caps = in_force(table)
            assert caps in whole, (
                f"round {i}: exit {code}, caps in force {sorted(caps)} are neither version "
                f"whole ({err})")
            assert code in (0, 2), f"round {i}: exit {code}: {err}"
            if code == 2:
                refused += 1
            seen[whole[caps]] += 1
            met_writer += int(bool(READS.get("met_writer")))
    finally:
        writer.kill()
        writer.wait(timeout=10)
    took = time.monotonic() - started
    print(f"\n{ROUNDS} rounds in {took:.1f} s: versions in force {seen}, {refused} refused, "
          f"{met_writer} reads met the writer")
    assert seen["A"] and seen["B"], f"the loop never switched versions: {seen}"
    assert refused < ROUNDS // 2, f"{refused} of {ROUNDS} runs refused: the reads never settle"


READS: dict[str, int] = {}


@pytest.fixture(autouse=True)
def count_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """How many reads met the writer (capfile_read.WholeFile.met_writer)."""
    from tamebpf.cap import readfile as capfile_read
    from tamebpf.commands import cap

    real = capfile_read.read_whole

    def counted(path: str, *a: float) -> capfile_read.WholeFile:
        READS.clear()
        got = real(path, *a)
        READS["met_writer"] = int(got.met_writer)
        return got
    monkeypatch.setattr(cap, "read_whole", counted)
    monkeypatch.setenv("TAMEBPF_STATE_DIR", os.fspath(Path("/nonexistent-tamebpf-state")))

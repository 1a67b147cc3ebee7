"""`make eval PRESET=NAME` (tamebpf_eval.presets): every preset names a
module that parses its arguments, the records it reads are in the checkout,
`make eval` alone runs the current method, and the list has one line for
each."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from tamebpf_eval.presets import CURRENT, PRESETS, current, listing, load

TOP = Path(__file__).resolve().parents[3]  # the checkout: presets run from there


def test_every_preset_runs_a_module() -> None:
    presets = load()
    assert {"fresh11", "fresh12", "downloads13", "testbed-accuracy", "cap-pace",
            "cap-pace-receive",
            "cap-follow"} <= presets.keys()
    for name, p in presets.items():
        assert importlib.util.find_spec(p.argv([])[2]), name
        assert p.about and "\n" not in p.about, name


def test_the_records_presets_read_are_there_gzipped() -> None:
    for name, p in load().items():
        args = list(p.args)
        read = [args[i + 1] for i, a in enumerate(args) if a in ("--results", "--truth-from")]
        for path in read:
            assert path.endswith(".json.gz"), f"{name}: {path}"
            assert (TOP / path).is_file(), f"{name}: no {path}"
        assert all(not w.endswith(".json") for w in p.writes), name


def test_make_eval_alone_runs_the_newest_fresh_draw() -> None:
    """Of the upload default's draws: a draw of downloads is another question."""
    presets = load()
    draws = [n for n, p in presets.items() if p.module == "fresh_draw" and n.startswith("fresh")]
    newest = max(draws, key=lambda n: int(n.removeprefix("fresh")))
    assert current(presets) == newest == "fresh11"
    assert CURRENT not in presets


def test_extra_arguments_go_last() -> None:
    p = load()["fresh11"]
    assert p.argv(["--report"]) == [sys.executable, "-m", "tamebpf_eval.fresh_draw",
                                    "--draw", "fresh11", "--write", "docs/results/run-fresh11.md",
                                    "--report"]
    assert load()["cap-follow"].argv([])[2] == "tamebpf_bench.follow"


def test_the_list_has_a_line_per_preset() -> None:
    presets = load(PRESETS)
    lines = listing(presets).splitlines()
    assert [ln.split()[0] for ln in lines[:-1]] == list(presets)

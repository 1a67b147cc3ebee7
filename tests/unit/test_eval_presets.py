"""`make eval PRESET=NAME` (tamebpf_eval.presets): every preset names a
module of the package that parses its arguments, and the list has one line
for each."""

from __future__ import annotations

import importlib.util
import sys

from tamebpf_eval.presets import PRESETS, listing, load


def test_every_preset_runs_a_module_of_the_package() -> None:
    presets = load()
    assert {"design", "fresh4", "trust", "settled-design", "convergence"} <= presets.keys()
    for name, p in presets.items():
        assert importlib.util.find_spec(f"tamebpf_eval.{p.module}"), name
        assert p.about and "\n" not in p.about, name
        if p.seed:
            assert any(p.seed[1] == a for a in p.args), f"{name}: seeds a file it does not use"


def test_extra_arguments_go_last() -> None:
    p = load()["fresh4"]
    assert p.argv(["--report"]) == [sys.executable, "-m", "tamebpf_eval.fresh_draw",
                                    "--draw", "fresh4", "--write", "docs/results/run-fresh4.md",
                                    "--report"]


def test_the_list_has_a_line_per_preset() -> None:
    presets = load(PRESETS)
    lines = listing(presets).splitlines()
    assert [ln.split()[0] for ln in lines[:-1]] == list(presets)

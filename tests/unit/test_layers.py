"""The import contract of `make lint` (pyproject.toml, [tool.importlinter])
holds for the tree and fails for an import that crosses a layer the wrong
way: a copy of the package where the pure model imports the kernel layer."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    # lint-imports puts its working directory first on the path: the copy wins.
    return subprocess.run([str(LINT_IMPORTS), "--config", str(REPO / "pyproject.toml"),
                           "--no-cache"], cwd=tree, capture_output=True, text=True, timeout=120)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    if not LINT_IMPORTS.exists():
        pytest.fail(f"{LINT_IMPORTS} missing: run 'make test-deps'")
    for package in ("tamebpf", "tamebpf_eval"):  # the config's root_packages
        shutil.copytree(REPO / "userspace" / package, tmp_path / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def test_the_tree_keeps_every_contract(tree: Path) -> None:
    res = lint_imports(tree)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-500:]
    assert "0 broken" in res.stdout, res.stdout[-1000:]


def test_a_wrong_way_import_breaks_the_contract(tree: Path) -> None:
    fit = tree / "tamebpf" / "model" / "fit.py"
    fit.write_text(fit.read_text() + "\nimport tamebpf.kernel.flows  # noqa: E402,F401\n")
    res = lint_imports(tree)
    assert res.returncode != 0, "the model importing the kernel layer passed the contract"
    assert "BROKEN" in res.stdout and "tamebpf.model.fit -> tamebpf.kernel.flows" in res.stdout, (
        res.stdout[-2000:])

"""The layers contract of `make lint` (pyproject.toml, [tool.importlinter])
holds for the tree, names every module, and fails for an import that
crosses a layer the wrong way: copies of the package where a lower layer
imports a higher one, or one sibling another it must not."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "userspace" / "tamebpf"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    # lint-imports puts its working directory first on the path: the copy wins.
    return subprocess.run([str(LINT_IMPORTS), str(REPO / "pyproject.toml"), "--no-cache"],
                          cwd=tree, capture_output=True, text=True, timeout=120)


def layers_contract() -> dict[str, object]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = [c for c in config["contracts"] if c["type"] == "layers"]
    assert len(layers) == 1, "the layering is one contract"
    contract: dict[str, object] = layers[0]
    return contract


def declared() -> set[str]:
    """Every module a layer names, relative to the package."""
    layers = layers_contract()["layers"]
    assert isinstance(layers, list)
    return {name.strip() for layer in layers for name in layer.replace(":", "|").split("|")}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    if not LINT_IMPORTS.exists():
        pytest.fail(f"{LINT_IMPORTS} missing: run 'make test-deps'")
    for package in ("tamebpf", "tamebpf_eval", "tamebpf_bench", "tamebpf_testbed"):  # root_packages
        shutil.copytree(REPO / "userspace" / package, tmp_path / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def test_the_tree_keeps_every_contract(tree: Path) -> None:
    res = lint_imports(tree)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-500:]
    assert "0 broken" in res.stdout, res.stdout[-1000:]


def test_the_layers_name_whole_packages_and_leave_none_out() -> None:
    """Every layer names children of tamebpf (packages or top-level
    modules), never a module inside a package, and nothing is exempted:
    the stack is one of whole packages."""
    names = declared()
    assert {n for n in names if "." in n} == set(), "a layer names a module inside a package"
    assert not layers_contract().get("exhaustive_ignores"), "no package may be exempted"
    children = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
                if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()}
    assert children - names == set()
    assert names - children == set(), "a layer names a package that is gone"


# (module that gains the import, the module it imports, what lint-imports says)
WRONG_WAYS = [
    ("model/fit.py", "tamebpf.kernel.flows", "tamebpf.model.fit -> tamebpf.kernel.flows"),
    ("kernel/flows.py", "tamebpf.advise.advisor",
     "tamebpf.kernel.flows -> tamebpf.advise.advisor"),
    ("common/values.py", "tamebpf.options", "tamebpf.common.values -> tamebpf.options"),
    ("estimate/advice.py", "tamebpf.advise.probes",
     "tamebpf.estimate.advice -> tamebpf.advise.probes"),
    # the loops of before: the estimators under path memory and the views,
    # the cap job above the kernel and path memory
    ("estimate/record.py", "tamebpf.paths.recall",
     "tamebpf.estimate.record -> tamebpf.paths.recall"),
    ("paths/recall.py", "tamebpf.advise.advisor",
     "tamebpf.paths.recall -> tamebpf.advise.advisor"),
    ("present/advice.py", "tamebpf.advise.advisor",
     "tamebpf.present.advice -> tamebpf.advise.advisor"),
    ("kernel/flows.py", "tamebpf.cap.view", "tamebpf.kernel.flows -> tamebpf.cap.view"),
    ("exporter/collector.py", "tamebpf.cap.book",
     "tamebpf.exporter.collector -> tamebpf.cap.book"),
    # siblings of one layer that may not import each other
    ("present/flows.py", "tamebpf.kernel.flows", "tamebpf.present.flows -> tamebpf.kernel.flows"),
]


@pytest.mark.parametrize(("importer", "imported", "says"), WRONG_WAYS,
                         ids=[w[0] for w in WRONG_WAYS])
def test_a_wrong_way_import_breaks_the_contract(tree: Path, importer: str, imported: str,
                                                says: str) -> None:
    module = tree / "tamebpf" / importer
    module.write_text(module.read_text() + f"\nimport {imported}  # noqa: E402,F401\n")
    res = lint_imports(tree)
    assert res.returncode != 0, f"{importer} importing {imported} passed the contract"
    assert "BROKEN" in res.stdout and says in res.stdout, res.stdout[-2000:]


def test_a_module_in_no_layer_breaks_the_contract(tree: Path) -> None:
    (tree / "tamebpf" / "stray.py").write_text('"""In no layer."""\n')
    res = lint_imports(tree)
    assert res.returncode != 0, "a module outside every layer passed the contract"
    assert "tamebpf.stray" in res.stdout, res.stdout[-2000:]

"""The packages the packaging tests check, built once a test session:
`make deb` (build/deb/) and `make rpm` (build/rpm/), each run the way a user
runs it, from this checkout.

The builds run side by side, in the background, from the first packaging
test on (conftest.py starts those that the collected tests need: plan()),
so that they are ready, or nearly, when the tests that check them come.
The suite runs one test at a time on two cores, and a build is mostly one
compiler or packaging tool at a time."""

from __future__ import annotations

import functools
import glob
import gzip
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "build"
BUILD_TIMEOUT_S = 600


def run(argv: list[str], timeout: float = 600, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                          **kw)  # type: ignore[call-overload]


def only(pattern: str) -> str:
    found = glob.glob(str(BUILD / pattern))
    assert len(found) == 1, f"{pattern}: {found}"
    return found[0]


class Build:
    """`make -s TARGET` in this checkout, started at most once a session."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.proc: subprocess.Popen[str] | None = None
        self.output: str | None = None  # once it ended

    def start(self) -> None:
        if self.proc is None:
            # Its own process group, so that stop() ends make and all it started.
            self.proc = subprocess.Popen(["make", "-s", "-C", str(REPO), self.target],
                                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, text=True,
                                         start_new_session=True)

    def wait(self) -> None:
        """Starts it if no one did; asserts that it succeeded."""
        self.start()
        assert self.proc is not None
        if self.output is None:
            try:
                self.output, _ = self.proc.communicate(timeout=BUILD_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.stop()
                raise
        assert self.proc.returncode == 0, f"make {self.target} failed:\n{self.output}"

    def stop(self) -> None:
        """Ends a build still running (its tests were skipped, or the session
        was interrupted)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.output, _ = self.proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.output, _ = self.proc.communicate()


DEB, RPM = Build("deb"), Build("rpm")
NEEDED: set[Build] = set()  # by this session's tests (plan())


@functools.cache
def deb() -> str:
    """build/deb/tamebpf_VERSION_ARCH.deb, from `make deb`."""
    DEB.wait()
    return only("deb/tamebpf_*.deb")


@functools.cache
def rpms() -> tuple[str, str]:
    """(the SRPM, the RPM rebuilt from it), from `make rpm`."""
    RPM.wait()
    return only("rpm/SRPMS/tamebpf-*.src.rpm"), only("rpm/RPMS/*/tamebpf-*.rpm")


def plan(modules: Iterable[ModuleType]) -> None:
    """Notes the builds that the tests of modules need: those of the
    functions above that a module imported."""
    for module in modules:
        names = vars(module).values()
        NEEDED.update(b for fn, b in ((deb, DEB), (rpms, RPM)) if any(v is fn for v in names))


def start_needed() -> None:
    for b in NEEDED:
        b.start()


def stop_all() -> None:
    for b in (DEB, RPM):
        b.stop()


def assert_pages_as_made_here(root: Path, tmp: Path) -> None:
    """The man pages and bash completion a package installed under root are
    the ones scripts/gen_man.py makes here with the venv's argparse-manpage
    and shtab (the versions the package's build unpacked from their sdists,
    scripts/man-tools), but for the date in the title line."""
    here = tmp / "made-here"
    res = run([sys.executable, str(REPO / "scripts" / "gen_man.py"), "--man", str(here / "man"),
               "--completion", str(here / "completion")], timeout=120,
              env={**os.environ, "PYTHONPATH": str(REPO / "userspace")})
    assert res.returncode == 0, res.stderr

    def undated(page: str) -> str:
        return re.sub(r'^(\.TH \S+ "1") "[^"]*"', r"\1", page)

    shipped = {p.name.removesuffix(".gz"): p for p in (root / "usr/share/man/man1").iterdir()}
    want = {p.name: p for p in (here / "man").iterdir()}
    assert set(shipped) == set(want), f"pages {sorted(shipped)}, made here {sorted(want)}"
    for name, path in want.items():
        page = gzip.decompress(shipped[name].read_bytes()).decode()
        assert undated(page) == undated(path.read_text()), f"{name} differs from make man's"
    completion = root / "usr/share/bash-completion/completions/tamebpf"
    assert completion.read_text() == (here / "completion" / "tamebpf").read_text(), (
        "the completion differs from make man's")

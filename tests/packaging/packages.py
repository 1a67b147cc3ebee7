"""The packages the packaging tests check, built once a test session:
`make deb` (build/deb/) and `make rpm` (build/rpm/), each run the way a user
runs it, from this checkout."""

from __future__ import annotations

import functools
import glob
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "build"


def run(argv: list[str], timeout: float = 600, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                          **kw)  # type: ignore[call-overload]


def only(pattern: str) -> str:
    found = glob.glob(str(BUILD / pattern))
    assert len(found) == 1, f"{pattern}: {found}"
    return found[0]


@functools.cache
def deb() -> str:
    """build/deb/tamebpf_VERSION_ARCH.deb, from `make deb`."""
    res = run(["make", "-s", "-C", str(REPO), "deb"])
    assert res.returncode == 0, res.stdout + res.stderr
    return only("deb/tamebpf_*.deb")


@functools.cache
def rpms() -> tuple[str, str]:
    """(the SRPM, the RPM rebuilt from it), from `make rpm`."""
    res = run(["make", "-s", "-C", str(REPO), "rpm"])
    assert res.returncode == 0, res.stdout + res.stderr
    return only("rpm/SRPMS/tamebpf-*.src.rpm"), only("rpm/RPMS/*/tamebpf-*.rpm")

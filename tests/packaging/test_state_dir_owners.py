"""One owner per state directory: the exporter (DynamicUser=yes) owns
/var/lib/tamebpf through StateDirectory=; the caps unit (root) only writes
there (ReadWritePaths=). What systemd makes of the two units is reproduced
from the installed units' text in a temporary root
(tests/packaging/unit_state_dirs.py: a dynamic uid, /var/lib/private, the
link, the recursive chown at each start, the read-only file system), then
tamebpf's own state code runs as each unit: the exporter learns paths and
updates follow specs, the caps unit writes follow specs and reads paths,
root's `advise` writes path memory. Each must be able to read and write
what it must, whichever unit starts first, and after the exporter restarts
under a new uid.

With the units before this change (both naming StateDirectory=tamebpf, the
caps unit with no CAP_DAC_OVERRIDE), every order fails: the caps unit's
start takes the directory back for root, 0700, and the running exporter can
no longer write its path memory (checked once by hand on these units)."""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from tamebpf.cap.book import FollowBook, FollowSpec
from tamebpf.paths.entry import PathKey
from tamebpf.paths.store import PathStore
from tests.packaging.unit_state_dirs import DYNAMIC_UIDS, FakeSystemd, directives
from tests.unit.paths.test_paths_store import an_entry

pytestmark = pytest.mark.root
DOCS = Path(__file__).resolve().parents[2] / "docs"
EXPORT, CAPS = "tamebpf-export.service", "tamebpf-caps.service"
STATE = "/var/lib/tamebpf"
UNITS = {name: directives((DOCS / name).read_text()) for name in (EXPORT, CAPS)}
PATH = PathKey("198.51.100.7", "host", "cubic")


@contextlib.contextmanager
def fake_root() -> Iterator[FakeSystemd]:
    """A temporary root that a dynamic uid may traverse, with the state
    directory the packages' postinst/%post make (root's, 0750)."""
    root = Path(tempfile.mkdtemp(prefix="tamebpf-test-statedir-"))
    try:
        root.chmod(0o755)
        systemd = FakeSystemd(root)
        systemd.path(STATE).mkdir(mode=0o750)
        systemd.path("/sys/fs/bpf").mkdir(parents=True)  # the caps unit's other ReadWritePaths=
        try:
            yield systemd
        finally:
            systemd.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def a_spec(cgroup: str) -> FollowSpec:
    return FollowSpec(cgroup=cgroup, dest="198.51.100.7/32", path=PATH, max_impact=0.05,
                      host="198.51.100.7", created=time.time())


class Services:
    """The two units started in `systemd`, and what each does there."""

    def __init__(self, systemd: FakeSystemd) -> None:
        self.systemd = systemd
        self.state = str(systemd.path(STATE))
        self.uids = iter(DYNAMIC_UIDS[::997])
        self.caps_written = 0

    def start(self, name: str) -> None:
        self.systemd.start(UNITS[name], name, next(self.uids))

    def run(self, name: str, job: Callable[[], None]) -> None:
        failure = self.systemd.run_as(UNITS[name], name, job)
        assert failure is None, f"{name} (uid {self.systemd.uids[name]}):\n{failure}"

    def exporter_works(self) -> None:
        """The exporter learns a path, and updates the follow specs the
        caps unit wrote (the follower's write)."""
        def job() -> None:
            PathStore(self.state).put(an_entry())
            book = FollowBook(self.state)
            assert len(book.specs()) == self.caps_written, book.specs()
            for spec in book.specs():
                book.update(spec.ident, lambda s: replace(s, updated=time.time()))
        self.run(EXPORT, job)

    def caps_unit_works(self) -> None:
        """`cap apply` writes a follow spec and reads the path's memory."""
        self.caps_written += 1
        cgroup = f"/transfer-{self.caps_written}.slice"

        def job() -> None:
            FollowBook(self.state).put(a_spec(cgroup))
            PathStore(self.state).newest(PATH, with_capacity=True)
        self.run(CAPS, job)

    def root_advises(self) -> None:
        """An operator's `sudo tamebpf advise`: path memory, as full root."""
        PathStore(self.state).put(an_entry(advised_streams=3))


@pytest.mark.parametrize("first", [EXPORT, CAPS])
def test_both_units_read_and_write_in_either_start_order(first: str) -> None:
    second = CAPS if first == EXPORT else EXPORT
    with fake_root() as systemd:
        units = Services(systemd)
        for name in (first, second):
            units.start(name)
            (units.exporter_works if name == EXPORT else units.caps_unit_works)()
        # Both running: each writes after the other, root in between.
        for step in itertools.islice(itertools.cycle(
                [units.caps_unit_works, units.root_advises, units.exporter_works]), 6):
            step()
        # The exporter restarts under a new dynamic uid; the caps unit reloads.
        units.start(EXPORT)
        units.exporter_works()
        units.start(CAPS)
        units.caps_unit_works()
        units.exporter_works()
        assert len(PathStore(units.state).latest()) == 1
        state = systemd.path(STATE)
        assert state.is_symlink(), "the exporter's StateDirectory= left no link"
        owner = os.stat(state).st_uid
        assert owner == systemd.uids[EXPORT], (owner, systemd.uids)
        strays = [f for f in os.listdir(state) if os.stat(state / f).st_uid != owner]
        assert not strays, f"files not the directory owner's: {strays}"


def test_the_caps_unit_needs_its_file_capabilities() -> None:
    """The check can fail: without CAP_DAC_OVERRIDE and CAP_CHOWN, the caps
    unit cannot write into the exporter's directory."""
    with fake_root() as systemd:
        units = Services(systemd)
        bounding = UNITS[CAPS]["CapabilityBoundingSet"]
        UNITS[CAPS]["CapabilityBoundingSet"] = " ".join(
            c for c in bounding.split() if c not in ("CAP_DAC_OVERRIDE", "CAP_CHOWN"))
        try:
            units.start(EXPORT)
            units.start(CAPS)
            with pytest.raises(AssertionError, match="Permission denied"):
                units.caps_unit_works()
        finally:
            UNITS[CAPS]["CapabilityBoundingSet"] = bounding

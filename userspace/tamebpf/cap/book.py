"""Which caps follow their path, and what following did (docs/paths.md,
"Caps that follow the path").

`cap set --follow` and caps-file entries with `follow = true` write a
FollowSpec here; the agent (`tamebpf export`, cap/follow.py) reads them,
recomputes each cap's target and writes back what it did; `cap list`,
`watch` and the metrics read it. One small JSON file in the state
directory, beside path memory but not in it: path memory is a cache that a
damaged file may lose (paths/store.py), which caps follow is configuration.

Every change is read-modify-write under an flock (of the state directory,
paths/statedir.py: the file is read without following links and only if it
is the directory owner's) and lands with an atomic rename, so `cap set` and
the agent may write at once and a kill -9 leaves the old file or the new one.
A file that cannot be read (or is refused) is reported in one line and
treated as empty; the next write replaces it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from tamebpf.common.logs import log
from tamebpf.paths.entry import PathKey
from tamebpf.paths.statedir import StateDir, make_directory

FOLLOWS_NAME = "follows.json"
VERSION = 1
MAX_CHANGES = 20  # the last changes kept per cap (the log has them all)


@dataclass(frozen=True)
class FollowChange:
    when: float  # unix time
    from_mbps: float | None
    to_mbps: float
    competing_flows: float | None
    why: str


@dataclass(frozen=True)
class FollowSpec:
    """One following cap: which cap (cgroup, dest as `cap list` shows
    them), the path whose memory sets its target, the limit; then the
    agent's state."""

    cgroup: str
    dest: str
    path: PathKey
    max_impact: float
    host: str  # as given to --auto
    created: float
    target_mbps: float | None = None  # the group's target now (None: the cap's own rate)
    updated: float | None = None  # when the agent last read the path
    scout_cookie: int | None = None
    competing_flows: float | None = None
    note: str | None = None  # why the last reading gave no target
    changes: tuple[FollowChange, ...] = field(default=())  # the last MAX_CHANGES
    change_count: int = 0  # all of them
    # The site's Prometheus and this node's name there: the target is the
    # node's share of the site's budget (site/follow.py), not the scout's.
    site: str | None = None
    node: str | None = None

    @property
    def ident(self) -> tuple[str, str]:
        return (normal_cgroup(self.cgroup), self.dest)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["path"] = asdict(self.path)
        return d

    @staticmethod
    def from_json(d: dict[str, Any]) -> FollowSpec:
        d = dict(d)
        d["path"] = PathKey(**d["path"])
        d["changes"] = tuple(FollowChange(**c) for c in d.get("changes", ()))
        return FollowSpec(**d)

    def changed(self, change: FollowChange) -> FollowSpec:
        return replace(self, target_mbps=change.to_mbps,
                       changes=(*self.changes, change)[-MAX_CHANGES:],
                       change_count=self.change_count + 1)


def normal_cgroup(cgroup: str) -> str:
    """'a', '/a/' and '/a' are one cgroup (as `cap list` shows it: '/a')."""
    return "/" + cgroup.strip().strip("/")


# path -> ((inode, mtime, size), its specs): the last parse of each book
_PARSED: dict[str, tuple[tuple[int, int, int], tuple[FollowSpec, ...]]] = {}


class FollowBook:
    """The follow specs in `directory` (the state directory)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.path = os.path.join(directory, FOLLOWS_NAME)

    def specs(self) -> list[FollowSpec]:
        # Parsed again only when the file was replaced: watch and export
        # read it on every refresh, and each write is a rename (new inode).
        try:
            st = os.stat(self.path, follow_symlinks=False)
        except FileNotFoundError:
            return []
        except OSError:
            st = None
        stamp = None if st is None else (st.st_ino, st.st_mtime_ns, st.st_size)
        cached = _PARSED.get(self.path)
        if stamp is not None and cached is not None and cached[0] == stamp:
            return list(cached[1])
        specs = self._parse()
        if stamp is not None:
            _PARSED[self.path] = (stamp, tuple(specs))
        return specs

    def _parse(self) -> list[FollowSpec]:
        try:
            with StateDir(self.directory) as sd:
                fd = sd.open(FOLLOWS_NAME)
            if fd is None:
                return []
            with os.fdopen(fd, encoding="utf-8") as f:
                data = json.load(f)
            if not isinstance(data, dict) or data.get("version") != VERSION:
                raise ValueError(f"not a version {VERSION} follows file")
            specs = [FollowSpec.from_json(d) for d in data["follows"]]
            for spec in specs:
                spec.ident  # noqa: B018 - a cgroup or dest of the wrong type fails here, not later
            return specs
        except FileNotFoundError:
            return []
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as err:
            log.warning("%s cannot be read (%s): no cap follows its path until it is "
                        "written again (cap set --follow, or cap apply)", self.path, err)
            return []

    def find(self, cgroup: str, dest: str) -> FollowSpec | None:
        ident = (normal_cgroup(cgroup), dest)
        return next((s for s in self.specs() if s.ident == ident), None)

    def put(self, spec: FollowSpec) -> None:
        """Add a spec, or replace the one for the same cap."""
        self._change(lambda specs: [s for s in specs if s.ident != spec.ident] + [spec])

    def remove(self, cgroup: str, dest: str) -> bool:
        ident = (normal_cgroup(cgroup), dest)
        gone = False

        def drop(specs: list[FollowSpec]) -> list[FollowSpec]:
            nonlocal gone
            keep = [s for s in specs if s.ident != ident]
            gone = len(keep) != len(specs)
            return keep
        if self._stored():
            self._change(drop)
        return gone

    def _stored(self) -> bool:
        """Whether anything was written: a remove writes no file where none is."""
        return os.path.exists(self.path)

    def update(self, ident: tuple[str, str], fn: Callable[[FollowSpec], FollowSpec]) -> None:
        """The agent's write: `fn` applied to the cap's spec, if it still
        has one (a `cap rm` between the agent's read and write wins)."""
        self._change(lambda specs: [fn(s) if s.ident == ident else s for s in specs])

    def _change(self, fn: Callable[[list[FollowSpec]], list[FollowSpec]]) -> None:
        make_directory(self.directory)
        with StateDir(self.directory) as sd, sd.locked():
            specs = fn(self._parse())  # never the cache: this write must see the last one
            text = json.dumps({"version": VERSION, "follows": [s.to_json() for s in specs]},
                              indent=1, allow_nan=False)
            tmp, fd = sd.create(FOLLOWS_NAME)  # made new, never followed; renamed in
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(text + "\n")
                    f.flush()
                    os.fsync(f.fileno())
                sd.rename(tmp, FOLLOWS_NAME)
                _PARSED.pop(self.path, None)
            except BaseException:
                sd.remove(tmp)
                raise

"""The run's own follow book and, with --no-learn, a path memory it only
reads."""

from __future__ import annotations

import os
from collections.abc import Callable

from tamebpf.cap.book import FollowBook, FollowSpec
from tamebpf.paths.entry import PathEntry, PathKey
from tamebpf.paths.store import PathStore


class MemoryBook(FollowBook):
    """The run's follow spec, in this process only (cap/book.py keeps
    the file that `export`'s follower steps)."""

    def __init__(self) -> None:
        super().__init__(os.devnull)
        self._specs: list[FollowSpec] = []

    def specs(self) -> list[FollowSpec]:
        return list(self._specs)

    def _change(self, fn: Callable[[list[FollowSpec]], list[FollowSpec]]) -> None:
        self._specs = fn(list(self._specs))

    def _stored(self) -> bool:
        # No file, ever: with FollowBook's file check a remove changed
        # nothing, and the run that held its streams at the target kept
        # following (and said so at every step).
        return True


class ReadOnlyStore(PathStore):
    """Path memory read but never written (--no-learn)."""

    def put(self, entry: PathEntry) -> int:
        return 0

    def mark_changed(self, key: PathKey) -> int:
        return 0

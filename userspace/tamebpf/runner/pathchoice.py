"""Which path a run's pace cap follows, and the target it starts from: the
first destination CMD sends to sets the path, path memory's advice for it
the target (unless --rate was given), and the cap follows that path as
`export` makes a `cap set --follow` cap follow."""

from __future__ import annotations

import time
from collections.abc import Sequence

from tamebpf.cap.book import FollowBook, FollowSpec
from tamebpf.cap.follow import Follower
from tamebpf.cap.spec import parse_dest
from tamebpf.cap.table import CapTable
from tamebpf.common.defaults import DEFAULT_RATE_MBPS
from tamebpf.common.logs import log
from tamebpf.common.records import Cap
from tamebpf.common.units import pace_bytes_per_s
from tamebpf.groups.group import Group
from tamebpf.groups.passive_fit import LOSS_BASED
from tamebpf.model import ModelInputError, Settings
from tamebpf.paths.entry import PathKey
from tamebpf.paths.passive import group_key
from tamebpf.paths.recall import recall_curve, usable
from tamebpf.paths.store import PathStore

# Path memory's advice older than this is not the run's start (advise's --max-age).
MEMORY_MAX_AGE_S = 3600.0


class PathChoice:
    def __init__(self, rate_mbps: float | None, settings: Settings, netns: str,
                 store: PathStore, table: CapTable, book: FollowBook,
                 follower: Follower, notes: list[str], follow: bool = True) -> None:
        self.rate_mbps, self.settings, self.netns = rate_mbps, settings, netns
        self.store, self.table, self.book, self.follower = store, table, book, follower
        self.target_mbps = rate_mbps or DEFAULT_RATE_MBPS
        self.start_mbps = self.target_mbps
        self.start_from = "--rate" if rate_mbps else "default rate, no path memory yet"
        self.from_default = not rate_mbps  # neither --rate nor path memory set the target
        # False (run --site): the target is the site's share, not the path's reading.
        self.follow = follow
        self.path: PathKey | None = None  # the path the cap follows
        self.cap: Cap | None = None  # the cap of its address family
        self.host = ""
        self.notes = notes  # the run's, said in its summary

    def choose(self, groups: Sequence[Group], caps: Sequence[Cap]) -> None:
        """The first destination CMD sends to (or receives from): its path
        sets the target and is the one the cap follows."""
        sending = [g for g in groups if g.streams > 0 and g.goodput_bps]
        if not sending:
            return
        g = max(sending, key=lambda g: g.goodput_bps or 0.0)
        key = group_key(g, self.netns)
        if key is None:
            return
        self.path = key
        self.host = g.remote_addr
        cap = next((c for c in caps if parse_dest(c.dest).network.version
                    == parse_dest(key.dest).network.version), None)
        if cap is None:
            return
        if self.rate_mbps is None:
            advised = self.remembered(key)
            if advised is not None:
                self.target_mbps = self.start_mbps = advised
                self.start_from = f"path memory's advice for {g.remote_addr}"
                self.from_default = False
                self.table.set_follow(cap.id, 0, pace_bytes_per_s(advised))
        if not self.follow:
            self.notes.append("the cap follows the site's share (--site), not the path")
            return
        if key.direction == "receive":
            # Following reads the path from one unpaced stream's ACKs; a
            # download's streams are paced by their receive windows, and
            # none is left open to read it.
            self.notes.append("the cap stays at its target: it follows the paths of uploads, "
                              "not of downloads")
            return
        if key.congestion not in LOSS_BASED:
            # The scout is one unpaced stream: one BBR stream takes most of
            # a shared link (cap/plan.follow_path refuses the same).
            self.notes.append(f"held at the target: {key.congestion} is not loss-based, so "
                              "the cap does not follow the path")
            return
        self.cap = cap
        self.host = g.remote_addr
        self.start_following()

    def start_following(self) -> None:
        """Follow once path memory holds the path's capacity, or at once when
        learning: the scout's ACKs then measure it (cap/scoutacks.py).
        Without either, a scout would read nothing the target can use."""
        if self.book.specs() or self.path is None or self.cap is None:
            return
        if self.follower.scout_acks is None and \
                self.store.newest(self.path, with_capacity=True) is None:
            return
        cap = self.cap
        self.book.put(FollowSpec(cap.cgroup, cap.dest, self.path, self.settings.max_impact,
                                 self.host, time.time(), target_mbps=self.target_mbps))
        log.info("run: following %s (%s) from %.1f Mbit/s", self.host, self.path.congestion,
                 self.target_mbps, extra={"event": "run_follow", "dest": self.host})

    def remembered(self, key: PathKey) -> float | None:
        """Path memory's throughput at --max-impact for this path, if fresh."""
        entry = self.store.newest(key)
        if entry is None or usable(entry, time.time(), MEMORY_MAX_AGE_S, True, None):
            return None
        try:
            return recall_curve(entry, self.settings)[1].max_nondisruptive_thru
        except (ModelInputError, ValueError):
            return None

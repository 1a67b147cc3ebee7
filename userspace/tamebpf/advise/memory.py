"""`advise` and path memory: answer from a fresh entry, store every probed
advice (docs/paths.md).

Memory is a cache of measurements: when it cannot be read or written, the
advice is probed (or given) as without it, with one warning line.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import replace

from tamebpf.advise.probes import probe_congestion
from tamebpf.common.defaults import PATHS_FROM_TIMEOUT_S
from tamebpf.common.errors import TamebpfError
from tamebpf.common.logs import log
from tamebpf.common.words import printable
from tamebpf.estimate.record import AdviseResult, Target
from tamebpf.model import ModelInputError, Settings
from tamebpf.paths import remote
from tamebpf.paths.entry import ProbeKind
from tamebpf.paths.passive import transfers
from tamebpf.paths.recall import Recalled, entry_from_advice, recall, usable
from tamebpf.paths.statedir import StateFileRefused
from tamebpf.paths.store import PathStore, state_dir
from tamebpf.paths.valid import Refusal, refusal
from tamebpf.paths.where import path_key

SAY_REFUSED = 5  # refused remote entries named one a line; the rest counted


class AdviceMemory:
    def __init__(self, directory: str | None = None) -> None:
        self.store = PathStore(state_dir(directory))
        self.off: str | None = None  # why a state file was refused (paths/statedir.py)
        self._said_off = False
        # Why our own memory gave lookup no answer, for advise's refusal;
        # changed: its entry was marked changed (a transfer cannot clear it).
        self.no_answer = "has no fresh entry for that path"
        self.changed = False

    def _refused(self, err: StateFileRefused) -> None:
        """Memory is off for this run; said by say_if_off, once."""
        self.off = str(err)

    def say_if_off(self) -> None:
        """One line if a state file was refused: called after the root check,
        so a user without root hears first what stops the probes."""
        if self.off is None:
            try:
                self.store.check()
            except StateFileRefused as err:
                self._refused(err)
            except OSError:
                pass  # not refused, just unreadable: remember() says so if it fails
        if self.off is not None and not self._said_off:
            self._said_off = True
            log.warning("path memory is off: %s", self.off)

    def lookup(self, target: Target, settings: Settings, max_age_s: float, quick: bool,
               link_mbps: float | None, paths_from: str | None = None,
               paths_from_timeout: float = PATHS_FROM_TIMEOUT_S) -> Recalled | None:
        """The remembered advice for this target's path under `settings`,
        or None (nothing fresh and usable: probe). Our own memory first,
        then the entries other nodes exported to the Prometheus at
        `paths_from`, asked within `paths_from_timeout` seconds. Why an
        entry was not used is logged at debug level (--log-level debug)."""
        own = self._own(target, settings, max_age_s, quick, link_mbps)
        if own is not None or paths_from is None:
            return own
        return self._shared(target, settings, max_age_s, quick, link_mbps, paths_from,
                            paths_from_timeout)

    def _shared(self, target: Target, settings: Settings, max_age_s: float, quick: bool,
                link_mbps: float | None, url: str, timeout: float) -> Recalled | None:
        try:
            key = path_key(target.host, target.netns, probe_congestion(target)[0],
                           target.direction)
        except TamebpfError:
            return None
        now = time.time()
        try:
            answer = remote.fetch(url, key.dest, key.congestion, now, timeout, key.direction)
        except (OSError, ValueError) as err:
            log.warning("--paths-from %s not used: %s; probing", printable(url),
                        printable(str(err)))
            return None
        _say_refused(answer.refused, url)
        for r in answer.entries:
            node = printable(r.node)
            why = usable(r.entry, now, max_age_s, quick, link_mbps)
            if why is not None:
                log.debug("%s's entry for %s not used: %s", node, key.dest, why)
                continue
            try:
                got = recall(r.entry, settings)
            except (ModelInputError, ValueError) as err:
                log.debug("%s's fit for %s does not make a curve: %s", node, key.dest, err)
                continue
            # The series carry the fit, not the node's own advice: the entry
            # shows the advice recomputed here.
            a = got.advice
            entry = replace(r.entry, advised_streams=a.num_flows,
                            advised_mbps=a.max_nondisruptive_thru,
                            advised_impact=a.cross_traffic_impact,
                            max_impact=settings.max_impact)
            return replace(got, entry=entry, node=r.node)
        log.debug("no node's entry in %s answers for %s", printable(url), key.dest)
        return None

    def _own(self, target: Target, settings: Settings, max_age_s: float, quick: bool,
             link_mbps: float | None) -> Recalled | None:
        try:
            key = path_key(target.host, target.netns, probe_congestion(target)[0],
                           target.direction)
        except TamebpfError as err:
            log.debug("path memory not asked: %s", err)
            return None  # the probes will say what is wrong, as without memory
        try:
            entry = self.store.newest(key)
        except StateFileRefused as err:
            self._refused(err)
            return None
        except (sqlite3.Error, OSError) as err:
            log.warning("path memory in %s could not be read (%s): probing",
                        self.store.directory, err)
            return None
        why = "nothing remembered" if entry is None else \
            usable(entry, time.time(), max_age_s, quick, link_mbps)
        if entry is None or why is not None:
            log.debug("path memory has no answer for %s: %s", key, why)
            self.no_answer = "has no entry for that path" if entry is None else \
                f"has an entry for that path that cannot answer ({why})"
            self.changed = entry is not None and entry.changed
            return None
        try:
            got = recall(entry, settings)
        except (ModelInputError, ValueError) as err:
            log.debug("the stored fit for %s does not make a curve: %s", key, err)
            self.no_answer = f"has an entry for that path whose fit makes no curve ({err})"
            return None
        if entry.source == "passive":
            try:
                got = replace(got, transfers=transfers(self.store.passive_times(key)))
            except (sqlite3.Error, OSError) as err:
                log.debug("path memory's passive entries for %s: %s", key, err)
        return got

    def remember(self, result: AdviseResult, congestion: str, kind: ProbeKind) -> None:
        """Store a probed advice (a refusal is not stored)."""
        try:
            key = path_key(result.target.host, result.target.netns, congestion,
                           result.target.direction)
        except TamebpfError as err:
            log.warning("the advice was not remembered: %s", err)
            return
        now = time.time()
        entry = entry_from_advice(result, key, now, kind)
        if entry is None or self.off is not None:
            return
        bad = refusal(entry, now)
        if bad is not None:
            log.warning("the advice was not remembered: its entry's %s", bad)
            return
        try:
            self.store.put(entry)
        except StateFileRefused as err:
            self._refused(err)
            self.say_if_off()
        except (sqlite3.Error, OSError) as err:
            log.warning("the advice was not remembered: path memory in %s could not be "
                        "written (%s); give --state-dir or set TAMEBPF_STATE_DIR to a "
                        "writable directory", self.store.directory, err)


def _say_refused(refused: list[tuple[str, Refusal]], url: str) -> None:
    """One line per refused series, the first few; then how many more."""
    for node, why in refused[:SAY_REFUSED]:
        log.warning("--paths-from %s: the entry of node %s refused: %s", printable(url),
                    printable(node), why)
    if len(refused) > SAY_REFUSED:
        log.warning("--paths-from %s: %d more entries refused", printable(url),
                    len(refused) - SAY_REFUSED)

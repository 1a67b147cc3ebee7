"""What a run says at its end: per destination what CMD moved and what the
advice makes of it, what path memory learned, and why not when it did
not (runner/summary.py words it)."""

from __future__ import annotations

import os
import sqlite3
from typing import TYPE_CHECKING, Any

from tamebpf.cap.follow import SETTLE_S, WINDOW_S
from tamebpf.cap.spec import parse_dest
from tamebpf.common.errors import TamebpfError
from tamebpf.groups.passive_fit import LOSS_BASED
from tamebpf.model import ModelInputError
from tamebpf.paths.entry import REMOTE_CC, PathEntry, PathKey
from tamebpf.paths.passive import held_by_its_cap
from tamebpf.paths.recall import recall_curve
from tamebpf.runner.bytecount import Moved
from tamebpf.runner.summary import Destination, Learned, Summary

if TYPE_CHECKING:
    from tamebpf.runner.session import Session


def summary(run: Session, seconds: float, status: int) -> Summary:
    dests = []
    for addr, m in sorted(run.moved.items(), key=lambda kv: -sum(kv[1].sent.values())
                          - sum(kv[1].received.values())):
        sent, received = sum(m.sent.values()), sum(m.received.values())
        if not sent and not received:
            continue
        impact = advised = None
        entry = entry_of(run, addr, m)
        if entry is not None and m.counted > 0:
            try:
                curve, advice = recall_curve(entry, run.opts.settings)
                impact = curve[min(m.counted, len(curve)) - 1].impact
                advised = advice.num_flows
            except (ModelInputError, ValueError, IndexError):
                pass
        dests.append(Destination(addr, sent, received, m.counted, impact, advised))
    learned = []
    for addr, m in run.moved.items():
        entry = entry_of(run, addr, m)
        if entry is not None and entry.source == "passive" and not entry.changed and \
                entry.when >= run.started_wall and run.opts.learn:
            learned.append(Learned(addr, entry.key.congestion, entry.advised_streams,
                                   entry.advised_mbps, entry.capacity_mbps,
                                   entry.capacity_method, entry.key.direction))
    choice = run.choice
    return Summary(
        command=os.path.basename(run.opts.argv[0]), exit_status=status, seconds=seconds,
        destinations=tuple(dests), cap_start_mbps=choice.start_mbps,
        cap_start_from=choice.start_from, cap_end_mbps=choice.target_mbps,
        learning=run.opts.learn, learned=tuple(learned),
        not_learned=None if learned else why_not_learned(run),
        notes=tuple(run.notes) + tuple(n for n in [capacity_note(run), site_note(run)] if n),
        site=site_json(run))


def site_note(run: Session) -> str | None:
    """run --site: the last share decision, as it was made."""
    d = None if run.site is None else run.site.last
    return None if d is None else d.why


def site_json(run: Session) -> dict[str, Any] | None:
    if run.site is None:
        return None
    d = run.site.last
    return {"node": run.site.node, "prometheus": run.site.url,
            "dest": None if run.site.share is None else run.site.share.dest,
            "shared": None if d is None else d.site,
            "nodes": [] if d is None else list(d.nodes),
            "target_mbps": None if d is None else d.target_mbps,
            "budget_mbps": None if run.site.budget is None else run.site.budget.mbps,
            "why": None if d is None else d.why}


def capacity_note(run: Session) -> str | None:
    """Why the run's ACKs gave no capacity, when path memory has none."""
    path = run.choice.path
    if path is None or run.acks_why is None or \
            run.store.newest(path, with_capacity=True) is not None:
        return None
    sa = run.scout_acks
    scout = "" if sa is None else f"; nor its scout's ({sa.windows} ACK windows)" \
        if sa.windows else "; no scout was sampled (one stream, or CMD ended first)"
    return f"no capacity from the ACKs to {run.choice.host or path.dest}: " \
        f"{run.acks_why}{scout}"


def entry_of(run: Session, addr: str, m: Moved) -> PathEntry | None:
    """Path memory's entry for what CMD moved with addr: its downloads'
    path when it received more than it sent."""
    if sum(m.received.values()) > sum(m.sent.values()):
        return entry_for(run, addr, REMOTE_CC, "receive")
    return entry_for(run, addr, m.congestion)


def entry_for(run: Session, addr: str, congestion: str | None,
              direction: str = "send") -> PathEntry | None:
    if congestion is None:
        return None
    try:
        key = PathKey(str(parse_dest(addr).network), run.netns, congestion, direction)
        return run.store.newest(key)
    except (TamebpfError, sqlite3.Error, OSError, ValueError):
        return None


def why_not_learned(run: Session) -> str:
    path = run.choice.path
    if path is None:
        return "CMD moved no steady TCP data"
    if path.congestion not in LOSS_BASED and path.congestion != REMOTE_CC:
        return f"{path.congestion} is not loss-based: the model does not describe it"
    why = None if run.learner is None else \
        next(iter(run.learner.why_changed.values()), None)
    if why is not None:
        return (f"its readings marked the path changed ({why}); "
                "path memory's entry no longer answers")
    obs = [g for g in run.groups if g.observed]
    if not obs:
        return "no stream count held for 3 readings"
    if any(held_by_its_cap(g, entry_for(run, g.remote_addr, path.congestion, path.direction),
                           run.measured.get((g.remote_addr, g.direction))) for g in obs):
        if path.direction == "receive":
            return ("the pace cap held the download at its target, and the cap does not "
                    "follow a download's path")
        if not run.book.specs():
            why = (f"neither path memory nor the run's ACKs gave {path.dest} a "
                   "capacity") if run.opts.learn else \
                f"path memory has no capacity for {path.dest}"
            return f"the pace cap held the transfer at its target, and {why} to follow from"
        return ("the pace cap held the transfer at its target; following reads the path "
                f"after {SETTLE_S + WINDOW_S:g} s of a scout stream")
    reverse = " --reverse" if path.direction == "receive" else ""
    return (f"one stream count, and path memory has no capacity for {path.dest} "
            f"('tamebpf advise{reverse}' to it once stores one)")

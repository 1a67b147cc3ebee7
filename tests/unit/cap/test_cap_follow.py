"""The follower's logic (cap/follow.py) on a simulated fair-share path: a
pace cap of 8 streams, m competing flows that change, the capacity from
path memory. The kernel's cap table is a recording stand-in (the real one
is exercised in tests/integration/test_cap_follow.py)."""

from __future__ import annotations

import time
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import pytest

from tamebpf.cap.book import FollowBook, FollowSpec
from tamebpf.cap.follow import MIN_CHANGE, SETTLE_S, SHORT_S, WINDOW_S, Follower
from tamebpf.cap.scout import ScoutReading, target_range
from tamebpf.common.records import Cap, Flow
from tamebpf.estimate.spread import SPREAD, over_window
from tamebpf.model import Probe, Settings, fit_capacity, predict
from tamebpf.paths.entry import FitData, PathEntry, PathKey
from tamebpf.paths.store import PathStore

C = 100.0
KEY = PathKey("198.18.3.2/32", "tb-snd", "cubic")
LIMIT = 0.3


def flow(cookie: int, acked: int, age: float) -> Flow:
    base = {f.name: 0 for f in fields(Flow)}
    base.update(cookie=cookie, pid=1, comm="iperf3", cgroup="/dtn", family="ipv4",
                local_addr="198.18.0.1", remote_addr="198.18.3.2", remote_port=5201,
                state="ESTABLISHED", congestion_control="cubic", closed=False,
                bytes_acked=acked, age_s=age, loss_rate=None, srtt_us=None)
    return Flow(**base)  # type: ignore[arg-type]


def cap(rate_mbps: float) -> Cap:
    return Cap(7, "/dtn", 42, True, "198.18.3.2/32", "ipv4", None, 0, 8, 0, 8, 0, 0,
               mode="pace", rate_bytes_per_s=int(rate_mbps * 1e6 / 8))


def advised(m: float) -> float:
    """What a settled advise gives on the fair-share path with m flows."""
    return predict(fit_capacity([Probe(1, C / (m + 1))], C),
                   Settings(max_impact=LIMIT)).advice.max_nondisruptive_thru


class Kernel:
    def __init__(self) -> None:
        self.follow: dict[int, tuple[int, int]] = {}
        self.commits: list[list[Any]] = []

    def set_follow(self, cap_id: int, scout_cookie: int, rate_bytes_per_s: int) -> None:
        self.follow[cap_id] = (scout_cookie, rate_bytes_per_s)

    def clear_follow(self, cap_id: int) -> None:
        self.follow.pop(cap_id, None)

    def commit(self, changes: list[Any]) -> list[Cap]:
        self.commits.append(changes)
        return []


def probed_entry() -> PathEntry:
    fit = fit_capacity([Probe(1, C / 9)], C)
    a = predict(fit, Settings(max_impact=LIMIT)).advice
    return PathEntry(KEY, time.time(), "probe", "settled",
                     FitData("capacity", ((1, C / 9),), fit.model, fit.coeffs,
                             fit.evidence_limit, fit.capacity),
                     a.num_flows, a.max_nondisruptive_thru, a.cross_traffic_impact, LIMIT,
                     capacity_mbps=C, capacity_method="ack-spacing")


def following(tmp_path: Path, memory: bool = True
              ) -> tuple[Follower, FollowBook, PathStore, Kernel]:
    """A follower of the cap of /dtn, path memory holding a settled probe
    of 8 competing flows (or nothing)."""
    book, store, kernel = FollowBook(str(tmp_path)), PathStore(str(tmp_path)), Kernel()
    if memory:
        store.put(probed_entry())
    book.put(FollowSpec("/dtn", "198.18.3.2/32", KEY, LIMIT, "198.18.3.2", 0.0))
    return Follower(book, store, kernel), book, store, kernel


def equal_streams(follower: Follower, steps: int, streams: int = 4) -> dict[int, int]:
    """Steps of 2 s in which each stream of a 40 Mbit/s pace cap sends 1 MB;
    returns the bytes acked per cookie."""
    acked = dict.fromkeys(range(1, streams + 1), 0)
    wall = time.time()
    for k in range(steps):
        for c in acked:
            acked[c] += 1_000_000
        follower.step([flow(c, b, 50.0 - c) for c, b in acked.items()], [cap(40.0)],
                      now=2.0 * k, now_wall=wall + 2 * k)
    return acked


def run(tmp_path: Path, phases: list[tuple[float, int]], step_s: float = 2.0
        ) -> tuple[list[tuple[float, float | None]], Kernel, FollowBook, PathStore]:
    """Simulate: (until t, m) phases; the scout and m flows share what the
    paced streams leave; returns the target in force after each step."""
    follower, book, store, kernel = following(tmp_path)
    the_cap = cap(advised(8))
    acked = dict.fromkeys(range(1, 9), 0)
    t, out = 0.0, []
    wall = time.time()  # now, not at import: path memory orders its entries by time
    for until, m in phases:
        while t < until:
            scout, budget = kernel.follow.get(7, (None, the_cap.rate_bytes_per_s))
            paced = budget * 8 / 1e6 if scout is not None else the_cap.rate_bytes_per_s * 8e-6
            scout_mbps = (C - paced) / (m + 1) if scout is not None else 0.0
            for c in acked:
                mbps = scout_mbps if c == scout else paced / (7 if scout is not None else 8)
                acked[c] += int(mbps * 1e6 / 8 * step_s)
            t += step_s
            follower.step([flow(c, b, 100.0 + t - c) for c, b in acked.items()], [the_cap],
                          now=t, now_wall=wall + t)
            s = book.find("/dtn", "198.18.3.2/32")
            out.append((t, None if s is None else s.target_mbps))
    return out, kernel, book, store


def settled_band(m: float, window_s: float) -> tuple[float, float]:
    """The targets a follower may settle on with m competing flows: those
    an exact reading over `window_s` cannot tell from the advice (its noise
    band: cap/follow.py decide), and at least the advice +-5%. A follower
    stops where a reading first lands it inside the band (a window that
    mixed two loads may land it off the advice): on this path with the
    class spread of 2026-11-28's refit, 44.9 for the advised 50."""
    level = advised(m)
    exact = ScoutReading(C / (m + 1), C / (m + 1), window_s)
    band = target_range(exact, C, Settings(max_impact=LIMIT),
                        over_window(SPREAD[(False, False)], window_s))
    assert band is not None
    return min(band[0], level * 0.95), max(band[1], level * 1.05)


def test_the_target_follows_the_competing_flows(tmp_path: Path) -> None:
    out, kernel, book, store = run(tmp_path, [(120.0, 8), (240.0, 2), (360.0, 8)])
    for change_at, m in ((0.0, 8), (120.0, 2), (240.0, 8)):
        due = change_at + SETTLE_S + WINDOW_S + 10.0
        window = [(t, v) for t, v in out if due <= t < change_at + 120.0]
        assert window, out
        low, high = settled_band(m, WINDOW_S)
        assert low > advised(8 if m == 2 else 2) or high < advised(8 if m == 2 else 2)
        for t, v in window:
            assert v is not None and low <= v <= high, (t, m, (low, high), out)
    s = book.find("/dtn", "198.18.3.2/32")
    assert s is not None and len(s.changes) >= 2 and s.scout_cookie in range(1, 9)
    assert all(c.why and c.to_mbps > 0 for c in s.changes)
    assert kernel.follow[7][0] == s.scout_cookie
    # the paced streams get the target less the scout's share
    newest = store.newest(KEY)
    assert newest is not None and newest.source == "passive" and newest.capacity_mbps == C
    assert newest.competing_flows == pytest.approx(8, rel=0.15)


def test_small_moves_are_not_changes(tmp_path: Path) -> None:
    out, _, book, _ = run(tmp_path, [(150.0, 8)])
    s = book.find("/dtn", "198.18.3.2/32")
    assert s is not None
    # the cap was set at the advice for 8 flows: no change beyond MIN_CHANGE
    assert all(abs(c.to_mbps / advised(8) - 1) <= 2 * MIN_CHANGE for c in s.changes)
    assert len(s.changes) <= 1


def test_no_capacity_in_memory_is_a_note_not_a_guess(tmp_path: Path) -> None:
    follower, book, _, _ = following(tmp_path, memory=False)
    equal_streams(follower, 30)
    s = book.find("/dtn", "198.18.3.2/32")
    assert s is not None and s.target_mbps is None and s.note and "no capacity" in s.note


def test_decrease_fast_increase_slow(tmp_path: Path) -> None:
    """More cross traffic brings the target to its new level within the
    short window; less brings it up only over most of the long one. The
    new level is any target the reading's noise cannot tell from the advice
    (the follower's own entries carry the class spread: cap/follow.py
    decide): a move that stops there is done."""
    out, _, _, _ = run(tmp_path, [(120.0, 8), (240.0, 2), (360.0, 8)])

    def reached(start: float, low: float, high: float) -> float:
        return next(t for t, v in out if t > start and v is not None
                    and low <= v <= high) - start

    fast = SHORT_S + 3 * 2.0  # a decrease's time: the short window and 3 steps
    # An increase needs the long window to hold mostly the new load.
    assert reached(120.0, *settled_band(2, WINDOW_S)) > fast, out
    band = settled_band(8, SHORT_S)  # the scout alone: 8 flows, nothing paced
    assert reached(240.0, *band) <= fast, (band, out)


def test_a_refuse_cap_follows_with_a_new_n(tmp_path: Path) -> None:
    """Unpaced streams at their count are a probe point: with the capacity,
    the N advised for the new cross traffic replaces the cap (new connects
    only); a cap already at the advised N is left alone."""
    follower, book, _, kernel = following(tmp_path)
    n8 = predict(fit_capacity([Probe(1, C / 9)], C), Settings(max_impact=LIMIT)).advice.num_flows
    n2 = predict(fit_capacity([Probe(1, C / 3)], C), Settings(max_impact=LIMIT)).advice.num_flows
    assert n2 != n8
    refuse = replace(cap(0.0), mode="refuse", rate_bytes_per_s=0, max_streams=n8)
    acked = dict.fromkeys(range(1, n8 + 1), 0)
    t = 0.0
    for m in (8, 2):
        for _ in range(20):
            per = C * n8 / (n8 + m) / n8
            for c in acked:
                acked[c] += int(per * 1e6 / 8 * 2.0)
            t += 2.0
            follower.step([flow(c, b, 100.0 + t) for c, b in acked.items()], [refuse],
                          now=t, now_wall=time.time() + t)
            if kernel.commits:  # the table now holds the new cap
                refuse = replace(refuse, max_streams=kernel.commits[-1][1].max_streams)
        if m == 8:
            assert kernel.commits == [], "already at the advised N"
    # a window that straddles the change may take one step first
    assert 1 <= len(kernel.commits) <= 2
    assert kernel.commits[0][0].max_streams == n8
    new = kernel.commits[-1][1]
    assert new.max_streams == n2 and new.pace_bytes_per_s is None
    s = book.find("/dtn", "198.18.3.2/32")
    assert s is not None and s.change_count == len(kernel.commits)
    assert f"-> {n2}" in s.changes[-1].why


def test_the_agent_leaves_no_scout_behind(tmp_path: Path) -> None:
    """On the way out every stream of the cap shares the target in force."""
    follower, book, _, kernel = following(tmp_path)
    acked = equal_streams(follower, 20)
    scout, _ = kernel.follow[7]
    assert scout in acked
    follower.close()
    assert kernel.follow[7][0] == 0
    spec = book.find("/dtn", "198.18.3.2/32")
    assert spec is not None and spec.target_mbps is not None
    assert kernel.follow[7][1] == int(spec.target_mbps * 1e6 / 8)

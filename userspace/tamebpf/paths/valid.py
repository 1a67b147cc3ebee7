"""One check for a path entry, wherever it comes in: a row of path memory's
SQLite file (paths/store.py), a series another node exported to Prometheus
(paths/remote.py), and what probes or transfers taught before it is stored
(advise/memory.py, paths/passive.py).

A raw entry is a mapping of PathEntry's field names (the key's dest, netns
and congestion spread out) to values of any type; the fit is its JSON text
or the mapping that text holds. Every value is checked for its type and a
sane range before an entry is built: a file edited by hand, a node running
another version or a Prometheus that lies must cost a refusal, never a
traceback, an absurd number on the screen or a wrong advice. An entry that
fails is refused whole, naming the first field that failed.

Pure: no I/O.
"""

from __future__ import annotations

import ipaddress
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, cast

from tamebpf.common.records import DIRECTIONS
from tamebpf.common.words import printable
from tamebpf.model import MAX_STREAMS_LIMIT, MODEL_LABELS
from tamebpf.paths.entry import (
    ESTIMATORS,
    PROBE_KINDS,
    SOURCES,
    FitData,
    PathEntry,
    PathKey,
    Window,
)

MAX_MBPS = 1e7  # 10 Tbit/s: above any link a host has, below any absurd number
FUTURE_SLACK_S = 60.0  # how far ahead of ours another clock may be
MAX_RTT_MS = 1e5  # 100 s: beyond TCP's longest retransmission timer
MAX_COMPETING = 1e6  # competing flows: far above any path's
MAX_SPREAD = 100.0  # a relative round-to-round spread: 1 is already wild
MAX_TEXT = 256  # characters of a label (an address, a namespace name, a method)
MAX_PROBES = MAX_STREAMS_LIMIT  # points of one fit: one per stream count at most
MAX_WINDOWS = 64  # a pool's windows (paths/passive.POOL_WINDOWS keeps fewer)
MAX_WINDOW_S = 7 * 24 * 3600.0  # one window's seconds: at most the store's retention


@dataclass(frozen=True)
class Refusal:
    """Why a raw entry is not one: the field, and what is wrong with it."""

    field: str
    why: str

    def __str__(self) -> str:
        return f"{self.field} {self.why}"


class _Refused(Exception):
    def __init__(self, field: str, why: str) -> None:
        super().__init__(field, why)
        self.refusal = Refusal(field, why)


def show(value: object) -> str:
    """A bad value as a line may print it: quoted if text, escaped, short."""
    text = printable(repr(value) if isinstance(value, str) else str(value))
    return text if len(text) <= 40 else text[:37] + "..."


def checked_entry(raw: Mapping[str, object], now: float) -> PathEntry | Refusal:
    """The entry `raw` describes, or why it is refused. `now`: unix time,
    for the check that the entry is not dated in the future."""
    try:
        return _entry(raw, now)
    except _Refused as refused:
        return refused.refusal


def refusal(entry: PathEntry, now: float) -> Refusal | None:
    """Why an entry built here (from probes or transfers) must not be
    stored, or None: the same check as for what is read back."""
    got = checked_entry(as_raw(entry), now)
    return got if isinstance(got, Refusal) else None


def as_raw(entry: PathEntry) -> dict[str, object]:
    raw: dict[str, object] = {f.name: getattr(entry, f.name) for f in fields(PathEntry)}
    del raw["key"]
    raw.update(dest=entry.key.dest, netns=entry.key.netns, congestion=entry.key.congestion,
               direction=entry.key.direction, fit=entry.fit.as_dict())
    return raw


def checked_fit(raw: object) -> FitData | Refusal:
    """The fit in `raw` (JSON text or its mapping), or why it is refused."""
    try:
        return _fit(raw)
    except _Refused as refused:
        return refused.refusal


def _fit(raw: object) -> FitData:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except (ValueError, RecursionError):
            raise _Refused("fit", "is not JSON") from None
    if not isinstance(raw, Mapping):
        raise _Refused("fit", f"is {show(raw)}, not a JSON object")
    estimator = _choice(raw.get("estimator"), "fit.estimator", ESTIMATORS)
    probes = raw.get("probes")
    if not isinstance(probes, list | tuple) or not 1 <= len(probes) <= MAX_PROBES:
        raise _Refused("fit.probes", f"is {show(probes)}, not a list of 1 to {MAX_PROBES} "
                       "[streams, Mbit/s] pairs")
    points = tuple(_probe(p, i) for i, p in enumerate(probes))
    capacity = _mbps(raw.get("capacity"), "fit.capacity", optional=True)
    evidence = _streams(raw.get("evidence_limit"), "fit.evidence_limit", optional=True)
    if estimator == "share":
        if capacity is None:
            raise _Refused("fit.capacity", "is missing (a share fit rests on it)")
        return FitData("share", points, evidence_limit=evidence, capacity=capacity)
    model = _choice(raw.get("model"), "fit.model", tuple(MODEL_LABELS.values()))
    coeffs = raw.get("coeffs")
    if not isinstance(coeffs, list | tuple) or len(coeffs) != 3:
        raise _Refused("fit.coeffs", f"is {show(coeffs)}, not 3 numbers")
    q = tuple(_number(c, f"fit.coeffs[{i}]", 0.0, math.inf) for i, c in enumerate(coeffs))
    if max(q) <= 0.0:
        raise _Refused("fit.coeffs", "are all 0")
    return FitData(cast(Any, estimator), points, model, (q[0], q[1], q[2]), evidence, capacity)


def _entry(raw: Mapping[str, object], now: float) -> PathEntry:
    fit = _fit(raw.get("fit"))
    if raw.get("estimator", fit.estimator) != fit.estimator:
        raise _Refused("estimator", f"is {show(raw.get('estimator'))}, the fit's "
                       f"{fit.estimator}")
    dest = _text(raw.get("dest"), "dest")
    try:
        ipaddress.ip_network(dest)
    except ValueError:
        raise _Refused("dest", f"is {show(dest)}, not an address or prefix") from None
    when = _number(raw.get("when"), "when", 0.0, math.inf, low_open=True)
    if when > now + FUTURE_SLACK_S:
        raise _Refused("when", f"is {when - now:.0f} s in the future (a clock set wrong?)")
    changed = raw.get("changed", False)
    if changed not in (0, 1):  # SQLite's 0 and 1, or a bool
        raise _Refused("changed", f"is {show(changed)}, not 0 or 1")
    row_id = raw.get("id")
    if row_id is not None and (isinstance(row_id, bool) or not isinstance(row_id, int)):
        raise _Refused("id", f"is {show(row_id)}, not a whole number")

    low = _streams(raw.get("streams_low"), "streams_low", optional=True)
    high = _streams(raw.get("streams_high"), "streams_high", optional=True)
    if low is not None and high is not None and low > high:
        raise _Refused("streams_low", f"is {low}, above streams_high {high}")

    def mbps(name: str) -> float | None:
        return _mbps(raw.get(name), name, optional=True)

    def share(name: str, optional: bool = True) -> Any:
        return _number(raw.get(name), name, 0.0, 1.0, optional=optional)

    return PathEntry(
        key=PathKey(dest, _text(raw.get("netns"), "netns"),
                    _text(raw.get("congestion"), "congestion"),
                    _choice(raw.get("direction") or "send", "direction", DIRECTIONS)),
        when=when, source=cast(Any, _choice(raw.get("source"), "source", SOURCES)),
        probe_kind=cast(Any, _choice(raw.get("probe_kind"), "probe_kind", PROBE_KINDS)),
        fit=fit, advised_streams=cast(int, _streams(raw.get("advised_streams"),
                                                   "advised_streams")),
        advised_mbps=_number(raw.get("advised_mbps"), "advised_mbps", 0.0, MAX_MBPS,
                             high_text="10 Tbit/s"),
        advised_impact=share("advised_impact", False), max_impact=share("max_impact", False),
        capacity_mbps=mbps("capacity_mbps"), capacity_low_mbps=mbps("capacity_low_mbps"),
        capacity_high_mbps=mbps("capacity_high_mbps"), link_mbps=mbps("link_mbps"),
        capacity_method=_text(raw.get("capacity_method"), "capacity_method", optional=True),
        competing_flows=_number(raw.get("competing_flows"), "competing_flows", 0.0,
                                MAX_COMPETING, optional=True),
        rtt_ms=_number(raw.get("rtt_ms"), "rtt_ms", 0.0, MAX_RTT_MS, optional=True),
        impact_low=share("impact_low"), impact_high=share("impact_high"),
        host=_text(raw.get("host", ""), "host", empty=True), changed=bool(changed),
        streams_low=low, streams_high=high,
        spread=_number(raw.get("spread"), "spread", 0.0, MAX_SPREAD, optional=True),
        windows=_windows(raw.get("windows")), id=row_id)


def _windows(raw: object) -> tuple[Window, ...]:
    """A pool: JSON text, or a list, of [streams, Mbit/s, seconds] (or
    Windows); missing (an entry stored before pools were) is none."""
    if raw is None:
        return ()
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except (ValueError, RecursionError):
            raise _Refused("windows", "is not JSON") from None
    if not isinstance(raw, list | tuple) or len(raw) > MAX_WINDOWS:
        raise _Refused("windows", f"is {show(raw)}, not a list of at most {MAX_WINDOWS} "
                       "[streams, Mbit/s, seconds]")
    out = []
    for i, w in enumerate(raw):
        field = f"windows[{i}]"
        if isinstance(w, Window):
            w = [w.streams, w.mbps, w.seconds]
        if not isinstance(w, list | tuple) or len(w) != 3:
            raise _Refused(field, f"is {show(w)}, not [streams, Mbit/s, seconds]")
        out.append(Window(cast(int, _streams(w[0], field + ".streams")),
                          cast(float, _mbps(w[1], field + ".goodput")),
                          _number(w[2], field + ".seconds", 0.0, MAX_WINDOW_S, low_open=True)))
    return tuple(out)


def _probe(raw: object, i: int) -> tuple[int, float]:
    field = f"fit.probes[{i}]"
    if not isinstance(raw, list | tuple) or len(raw) != 2:
        raise _Refused(field, f"is {show(raw)}, not a [streams, Mbit/s] pair")
    return (cast(int, _streams(raw[0], field + ".streams")),
            cast(float, _mbps(raw[1], field + ".goodput")))


def _number(value: object, field: str, low: float, high: float, *, low_open: bool = False,
            optional: bool = False, high_text: str | None = None) -> Any:
    """A finite int or float in [low, high] ((low, high] with low_open);
    None if optional and missing."""
    if value is None:
        if optional:
            return None
        raise _Refused(field, "is missing")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Refused(field, f"is {show(value)}, not a number")
    try:
        x = float(value)
    except OverflowError:  # an int past any float
        x = math.inf
    if not math.isfinite(x):
        raise _Refused(field, f"is {show(value)}, not a finite number")
    if x < low or (low_open and x == low):
        raise _Refused(field, f"is {show(value)}, not {'above' if low_open else 'at least'} "
                       f"{low:g}")
    if x > high:
        raise _Refused(field, f"is {show(value)}, above {high_text or format(high, 'g')}")
    return x


def _mbps(value: object, field: str, optional: bool = False) -> float | None:
    """A goodput or capacity: more than 0, at most 10 Tbit/s."""
    return cast(float | None, _number(value, field, 0.0, MAX_MBPS, low_open=True,
                                      optional=optional, high_text="10 Tbit/s"))


def _streams(value: object, field: str, optional: bool = False) -> int | None:
    """A stream count: 1 to the largest --max-streams there is."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) \
            or not 1 <= value <= MAX_STREAMS_LIMIT:
        raise _Refused(field, f"is {show(value)}, not a stream count from 1 to "
                       f"{MAX_STREAMS_LIMIT}")
    return value


def _text(value: object, field: str, *, optional: bool = False, empty: bool = False) -> Any:
    if value is None and optional:
        return None
    if not isinstance(value, str) or (not value and not empty) or len(value) > MAX_TEXT:
        raise _Refused(field, f"is {show(value)}, not a text of {0 if empty else 1} to "
                       f"{MAX_TEXT} characters")
    return value


def _choice(value: object, field: str, known: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in known:
        raise _Refused(field, f"is {show(value)}, not one of {', '.join(known)}")
    return value

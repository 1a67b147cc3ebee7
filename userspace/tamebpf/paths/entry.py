"""What path memory keeps about one path: the key and one stored advice.

Pure: no I/O. The store (paths/store.py) writes these as rows; the fit is
kept as the few numbers that recompute the curve (paths/recall.py), so that
a later `advise` with another --max-impact or --max-streams gets the answer
for its own limits, not the stored one.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

# Where an entry came from: probes run by `advise` (or `cap --auto`), probes
# with the link rate given by --capacity, or real transfers seen passively.
Source = Literal["probe", "--capacity", "passive"]
SOURCES: tuple[Source, ...] = ("probe", "--capacity", "passive")
# How long the probes ran: until settled (the default), the 2 s + 2 s
# --quick look, or fixed lengths (--duration). A default `advise` answers
# only from settled (or passive) entries: a quick look is not the answer
# the user asked to wait for.
ProbeKind = Literal["settled", "quick", "fixed", "none"]
PROBE_KINDS: tuple[ProbeKind, ...] = ("settled", "quick", "fixed", "none")
# Which estimator the stored advice used (estimate/record.AdviseResult.used).
Estimator = Literal["capacity", "throughput", "share"]
ESTIMATORS: tuple[Estimator, ...] = ("capacity", "throughput", "share")


@dataclass(frozen=True)
class Window:
    """One settled goodput window a transfer (or a following cap's scout)
    showed on the path: at `streams` streams, `mbps` of TCP goodput over
    `seconds`."""

    streams: int
    mbps: float
    seconds: float


# The congestion control a download's path is kept under: the remote
# sender's, which this host cannot know.
REMOTE_CC = "remote"


@dataclass(frozen=True)
class PathKey:
    """A path: the destination prefix (the host's /32 or /128), the network
    namespace it is reached from ('host' for the init namespace, an
    `ip netns` name, or 'inode:N'), the senders' congestion control, and
    which way the data goes: "send" (uploads) or "receive" (downloads, kept
    under REMOTE_CC)."""

    dest: str
    netns: str
    congestion: str
    direction: str = "send"


@dataclass(frozen=True)
class FitData:
    """Enough to recompute the curve for any limits.

    Loss-based (estimator capacity or throughput): the fitted model's label
    and coefficients (model/fit.Fit), the probes it was fitted to, and its
    evidence limit and anchoring capacity. BBR (share): the measured
    goodputs per stream count and the capacity (model/share.share_advice).
    Throughputs in Mbit/s of TCP goodput."""

    estimator: Estimator
    probes: tuple[tuple[int, float], ...]
    model: str | None = None
    coeffs: tuple[float, float, float] | None = None
    evidence_limit: int | None = None
    capacity: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """The fit as JSON holds it (paths/valid.checked_fit reads it back)."""
        return {"estimator": self.estimator, "probes": [list(p) for p in self.probes],
                "model": self.model, "coeffs": None if self.coeffs is None else
                list(self.coeffs), "evidence_limit": self.evidence_limit,
                "capacity": self.capacity}

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), allow_nan=False)


def windows_json(windows: Sequence[Window]) -> str:
    """A pool as the store keeps it: [[streams, Mbit/s, seconds], ...]
    (paths/valid.checked_windows reads it back)."""
    return json.dumps([[w.streams, w.mbps, w.seconds] for w in windows], allow_nan=False,
                      separators=(",", ":"))


@dataclass(frozen=True)
class PathEntry:
    """One advice for a path, as it was when stored.

    capacity_*: the bottleneck's TCP goodput the advice rests on (Mbit/s),
    its 90% interval where the ACK spacing measured it, and how it was
    found ('given', or the estimate's method). advised_*: the advice for
    `max_impact` (the limit it was computed for). impact_low/high: the
    confidence range of the impact at the advised count. changed: real
    transfers have since shown the path no longer gives what this entry
    says; the next `advise` probes again."""

    key: PathKey
    when: float  # unix time
    source: Source
    probe_kind: ProbeKind
    fit: FitData
    advised_streams: int
    advised_mbps: float
    advised_impact: float
    max_impact: float
    capacity_mbps: float | None = None
    capacity_low_mbps: float | None = None
    capacity_high_mbps: float | None = None
    capacity_method: str | None = None
    link_mbps: float | None = None  # the link rate given with --capacity
    competing_flows: float | None = None
    rtt_ms: float | None = None
    impact_low: float | None = None
    impact_high: float | None = None
    host: str = ""  # as the user named it (the key holds the address)
    changed: bool = False
    # The advised count's range on the path's variation, and the relative
    # round-to-round spread it was made with (estimate/spread.py);
    # None in entries stored before ranges were.
    streams_low: int | None = None
    streams_high: int | None = None
    spread: float | None = None
    # A passive entry's pool: the settled windows, oldest first, that its
    # fit and spread rest on (paths/passive.py); empty for a probed entry.
    windows: tuple[Window, ...] = ()
    id: int | None = None  # the store's row id

    def age_s(self, now: float) -> float:
        return max(0.0, now - self.when)

    @property
    def pooled_s(self) -> float:
        """The seconds of settled windows the entry holds."""
        return sum(w.seconds for w in self.windows)

    def marked_changed(self) -> PathEntry:
        return replace(self, changed=True)

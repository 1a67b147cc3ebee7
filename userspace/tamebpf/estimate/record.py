"""The advisor's records: what it probes (Target), what each probe measured
(ProbeResult) and the advice with what it rests on (AdviseResult). Pure
values: advise/probes.py makes the probe results, estimate/advice.py
the advice, present/advice.py shows it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tamebpf.common.values import IPERF3_PORT
from tamebpf.estimate.acktrain import CapacityEstimate
from tamebpf.estimate.steady import Steady
from tamebpf.model import Prediction
from tamebpf.model.confidence import ImpactRange
from tamebpf.model.share import ShareAdvice

# How a probe that ran to its limit is marked (ProbeResult.stopped).
TIME_LIMIT = "time limit"


@dataclass(frozen=True)
class Coded:
    """Something the advisor says, as data: `code` names the case, `data`
    holds its numbers and reasons; present/advice.py words it."""

    code: str
    data: dict[str, Any] = field(default_factory=dict, hash=False)

    def __getitem__(self, key: str) -> Any:
        return self.data[key]


@dataclass(frozen=True)
class AdviceWarning(Coded):
    """Something the advice's user should know (estimate/advice.py,
    advise/advisor.py); present/advice.warning_text words it."""


@dataclass(frozen=True)
class AdviceRefusal(Coded):
    """Why there is no advice (estimate/advice.py);
    present/advice.refusal_text words it."""


@dataclass(frozen=True)
class Target:
    host: str
    port: int = IPERF3_PORT
    netns: str | None = None  # run the probe from this network namespace
    congestion: str = "system"  # reno | cubic | bbr | system (the host's default)
    # "send": uploads to the host (the probes send); "receive": downloads
    # from it (the server sends, as iperf3 -R; congestion then is the
    # server's, "system" its own default)
    direction: str = "send"


@dataclass(frozen=True)
class ProbeResult:
    streams: int
    duration_s: float  # wall time of the probe
    steady: Steady
    iperf3_mbps: float | None  # the iperf3 server's count of bytes received, whole run
    # The path's RTT as the SYN timeout program learned it (0: never learned):
    # the next probe to the same host starts with it.
    path_srtt_us: int = 0
    # Of duration_s: connecting until the test ran, and ending it (the
    # client's own clock; the rest is the traffic and process start).
    setup_s: float | None = None
    finish_s: float | None = None
    # The rate of each pair of consecutive ACKs of a data stream (Mbit/s,
    # estimate/acktrain.py): the capacity estimate reads them.
    ack_pair_mbps: tuple[float, ...] = ()
    # Why the probe ended: its stop rule's reason ("settled", "alone on the
    # link", ...), "time limit" when it ran to its limit, None for a probe of
    # fixed length (--duration, --quick).
    stopped: str | None = None
    # A download's: the retransmissions its sender (the iperf3 server)
    # reports, a cross-check of the holes counted here (None: uploads, or
    # not reported).
    sender_retransmits: int | None = None


@dataclass(frozen=True)
class Capacity:
    """The bottleneck capacity the advice is anchored on: the link rate given
    with --capacity or none (estimated), the TCP goodput it carries, the
    competing flows the anchored fit puts on it (None: not used), and where
    it came from ("given" or the estimate's method)."""

    link_mbps: float | None
    goodput_mbps: float
    competing_flows: float | None
    source: str = "given"


@dataclass(frozen=True)
class AdviseResult:
    target: Target
    probes: tuple[ProbeResult, ...]
    prediction: Prediction  # what the advice uses: capacity fit if given, else throughput
    loss_prediction: Prediction | None  # the kernel p*RTT^2 estimator
    loss_error: str | None  # why there is no loss-RTT prediction
    warnings: tuple[AdviceWarning, ...]
    # The free two-parameter throughput fit; the same object as `prediction`
    # unless the capacity fit is used.
    throughput_prediction: Prediction | None = None
    capacity: Capacity | None = None
    # The capacity as the probes' ACK spacing measured it (shown also when
    # --capacity was given, as a check).
    capacity_estimate: CapacityEstimate | None = None
    # The impact at each stream count of the curve with its range: the
    # probes' measurement noise (model/confidence.py) widened by the path's
    # round-to-round spread (estimate/advice.impact_confidence). Empty
    # without advice.
    confidence: tuple[ImpactRange, ...] = ()
    # Why there is no advice although the probes ran, or None.
    refused: AdviceRefusal | None = None
    # For senders the loss law does not describe (BBR): the advice from the
    # capacity share (model/share.py), which `prediction` then carries.
    share: ShareAdvice | None = None
    # The congestion control the advice is for, and where that came from
    # (the probes' sockets; "--congestion" or "the host's default").
    congestion: str | None = None
    # The counts the advice could have been on this path's round-to-round
    # spread, [low, high] around the advised count (estimate/spread.py).
    streams_range: tuple[int, int] | None = None

    @property
    def used(self) -> str:
        """Which estimator the advice uses: "share", "capacity" or "throughput"."""
        if self.share is not None:
            return "share"
        return "capacity" if self.capacity and self.capacity.competing_flows is not None \
            else "throughput"

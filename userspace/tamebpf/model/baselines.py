"""Models tamebpf offers for comparison with Lu et al.'s (model.md section 6).

Single-flow formulas take MSS in bytes and RTT in seconds and return bytes per
second.  Fits from probes stay in the probes' own throughput unit.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tamebpf.model._checks import ModelInputError, finite, positive
from tamebpf.model.fit import Probe

# Multiplicative decrease of TCP Reno/NewReno (window halves on loss).
TCP_BETA = 0.5


def _loss(p: float, what: str = "loss rate") -> float:
    """Loss rates for the square-root laws: in (0, 1]. Zero loss has no finite
    answer under these laws, so it is refused rather than returned as inf."""
    x = finite(p, what)
    if not 0.0 < x <= 1.0:
        raise ModelInputError(
            f"{what} must be in (0, 1] (with no loss the square-root law has no "
            f"finite throughput), got {p!r}"
        )
    return x


def mathis_throughput(
    mss_bytes: float, rtt_s: float, loss_rate: float, acked_per_ack: int = 1
) -> float:
    """Mathis et al.: MSS / (RTT * sqrt(2 b p / 3)), bytes/s (paper Eq 1)."""
    mss = positive(mss_bytes, "MSS")
    rtt = positive(rtt_s, "RTT")
    p = _loss(loss_rate)
    b = positive(acked_per_ack, "segments acknowledged per ACK")
    return mss / (rtt * math.sqrt(2.0 * b * p / 3.0))


def padhye_throughput(
    mss_bytes: float, rtt_s: float, loss_rate: float, rto_s: float, acked_per_ack: int = 1
) -> float:
    """Padhye et al. with timeouts, no receiver-window cap, bytes/s (paper Eq 2):

    MSS / (RTT sqrt(2bp/3) + T0 min(1, 3 sqrt(3bp/8)) p (1 + 32 p^2))
    """
    mss = positive(mss_bytes, "MSS")
    rtt = positive(rtt_s, "RTT")
    p = _loss(loss_rate)
    t0 = positive(rto_s, "retransmission timeout")
    b = positive(acked_per_ack, "segments acknowledged per ACK")
    denom = rtt * math.sqrt(2.0 * b * p / 3.0) + t0 * min(
        1.0, 3.0 * math.sqrt(3.0 * b * p / 8.0)
    ) * p * (1.0 + 32.0 * p * p)
    return mss / denom


def hacker_upper_bound(mss_bytes: float, rtt_s: float, loss_rates: Sequence[float]) -> float:
    """Hacker et al.: BW_n <= MSS/RTT * sum 1/sqrt(p_i), bytes/s (paper Eq 3).

    Tight only while adding flows does not raise loss (an uncongested path).
    """
    mss = positive(mss_bytes, "MSS")
    rtt = positive(rtt_s, "RTT")
    if not loss_rates:
        raise ModelInputError("Hacker's bound needs the loss rate of at least one flow")
    total = sum(
        1.0 / math.sqrt(_loss(p, f"loss rate of flow {i + 1}")) for i, p in enumerate(loss_rates)
    )
    return mss / rtt * total


def hacker_from_probe(probe: Probe, streams: int) -> float:
    """Hacker's bound for `streams` flows if loss stayed as in `probe`:
    per-stream throughput held constant (probe's unit)."""
    n = positive(streams, "number of streams")
    return n * probe.throughput / probe.streams


def altman_share(streams: float, beta: float = TCP_BETA) -> float:
    """Altman et al. Eq 1: fraction of capacity N AIMD flows with
    unsynchronised losses get, 1 - 1/(1 + N (1+beta)/(1-beta))."""
    n = positive(streams, "number of streams")
    b = finite(beta, "beta")
    if not 0.0 < b < 1.0:
        raise ModelInputError(f"beta must be in (0, 1), got {beta!r}")
    return 1.0 - 1.0 / (1.0 + n * (1.0 + b) / (1.0 - b))


@dataclass(frozen=True)
class AltmanFit:
    """Link capacity fitted so that capacity * altman_share(n) matches the probes."""

    capacity: float
    beta: float = TCP_BETA

    def throughput(self, streams: float) -> float:
        return self.capacity * altman_share(streams, self.beta)


def fit_altman(probes: Iterable[Probe], beta: float = TCP_BETA) -> AltmanFit:
    """Least-squares capacity c from probes: c = sum(BW_i s_i) / sum(s_i^2).

    Ignores cross traffic and synchronised losses, so it is optimistic on a
    shared or DropTail bottleneck (Altman et al., section V).
    """
    probes = tuple(probes)
    if not probes:
        raise ModelInputError("Altman's model needs at least one probe")
    shares = [altman_share(p.streams, beta) for p in probes]
    num = sum(p.throughput * s for p, s in zip(probes, shares, strict=True))
    return AltmanFit(num / sum(s * s for s in shares), beta)


@dataclass(frozen=True)
class TransferTimeFit:
    """DualPats: transfer time T = A x + B for x bytes (1/A = steady throughput,
    B = start-up and slow-start overhead, seconds)."""

    a: float  # seconds per byte
    b: float  # seconds
    warnings: tuple[str, ...] = ()

    @property
    def steady_throughput(self) -> float:
        """Bytes per second once slow start is over (1/A)."""
        return 1.0 / self.a

    def time(self, size_bytes: float) -> float:
        """Predicted time to move size_bytes (Eq 1 of DualPats)."""
        return self.a * positive(size_bytes, "transfer size") + self.b

    def throughput(self, size_bytes: float) -> float:
        """Average throughput of a transfer of size_bytes, bytes/s (Eq 2)."""
        x = positive(size_bytes, "transfer size")
        return x / (self.a * x + self.b)


def fit_dualpats(samples: Iterable[tuple[float, float]]) -> TransferTimeFit:
    """Fit T = A x + B from (size_bytes, seconds) pairs at two or more sizes.

    DualPats takes both from one transfer: the time at which the first x1 bytes
    were sent and the time the whole x2 bytes took (a "dualPacket").
    """
    pts = [(positive(x, "transfer size"), positive(t, f"time for {x!r} bytes")) for x, t in samples]
    if len({x for x, _ in pts}) < 2:
        raise ModelInputError("DualPats needs transfers of at least two different sizes")
    mx = sum(x for x, _ in pts) / len(pts)
    mt = sum(t for _, t in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    a = sum((x - mx) * (t - mt) for x, t in pts) / sxx
    if a <= 0.0:
        raise ModelInputError(
            "the larger transfer did not take longer than the smaller one: "
            "no steady throughput can be estimated (probe again, larger sizes)"
        )
    b = mt - a * mx
    if b < 0.0:
        # A negative start-up time is noise; a line through the origin and the
        # largest transfer keeps the steady throughput conservative.
        x_max, t_max = max(pts)
        return TransferTimeFit(
            t_max / x_max,
            0.0,
            (f"start-up time B = {b:.3g} s < 0 is noise: using B = 0",),
        )
    return TransferTimeFit(a, b)

"""Choosing the number of streams: TameParallelTCP() (Lu et al., section V).

Defaults, and why (docs/model.md explains them at length):

- max_impact 10%: impact is measured against a 1-stream transfer.  On a path
  that is congested at all, even the second stream costs cross traffic several
  percent (7% in the worked example), so a 5% limit would answer "1 stream" on
  nearly every congested path, where the question matters most.  The impact
  estimator errs on the high side (paper, Fig. 14), so 10% predicted is
  rarely more than 10% real.
- gain_threshold 1%: stop once one more stream adds less than 1% of the
  current predicted throughput.  On an uncongested path the n-th stream adds
  1/n, so the threshold never binds below 100 streams there; on a congested
  path it trims the flat tail where extra sockets only cost memory and CPU.
- max_streams 32: beyond the paper's evaluated range (1-30) the model is
  unvalidated, and common transfer tools cap parallelism near there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tamebpf.common.defaults import DEFAULT_GAIN_THRESHOLD, DEFAULT_MAX_IMPACT, DEFAULT_MAX_STREAMS
from tamebpf.model._checks import ModelInputError, fraction, stream_count
from tamebpf.model.fit import BASELINES, Baseline, Fit, Probe

# The curve is listed stream by stream; keep it to a size people can read.
MAX_STREAMS_LIMIT = 1024

LimitReason = Literal["max-impact", "gain-threshold", "max-streams", "evidence"]


@dataclass(frozen=True)
class Settings:
    """The administrator's limits for the advice."""

    max_impact: float = DEFAULT_MAX_IMPACT
    gain_threshold: float = DEFAULT_GAIN_THRESHOLD
    max_streams: int = DEFAULT_MAX_STREAMS
    baseline: Baseline = "one-stream"

    def __post_init__(self) -> None:
        fraction(self.max_impact, "max impact")
        fraction(self.gain_threshold, "gain threshold")
        stream_count(self.max_streams, "max streams")
        if self.max_streams > MAX_STREAMS_LIMIT:
            raise ModelInputError(
                f"max streams must be <= {MAX_STREAMS_LIMIT}, got {self.max_streams}"
            )
        if self.baseline not in BASELINES:
            raise ModelInputError(f"unknown impact baseline {self.baseline!r}")


@dataclass(frozen=True)
class Advice:
    """The paper's ParallelTCPChar, plus why the search stopped."""

    num_flows: int
    max_nondisruptive_thru: float
    cross_traffic_impact: float
    limited_by: LimitReason
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class CurvePoint:
    streams: int
    throughput: float
    impact: float


@dataclass(frozen=True)
class Prediction:
    """Everything `predict` (and later `advise`) reports for one fit."""

    fit: Fit
    settings: Settings
    curve: tuple[CurvePoint, ...]
    advice: Advice

    @property
    def model(self) -> str:
        return self.fit.model

    @property
    def probes(self) -> tuple[Probe, ...]:
        return self.fit.probes

    @property
    def params(self) -> dict[str, float]:
        return self.fit.params

    @property
    def warnings(self) -> tuple[str, ...]:
        return self.fit.warnings + self.advice.warnings


def advise(
    fit: Fit,
    max_impact: float = DEFAULT_MAX_IMPACT,
    gain_threshold: float = DEFAULT_GAIN_THRESHOLD,
    max_streams: int = DEFAULT_MAX_STREAMS,
    baseline: Baseline = "one-stream",
) -> Advice:
    """Largest n in [1, max_streams] with impact <= max_impact, stopping early
    where one more stream adds less than gain_threshold (a fraction of the
    current predicted throughput) or nothing at all.

    The paper binary-searches the impact curve; a scan from 1 upward gives the
    same n whenever impact is monotone (always, for a Fit) and also applies the
    gain rule, which needs the first stream that stops paying off.
    """
    s = Settings(max_impact, gain_threshold, max_streams, baseline)
    return _advise(fit, s)


def predict(fit: Fit, settings: Settings | None = None) -> Prediction:
    """The curve for 1..max_streams and the advice, under one set of limits."""
    s = settings or Settings()
    curve = tuple(
        CurvePoint(n, fit.throughput(n), fit.impact(n, s.baseline))
        for n in range(1, s.max_streams + 1)
    )
    return Prediction(fit, s, curve, _advise(fit, s))


def _advise(fit: Fit, s: Settings) -> Advice:
    warnings: list[str] = []
    limit = s.max_streams
    reason: LimitReason = "max-streams"
    if fit.evidence_limit is not None and fit.evidence_limit < limit:
        limit, reason = fit.evidence_limit, "evidence"
    n = 1
    first = fit.impact(1, s.baseline)
    if first > s.max_impact:
        warnings.append(
            f"even 1 stream exceeds the max impact ({first:.1%} > {s.max_impact:.1%} "
            "relative to no transfer); 1 stream is the least a transfer can use"
        )
        reason = "max-impact"
    else:
        while n < limit:
            if fit.impact(n + 1, s.baseline) > s.max_impact:
                reason = "max-impact"
                break
            gain = fit.throughput(n + 1) / fit.throughput(n) - 1.0
            # A stream that adds nothing is never worth its socket, even with
            # the threshold switched off (0).
            if gain <= 0.0 or gain < s.gain_threshold:
                reason = "gain-threshold"
                break
            n += 1
    return Advice(n, fit.throughput(n), fit.impact(n, s.baseline), reason, tuple(warnings))

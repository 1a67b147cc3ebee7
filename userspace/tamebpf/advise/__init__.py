"""`tamebpf advise`: two short probes measured in the kernel -> stream count.

`run_advice` is the whole call (TameParallelTCP(dest, max_impact) of the
paper); `advise_target` is the short form `tamebpf cap --auto` uses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tamebpf.errors import TamebpfError
from tamebpf.estimate.adaptive import Enough
from tamebpf.estimate.advice import AdviseResult, ProbeResult, Target, build
from tamebpf.kernel.probe import Progress, run_probe
from tamebpf.model import DEFAULT_MODEL, ModelName, Settings

DEFAULT_PROBES = (1, 10)
# Seconds of traffic per probe. With the connection set-up and result
# exchange, the pair takes under 5 s of wall time at 50 ms RTT.
DEFAULT_DURATIONS_S = (2.0, 2.0)
TWO_PROBE_MODELS: tuple[ModelName, ...] = ("square", "partial", "linear")


def run_advice(target: Target, settings: Settings, probes: Sequence[int] = DEFAULT_PROBES,
               durations_s: Sequence[float] = DEFAULT_DURATIONS_S,
               model: ModelName = DEFAULT_MODEL,
               on_progress: Callable[[Progress], None] | None = None,
               capacity_mbps: float | None = None,
               max_probe_s: float | None = None) -> AdviseResult:
    """`capacity_mbps`: the bottleneck's link rate if known (estimate.advice.build).
    `max_probe_s`: probes end when they have measured enough
    (estimate/adaptive.py), each after at most this long; `durations_s` is
    then not used."""
    if max_probe_s is None and len(durations_s) != len(probes):
        raise ValueError(f"{len(probes)} probes but {len(durations_s)} durations")
    if max_probe_s is not None:
        durations_s = [max_probe_s] * len(probes)
    results: list[ProbeResult] = []
    for i, (n, d) in enumerate(zip(probes, durations_s, strict=True), 1):
        # Each probe hands the path RTT it learned to the next (SYN timeout).
        srtt_us = results[-1].path_srtt_us if results else 0
        # The last probe's ACKs make the capacity estimate: it also waits for
        # that to be tight, unless the capacity was given.
        enough = None if max_probe_s is None else \
            Enough(capacity=i == len(probes) and capacity_mbps is None)
        results.append(run_probe(target, n, d, i, len(probes), on_progress, srtt_us,
                                 enough=enough))
    return build(target, results, settings, model, capacity_mbps)


def advise_target(host: str, max_impact: float, port: int = 5201,
                  congestion: str = "system") -> tuple[int, float]:
    """(advised stream count, its predicted throughput in Mbit/s): the N of a
    refuse cap and the target rate of a pace cap."""
    result = run_advice(Target(host, port, congestion=congestion), Settings(max_impact=max_impact))
    if result.refused:
        raise TamebpfError(f"the advisor gave no advice for {host}:{port}: {result.refused}")
    advice = result.prediction.advice
    return advice.num_flows, advice.max_nondisruptive_thru


__all__ = ["DEFAULT_DURATIONS_S",
           "DEFAULT_MODEL", "TWO_PROBE_MODELS", "AdviseResult", "Progress", "Target",
           "advise_target", "run_advice"]

"""`tamebpf advise`: two short probes measured in the kernel -> stream count.

`run_advice` is the whole call (TameParallelTCP(dest, max_impact) of the
paper); `advise_target` is the short form `tamebpf cap --auto` uses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tamebpf.errors import TamebpfError
from tamebpf.estimate.adaptive import Enough
from tamebpf.estimate.advice import AdviseResult, Target, build, refuses_congestion
from tamebpf.kernel.netns import default_congestion_control
from tamebpf.kernel.probe import Progress, run_probes
from tamebpf.model import DEFAULT_MODEL, ModelName, Settings

DEFAULT_PROBES = (1, 10)
# Seconds of traffic per probe. With the connection set-up and result
# exchange, the pair took a median 4.7 s of wall time (at most 5.4 s) on the
# fresh eval cases, 20-120 ms RTT (docs/accuracy.md, make eval-fresh-delivered).
# Not longer on long paths, where 2 s can end before the streams are past
# slow start (the advice then says so): running on until past start-up, up
# to 4.5 s, had a lower error in 9 of 15 cases against the settled ground
# truth and a higher one in 6, and the pair took a median 6.0 s, worst 10.5 s
# (docs/accuracy.md, make eval-fresh-settled). Nor shorter to reach longer
# 10-stream probes within the time: 1 s + 3 s had a higher error in all 7
# loss-based cases of a second fresh draw (make eval-fresh2-settled).
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
    (estimate/adaptive.Enough), each after at most this long; `durations_s`
    is then not used.

    The probes are the stages of one iperf3 test (kernel/probe.run_probes):
    the second probe's streams connect with the first's and start sending
    when the first probe ends, so the pair pays for one connection set-up and
    one result exchange, not two of each."""
    if max_probe_s is None and len(durations_s) != len(probes):
        raise ValueError(f"{len(probes)} probes but {len(durations_s)} durations")
    # Known before any traffic: no probe is sent only to be refused after.
    reason = refuses_congestion(*probe_congestion(target))
    if reason:
        raise NoAdvice(reason)
    if max_probe_s is not None:
        durations_s = [max_probe_s] * len(probes)
    # The last probe's ACKs make the capacity estimate: it also waits for
    # that to be tight, unless the capacity was given.
    enough = None if max_probe_s is None else \
        [Enough(capacity=i == len(probes) - 1 and capacity_mbps is None)
         for i in range(len(probes))]
    results = run_probes(target, list(zip(probes, durations_s, strict=True)), on_progress,
                         enough=enough)
    return build(target, results, settings, model, capacity_mbps)


class NoAdvice(TamebpfError):
    """The advisor refused before probing; the message says why."""


def probe_congestion(target: Target) -> tuple[str, str]:
    """(the congestion control the probes will run, a phrase saying so)."""
    if target.congestion != "system":
        return target.congestion, f"the probes would run {target.congestion.upper()} " \
            f"(--congestion {target.congestion})"
    where = f"network namespace {target.netns}" if target.netns else "this host"
    try:
        cc = default_congestion_control(target.netns)
    except OSError as err:
        raise TamebpfError(f"cannot read the default congestion control of {where}: "
                           f"{err.strerror or err}",
                           hint="check --netns (an 'ip netns' name), or give --congestion"
                           ) from err
    return cc, (f"the probes would run {cc.upper()}, the default congestion control of "
                f"{where} (net.ipv4.tcp_congestion_control)")


def advise_target(host: str, max_impact: float, port: int = 5201,
                  congestion: str = "system") -> tuple[int, float]:
    """(advised stream count, its predicted throughput in Mbit/s): the N of a
    refuse cap and the target rate of a pace cap."""
    try:
        result = run_advice(Target(host, port, congestion=congestion),
                            Settings(max_impact=max_impact))
        refused = result.refused
    except NoAdvice as err:  # before probing
        refused = err.message
    if refused:
        raise TamebpfError(f"the advisor gave no advice for {host}:{port}: {refused}")
    advice = result.prediction.advice
    return advice.num_flows, advice.max_nondisruptive_thru


__all__ = ["DEFAULT_DURATIONS_S",
           "DEFAULT_MODEL", "TWO_PROBE_MODELS", "AdviseResult", "NoAdvice", "Progress", "Target",
           "advise_target", "probe_congestion", "run_advice"]

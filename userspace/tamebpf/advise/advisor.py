"""`tamebpf advise`: probes measured in the kernel -> stream count.

`run_advice` is the whole call (TameParallelTCP(dest, max_impact) of the
paper); `advise_target` is the short form `tamebpf cap --auto` uses.

By default each probe runs until its share of the path has settled, at most
DEFAULT_MAX_PROBE_S (tamebpf/common/defaults.py); `quick` runs two fixed
2-s probes (the `durations_s` of QUICK_DURATIONS_S).

The settled probes run as the stages of one test, 1 stream then 10: other
orders (the 10-stream probe first, or an order by the path's RTT) are not
more accurate, or are slower. make eval measures a candidate by giving
run_probes its own stop rules.

For BBR senders the advice comes from the capacity share (model/share.py),
and a third probe is run where the first two leave the answer uncertain.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from tamebpf.advise.memory import AdviceMemory
from tamebpf.advise.probes import StopRule, probe_congestion, run_probe, run_probes
from tamebpf.common.defaults import (
    DEFAULT_MAX_PROBE_S,
    DEFAULT_MODEL,
    DEFAULT_PROBES,
    QUICK_DURATIONS_S,
    TWO_PROBE_MODELS,
)
from tamebpf.common.records import Progress
from tamebpf.common.values import IPERF3_PORT
from tamebpf.estimate.advice import build
from tamebpf.estimate.record import AdviceRefusal, AdviceWarning, AdviseResult, Target
from tamebpf.estimate.settled import BbrSettled, Settled
from tamebpf.model import ModelName, Settings


def run_advice(target: Target, settings: Settings, probes: Sequence[int] = DEFAULT_PROBES,
               durations_s: Sequence[float] | None = None,
               model: ModelName = DEFAULT_MODEL,
               on_progress: Callable[[Progress], None] | None = None,
               capacity_mbps: float | None = None,
               max_probe_s: float | None = None) -> AdviseResult:
    """`durations_s`: fixed seconds per probe (--duration, --quick); None:
    each probe ends when settled, after at most `max_probe_s` (default
    DEFAULT_MAX_PROBE_S). `capacity_mbps`: the bottleneck's link rate if
    known (estimate.advice.build).

    The probes are the stages of one iperf3 test (advise/probes.run_probes):
    the second probe's streams connect with the first's and start sending
    when the first probe ends, so the pair pays for one connection set-up and
    one result exchange, not two of each."""
    if durations_s is not None and len(durations_s) != len(probes):
        raise ValueError(f"{len(probes)} probes but {len(durations_s)} durations")
    cc, source = probe_congestion(target)
    limit = DEFAULT_MAX_PROBE_S if max_probe_s is None else max_probe_s
    rules: list[StopRule | None] | None = None
    if durations_s is None:
        durations_s = [limit] * len(probes)
        rules = [stop_rule(cc, last=i == len(probes) - 1, capacity=capacity_mbps is None)
                 for i in range(len(probes))]
    results = run_probes(target, list(zip(probes, durations_s, strict=True)), on_progress,
                         enough=rules)
    result = build(target, results, settings, model, capacity_mbps)
    if result.share is not None and result.share.next_probe is not None:
        # The limit lies inside the range the two probes leave: measure there.
        n = result.share.next_probe
        third = run_probe(target, n, durations_s[-1], len(probes) + 1, len(probes) + 1,
                          on_progress, srtt_us=results[0].path_srtt_us,
                          enough=None if rules is None else stop_rule(cc, last=True,
                                                                      capacity=False))
        checked = build(target, [*results, third], settings, model, capacity_mbps)
        result = checked if not checked.refused else replace(result, warnings=(
            *result.warnings, AdviceWarning("third_probe_unused", {
                "streams": n, "reason": checked.refused})))
    return replace(result, congestion=f"{cc} ({source})")


def stop_rule(cc: str, last: bool, capacity: bool = True) -> StopRule:
    """The default probe's stop rule for congestion control `cc`. `last`:
    the last probe, whose ACKs estimate the capacity unless `capacity` is
    False (given with --capacity), so that estimate must be tight too."""
    if cc == "bbr":
        return BbrSettled(capacity=last and capacity)
    return Settled(capacity=last and capacity)


def advise_target(host: str, max_impact: float, port: int = IPERF3_PORT,
                  congestion: str = "system",
                  on_progress: Callable[[Progress], None] | None = None
                  ) -> tuple[int, float] | AdviceRefusal:
    """(advised stream count, its predicted throughput in Mbit/s): the N of a
    refuse cap and the target rate of a pace cap; or why there is no advice,
    for the caller to word (present/advice.refusal_text)."""
    result = run_advice(Target(host, port, congestion=congestion),
                        Settings(max_impact=max_impact), on_progress=on_progress)
    # Every probed advice goes to path memory (docs/paths.md), cap --auto's too.
    AdviceMemory().remember(result, probe_congestion(result.target)[0], "settled")
    if result.refused:
        return result.refused
    advice = result.prediction.advice
    return advice.num_flows, advice.max_nondisruptive_thru


__all__ = ["DEFAULT_MAX_PROBE_S", "DEFAULT_MODEL", "DEFAULT_PROBES", "QUICK_DURATIONS_S",
           "TWO_PROBE_MODELS",
           "AdviseResult", "Progress", "Target", "advise_target",
           "probe_congestion", "run_advice", "stop_rule"]

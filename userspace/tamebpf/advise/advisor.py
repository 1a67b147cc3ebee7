"""`tamebpf advise`: probes measured in the kernel -> stream count.

`run_advice` is the whole call (TameParallelTCP(dest, max_impact) of the
paper); `advise_target` is the short form `tamebpf cap --auto` uses.

By default each probe runs until its share of the path has settled, at most
DEFAULT_MAX_PROBE_S (advise/settled.py); `quick` runs the two 2-s probes
that were the default before (the fixed `durations_s` of QUICK_DURATIONS_S).

The settled probes run as the stages of one test, 1 stream then 10. Two
other orders are kept for make eval (ProbeOrder): capacity first (the
10-stream probe first, alone where its ACKs give a trusted capacity) was
the default for fresh draw 5 and erred more than the pair in order (median
throughput error 0.092 against 0.050 on its 18 loss-based cases,
docs/results/run-fresh5.md), so by that draw's rules the pair came back;
"by-rtt" uses capacity first only on paths of 40 ms or less, where it
erred as little; fresh draw 6 measured it as accurate as the pair but, with
its RTT check, 1.4 s slower at the median, more than its rules allowed, so
the pair stays (docs/results/run-fresh6.md).

For BBR senders the advice comes from the capacity share (model/share.py),
and a third probe is run where the first two leave the answer uncertain.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Literal

from tamebpf.advise.estimate.advice import build
from tamebpf.advise.memory import AdviceMemory
from tamebpf.advise.pathrtt import path_rtt
from tamebpf.advise.probes import StopRule, probe_congestion, run_probe, run_probes
from tamebpf.advise.record import AdviceWarning, AdviseResult, Target
from tamebpf.advise.settled import (
    DEFAULT_MAX_PROBE_S,
    DEFAULT_STOP,
    BbrSettled,
    Settled,
    StopProfile,
    loss_based_rule,
)
from tamebpf.errors import TamebpfError
from tamebpf.model import DEFAULT_MODEL, ModelInputError, ModelName, Settings
from tamebpf.present.advice import refusal_text
from tamebpf.records import Progress
from tamebpf.values import IPERF3_PORT

DEFAULT_PROBES = (1, 10)
# --quick: seconds of traffic per probe. The pair took a median 4.7 s of wall
# time on the fresh eval cases; on long paths with full queues it ended in
# start-up and erred by a median 0.25 (docs/results/fixed-probes-earlier-draws.md).
QUICK_DURATIONS_S = (2.0, 2.0)
TWO_PROBE_MODELS: tuple[ModelName, ...] = ("square", "partial", "linear")

# The order of settled probes for loss-based senders:
# - "smaller-first": 1 stream, then 10, as the stages of one test;
# - "larger-first": advisor.capacity_first;
# - "by-rtt": larger first on a path whose RTT (advise/pathrtt.py, measured
#   before the probes) is at most SHORT_PATH_SRTT_US, smaller first beyond.
ProbeOrder = Literal["smaller-first", "larger-first", "by-rtt"]
DEFAULT_ORDER: ProbeOrder = "smaller-first"
# Chosen on fresh draws 3-5 (docs/results/probe-order-design.md): up to a
# handshake RTT of 39 ms the larger probe first erred as little as the pair
# in order; from 45 ms on, the 1-stream probe after 10 streams read the
# cross traffic's share while it was still growing back, or the 10-stream
# probe alone fixed the fit to a capacity it had measured low.
SHORT_PATH_SRTT_US = 40_000


def run_advice(target: Target, settings: Settings, probes: Sequence[int] = DEFAULT_PROBES,
               durations_s: Sequence[float] | None = None,
               model: ModelName = DEFAULT_MODEL,
               on_progress: Callable[[Progress], None] | None = None,
               capacity_mbps: float | None = None,
               max_probe_s: float | None = None,
               order: ProbeOrder = DEFAULT_ORDER,
               stop: StopProfile = DEFAULT_STOP) -> AdviseResult:
    """`durations_s`: fixed seconds per probe (--duration, --quick); None:
    each probe ends when settled, after at most `max_probe_s` (default
    DEFAULT_MAX_PROBE_S). `capacity_mbps`: the bottleneck's link rate if
    known (estimate.advice.build). `order`: of settled probes for a
    loss-based sender (ProbeOrder; BBR and fixed durations keep the pair in
    order). `stop`: the settled probes' stop profile for a loss-based
    sender (settled.StopProfile).

    The probes are the stages of one iperf3 test (advise/probes.run_probes):
    the second probe's streams connect with the first's and start sending
    when the first probe ends, so the pair pays for one connection set-up and
    one result exchange, not two of each."""
    if durations_s is not None and len(durations_s) != len(probes):
        raise ValueError(f"{len(probes)} probes but {len(durations_s)} durations")
    cc, source = probe_congestion(target)
    limit = DEFAULT_MAX_PROBE_S if max_probe_s is None else max_probe_s
    rtt_check = None  # the RTT check, where the order depends on it
    if order != "smaller-first" and durations_s is None and cc != "bbr" and len(probes) == 2:
        if order == "by-rtt":
            rtt_check = path_rtt(target)
        # A check without a sample (its SYN was resent) takes the long path's order.
        if rtt_check is None or 0 < rtt_check.srtt_us <= SHORT_PATH_SRTT_US:
            result = capacity_first(target, settings, probes, model, on_progress,
                                    capacity_mbps, limit,
                                    0 if rtt_check is None else rtt_check.srtt_us)
            return replace(result, congestion=f"{cc} ({source})", rtt_check=rtt_check)
    srtt_us = 0 if rtt_check is None else rtt_check.srtt_us
    rules: list[StopRule | None] | None = None
    if durations_s is None:
        durations_s = [limit] * len(probes)
        rules = [stop_rule(cc, last=i == len(probes) - 1, capacity=capacity_mbps is None,
                           profile=stop)
                 for i in range(len(probes))]
    results = run_probes(target, list(zip(probes, durations_s, strict=True)), on_progress,
                         srtt_us, enough=rules)
    result = build(target, results, settings, model, capacity_mbps)
    if result.share is not None and result.share.next_probe is not None:
        # The limit lies inside the range the two probes leave: measure there.
        n = result.share.next_probe
        third = run_probe(target, n, durations_s[-1], len(probes) + 1, len(probes) + 1,
                          on_progress, srtt_us=results[0].path_srtt_us,
                          enough=None if rules is None else stop_rule(cc, last=True,
                                                                      capacity=False,
                                                                      profile=stop))
        checked = build(target, [*results, third], settings, model, capacity_mbps)
        result = checked if not checked.refused else replace(result, warnings=(
            *result.warnings, AdviceWarning("third_probe_unused", {
                "streams": n, "reason": checked.refused})))
    return replace(result, congestion=f"{cc} ({source})", rtt_check=rtt_check)


def capacity_first(target: Target, settings: Settings, probes: Sequence[int],
                   model: ModelName, on_progress: Callable[[Progress], None] | None,
                   capacity_mbps: float | None, limit: float, srtt_us: int = 0
                   ) -> AdviseResult:
    """The settled default for loss-based senders: the larger probe first,
    until settled (and, without --capacity, until its ACKs give a tight
    capacity estimate); the smaller one only when that probe and the
    capacity cannot fix the fit alone. The probes are listed as they ran."""
    low, high = sorted(probes)
    first = run_probe(target, high, limit, 1, 2, on_progress, srtt_us=srtt_us,
                      enough=Settled(capacity=capacity_mbps is None))
    try:
        return build(target, [first], settings, model, capacity_mbps)  # the capacity fit
    except ModelInputError:
        pass  # no capacity to anchor on, or the probe measured more than it
    second = run_probe(target, low, limit, 2, 2, on_progress, srtt_us=first.path_srtt_us,
                       enough=Settled(capacity=False))
    return build(target, [first, second], settings, model, capacity_mbps)


def stop_rule(cc: str, last: bool, capacity: bool = True,
              profile: StopProfile = DEFAULT_STOP) -> StopRule:
    """The default probe's stop rule for congestion control `cc`. `last`:
    the last probe, whose ACKs estimate the capacity unless `capacity` is
    False (given with --capacity), so that estimate must be tight too.
    `profile` applies to loss-based senders (settled.StopProfile)."""
    if cc == "bbr":
        return BbrSettled(capacity=last and capacity)
    return loss_based_rule(last, capacity, profile)


def advise_target(host: str, max_impact: float, port: int = IPERF3_PORT,
                  congestion: str = "system",
                  on_progress: Callable[[Progress], None] | None = None) -> tuple[int, float]:
    """(advised stream count, its predicted throughput in Mbit/s): the N of a
    refuse cap and the target rate of a pace cap."""
    result = run_advice(Target(host, port, congestion=congestion),
                        Settings(max_impact=max_impact), on_progress=on_progress)
    # Every probed advice goes to path memory (docs/paths.md), cap --auto's too.
    AdviceMemory().remember(result, probe_congestion(result.target)[0], "settled")
    if result.refused:
        raise TamebpfError(f"the advisor gave no advice for {host}:{port}: "
                           f"{refusal_text(result.refused)}")
    advice = result.prediction.advice
    return advice.num_flows, advice.max_nondisruptive_thru


__all__ = ["DEFAULT_MAX_PROBE_S", "DEFAULT_MODEL", "QUICK_DURATIONS_S", "TWO_PROBE_MODELS",
           "DEFAULT_ORDER", "SHORT_PATH_SRTT_US", "AdviseResult", "ProbeOrder",
           "Progress", "Target", "advise_target", "capacity_first",
           "probe_congestion", "run_advice", "stop_rule"]

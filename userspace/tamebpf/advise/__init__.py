"""`tamebpf advise`: two short probes measured in the kernel -> stream count.

`run_advice` is the whole call (TameParallelTCP(dest, max_impact) of the
paper); `advise_num_flows` is the short form `tamebpf cap --auto` uses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tamebpf.advise.probe import Progress, Target, run_probe
from tamebpf.advise.report import AdviseResult, build
from tamebpf.model import ModelName, Settings

DEFAULT_PROBES = (1, 10)
DEFAULT_DURATION_S = 2  # per probe: advice within 5 s of probing in total
# Eq 6 restricted to (alpha n + beta)^2, the (m+n)^2 loss growth: on the
# testbed it predicts short probes better than Eq 7 (docs/accuracy.md).
DEFAULT_MODEL: ModelName = "square"
TWO_PROBE_MODELS: tuple[ModelName, ...] = ("square", "partial", "linear")


def run_advice(target: Target, settings: Settings, probes: Sequence[int] = DEFAULT_PROBES,
               duration_s: int = DEFAULT_DURATION_S, model: ModelName = DEFAULT_MODEL,
               on_progress: Callable[[Progress], None] | None = None) -> AdviseResult:
    results = [run_probe(target, n, duration_s, i, len(probes), on_progress)
               for i, n in enumerate(probes, 1)]
    return build(target, results, settings, model)


def advise_num_flows(host: str, max_impact: float, port: int = 5201) -> int:
    result = run_advice(Target(host, port), Settings(max_impact=max_impact))
    return result.prediction.advice.num_flows


__all__ = ["DEFAULT_MODEL", "TWO_PROBE_MODELS", "AdviseResult", "Progress", "Target",
           "advise_num_flows", "run_advice"]

"""The mathematics of tamebpf (docs/model.md): pure functions, no I/O.

Typical use, as `tamebpf predict`, `advise` and `watch` do::

    fit = fit_throughput([Probe(1, 50.0), Probe(10, 200.0)])
    pred = predict(fit, Settings(max_impact=0.10))
    pred.advice.num_flows            # 2
"""

from tamebpf.common.defaults import (
    DEFAULT_GAIN_THRESHOLD,
    DEFAULT_MAX_IMPACT,
    DEFAULT_MAX_STREAMS,
    DEFAULT_MODEL,
    MODELS,
)
from tamebpf.model._checks import ModelInputError
from tamebpf.model.advice import (
    MAX_STREAMS_LIMIT,
    Advice,
    CurvePoint,
    LimitReason,
    Prediction,
    Settings,
    advise,
    predict,
)
from tamebpf.model.baselines import (
    AltmanFit,
    TransferTimeFit,
    altman_share,
    fit_altman,
    fit_dualpats,
    hacker_from_probe,
    hacker_upper_bound,
    mathis_throughput,
    padhye_throughput,
)
from tamebpf.model.capacity import CAPACITY_SLACK, competing_flows, fit_capacity
from tamebpf.model.fit import (
    BASELINES,
    MODEL_LABELS,
    Baseline,
    Fit,
    LossSample,
    ModelName,
    Probe,
    fit_throughput,
)
from tamebpf.model.loss_rtt import fit_loss_rtt

__all__ = [
    "BASELINES",
    "CAPACITY_SLACK",
    "DEFAULT_GAIN_THRESHOLD",
    "DEFAULT_MODEL",
    "DEFAULT_MAX_IMPACT",
    "DEFAULT_MAX_STREAMS",
    "MAX_STREAMS_LIMIT",
    "MODELS",
    "MODEL_LABELS",
    "Advice",
    "AltmanFit",
    "Baseline",
    "CurvePoint",
    "Fit",
    "LimitReason",
    "LossSample",
    "ModelInputError",
    "ModelName",
    "Prediction",
    "Probe",
    "Settings",
    "TransferTimeFit",
    "advise",
    "altman_share",
    "competing_flows",
    "fit_altman",
    "fit_capacity",
    "fit_dualpats",
    "fit_loss_rtt",
    "fit_throughput",
    "hacker_from_probe",
    "hacker_upper_bound",
    "mathis_throughput",
    "padhye_throughput",
    "predict",
]

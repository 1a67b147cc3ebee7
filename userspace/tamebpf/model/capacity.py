"""The square-of-m-plus-n fit when the bottleneck's capacity is known.

Two goodputs leave both unknowns of n / T(n) = alpha n + beta to the probes:
the capacity C = 1/alpha and the competing flows m = beta/alpha.  m then
comes from the ratio T(n2)/T(n1), which is ill-conditioned when m is large
(with 30 competing flows, a 10% error in the one-stream probe moves m by
about 45%).  Given C, alpha is fixed and each probe alone estimates m:

    m_i = n_i C / T_i - n_i        (beta_i = n_i / T_i - n_i / C)

The estimates are averaged with weight n_i.  A probe of n streams measures
the mean share of n flows, so its variance falls about as 1/n; and a single
new flow among established ones starts below its long-run share, so the
one-stream probe reads low more often than high (docs/model.md, "With the
capacity known").
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from tamebpf.model._checks import ModelInputError, positive
from tamebpf.model.fit import MODEL_LABELS, Fit, Probe

# A probe may read a little above the capacity (sampling windows, rounding
# of the link's header overhead); more than this means the capacity is wrong.
CAPACITY_SLACK = 0.05


def fit_capacity(probes: Iterable[Probe], capacity: float) -> Fit:
    """Fit (alpha n + beta)^2 with alpha = 1/capacity, from one probe or more.

    `capacity` is the TCP goodput the bottleneck carries, in the probes' unit.
    Raises ModelInputError when a probe measured more than the capacity
    (beyond CAPACITY_SLACK): the stated capacity cannot be the bottleneck's.
    """
    probes = tuple(probes)
    capacity = positive(capacity, "capacity")
    if not probes or not all(isinstance(p, Probe) for p in probes):
        raise ModelInputError("give at least one Probe(streams, throughput)")
    top = max(probes, key=lambda p: p.throughput)
    if top.throughput > capacity * (1 + CAPACITY_SLACK):
        raise ModelInputError(
            f"the {top.streams}-stream probe measured {top.throughput:.4g}, more than the "
            f"capacity of {capacity:.4g}: the bottleneck is faster than that")
    alpha = 1.0 / capacity
    weight = sum(p.streams for p in probes)
    beta = sum(p.streams * (p.streams / p.throughput - p.streams * alpha)
               for p in probes) / weight
    # Below 0 only through probes at (or within the slack above) capacity:
    # our flows alone fill the path, no competing flows.
    beta = max(beta, 0.0)
    if not math.isfinite(beta):
        raise ModelInputError("probe values too far apart to fit in floating point")
    coeffs = (alpha * alpha, 2 * alpha * beta, beta * beta)
    return Fit(MODEL_LABELS["square"], coeffs, probes, "throughput", capacity=capacity)


def competing_flows(fit: Fit) -> float | None:
    """m = beta / alpha of a square-of-m-plus-n fit (None for other models)."""
    if fit.model != MODEL_LABELS["square"] or fit.coeffs[0] <= 0.0:
        return None
    params = fit.params
    return params["beta"] / params["alpha"]

"""The defaults and choices that `--help` shows, in a module that imports
nothing of tamebpf.

Every command's argument parser (tamebpf/parsers/) is built from these, so
`tamebpf --help`, `tamebpf CMD --help` and a mistyped option answer without
loading the advisor, the kernel layer or the model (docs/performance.md,
"Startup"). The code each value configures imports it from here; the comment
above each says whose it is.
"""

from __future__ import annotations

from typing import Final, Literal

# The advice's limits (model/advice.py's Settings; --max-impact,
# --gain-threshold, --max-streams of every command that advises).
DEFAULT_MAX_IMPACT: Final = 0.10
DEFAULT_GAIN_THRESHOLD: Final = 0.01
DEFAULT_MAX_STREAMS: Final = 32

# The models fit_throughput knows (model/fit.py; predict --model).
MODELS: Final = ("partial", "full", "linear", "square")
# The one default fit of every command (advise, predict, watch, export, cap
# --auto): Eq 6 restricted to (alpha n + beta)^2, the (m+n)^2 loss growth,
# which predicts the testbed's short probes better than Eq 7 (docs/model.md,
# "The square of m + n"). Other models stay available by name, as checks.
DEFAULT_MODEL: Final[Literal["square"]] = "square"

# The advisor (advise/advisor.py): the probes' stream counts, and the models
# two probes can fit (advise --model).
DEFAULT_PROBES: Final = (1, 10)
TWO_PROBE_MODELS: Final = ("square", "partial", "linear")
# Each probe's time limit by default (estimate/settled.py, --max-probe-time):
# probes run this long err a quarter as much as 2-s probes (a median
# throughput error of about 0.07 against 0.24).
DEFAULT_MAX_PROBE_S: Final = 15.0
# --quick: seconds of traffic per probe. The pair takes a median 4.7 s of
# wall time; on long paths with full queues it ends in start-up and errs by
# a median 0.25 (docs/accuracy.md).
QUICK_DURATIONS_S: Final = (2.0, 2.0)

# Path memory's answers (advise/memory.py, advise --max-age) and the other
# nodes' entries from Prometheus (paths/remote.py, advise --paths-from): the
# whole request's time limit, and the most of its answer read.
DEFAULT_MAX_AGE_S: Final = 3600.0
PATHS_FROM_TIMEOUT_S: Final = 3.0
PATHS_FROM_MAX_BYTES: Final = 8 * 2**20

# Congestion controls a probe can use (cap/spec.py; advise and cap set
# --congestion, a caps file's `congestion`).
CONGESTION: Final = ("reno", "cubic", "bbr", "system")

# `tamebpf run`'s pace target before the destination is known
# (runner/session.py): conservative, a share of most research links, not all of one.
DEFAULT_RATE_MBPS: Final = 100.0

# How watch and export group flows (groups/aggregate.py, --group-by) and the
# orders watch sorts them in (present/watch.py, --sort).
GROUP_BY: Final = ("comm", "cgroup")
SORT_KEYS: Final = ("goodput", "streams", "loss", "rtt", "owner", "dest")

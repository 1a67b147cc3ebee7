"""`tamebpf predict`: throughput and impact curves from probe results you supply.

No root and no kernel: this is the model of docs/model.md applied to numbers
given on the command line, e.g. from two iperf3 runs at 1 and 10 streams.
"""

from __future__ import annotations

import argparse
import re
import sys

from tamebpf.common.errors import UsageError
from tamebpf.model import (
    ModelInputError,
    Probe,
    fit_throughput,
    predict,
)
from tamebpf.options import dump_json, parse_rate_mbps, settings_from
from tamebpf.present.prediction import prediction_to_json, render_prediction_table

_STREAMS = re.compile(r"[0-9]+", re.ASCII)


def parse_probe(text: str) -> Probe:
    """'10:200' or '1:9.4G' -> Probe(n, Mbit/s); the rate as --capacity takes it."""
    streams, sep, rate = text.partition(":")
    if not sep or not _STREAMS.fullmatch(streams.strip()):
        raise UsageError(f"bad --probe {text!r}: expected N:RATE, e.g. 10:200 or 10:9.4G",
                         "N in ASCII digits")
    try:
        mbps = parse_rate_mbps(rate, "--probe")
    except UsageError:
        raise UsageError(f"bad --probe {text!r}: expected N:RATE, e.g. 10:200 or 10:9.4G",
                         "RATE in Mbit/s or with a unit (500k, 100M, 9.4G)") from None
    try:
        return Probe(int(streams.strip()), mbps)
    except ModelInputError as err:
        raise UsageError(f"bad --probe {text!r}: {err}") from None


def run(args: argparse.Namespace) -> int:
    probes = [parse_probe(t) for t in args.probe]
    settings = settings_from(args, baseline=args.impact_baseline)
    try:
        fit = fit_throughput(probes, args.model)
    except ModelInputError as err:
        raise UsageError(f"bad --probe values: {err}") from None
    pred = predict(fit, settings)
    if args.json:
        # allow_nan=False: a NaN or inf would be a bug; fail rather than print it.
        dump_json(prediction_to_json(pred), sys.stdout)
    else:
        sys.stdout.write(render_prediction_table(pred))
    return 0

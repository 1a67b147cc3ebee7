"""`tamebpf predict`: throughput and impact curves from probe results you supply.

No root and no kernel: this is the model of docs/model.md applied to numbers
given on the command line, e.g. from two iperf3 runs at 1 and 10 streams.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

from tamebpf.defaults import DEFAULT_MODEL, MODELS
from tamebpf.errors import UsageError
from tamebpf.model import (
    ModelInputError,
    Probe,
    fit_throughput,
    predict,
)
from tamebpf.options import add_advice_options, dump_json, parse_rate_mbps, settings_from
from tamebpf.present.prediction import prediction_to_json, render_prediction_table

EPILOG = """\
example:
  tamebpf predict --probe 1:50 --probe 10:200 --max-impact 10%

Impact is the predicted fall in the throughput of each cross-traffic flow,
relative to a 1-stream transfer (--impact-baseline none: relative to no
transfer).  The advice is the largest number of streams whose impact stays
within --max-impact, stopping where one more stream adds less than
--gain-threshold of the current throughput.  See docs/model.md.
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "predict",
        help="predict throughput and impact from probe results",
        description="Predict aggregate throughput and cross-traffic impact for 1..N\n"
        "parallel TCP streams from two or three measured probes, and advise a\n"
        "number of streams (Lu et al., IPDPS 2005). No root needed.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--probe",
        action="append",
        required=True,
        metavar="N:RATE",
        help="a measured probe: N streams gave RATE in aggregate, in Mbit/s or with a "
        "unit (200, 9.4G, 500k) (give 2, or 3 for --model full)",
    )
    add_advice_options(p)
    p.add_argument(
        "--model",
        choices=MODELS,
        default=DEFAULT_MODEL,
        help="square = (alpha n + beta)^2, the (m+n)^2 loss growth (the default of every "
        "command); partial order 2 (Eq 7, 2 probes), full order 2 (Eq 6, 3 probes) or "
        "linear (Eq 8)",
    )
    p.add_argument(
        "--impact-baseline",
        choices=("one-stream", "none"),
        default="one-stream",
        help="impact relative to a 1-stream transfer (paper) or to no transfer",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


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

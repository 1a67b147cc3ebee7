"""`tamebpf predict`: throughput and impact curves from probe results you supply.

No root and no kernel: this is the model of docs/model.md applied to numbers
given on the command line, e.g. from two iperf3 runs at 1 and 10 streams.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from tamebpf.errors import UsageError
from tamebpf.model import (
    DEFAULT_GAIN_THRESHOLD,
    DEFAULT_MAX_IMPACT,
    DEFAULT_MAX_STREAMS,
    MODELS,
    ModelInputError,
    Probe,
    Settings,
    fit_throughput,
    predict,
)
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
        metavar="N:MBPS",
        help="a measured probe: N streams gave MBPS Mbit/s in aggregate "
        "(give 2, or 3 for --model full)",
    )
    p.add_argument(
        "--max-impact",
        default=str(DEFAULT_MAX_IMPACT),
        metavar="PCT",
        help=f"largest acceptable impact on cross traffic, 10%% or 0.1 "
        f"(default {DEFAULT_MAX_IMPACT * 100:g}%%)",
    )
    p.add_argument(
        "--gain-threshold",
        default=str(DEFAULT_GAIN_THRESHOLD),
        metavar="PCT",
        help="stop adding streams when one more adds less than this share of the "
        f"current throughput; 0 turns it off (default {DEFAULT_GAIN_THRESHOLD * 100:g}%%)",
    )
    p.add_argument(
        "--max-streams",
        default=str(DEFAULT_MAX_STREAMS),
        metavar="N",
        help=f"largest number of streams to consider (default {DEFAULT_MAX_STREAMS})",
    )
    p.add_argument(
        "--model",
        choices=MODELS,
        default="partial",
        help="partial order 2 (Eq 7, 2 probes), full order 2 (Eq 6, 3 probes) or "
        "linear (Eq 8) (default partial)",
    )
    p.add_argument(
        "--impact-baseline",
        choices=("one-stream", "none"),
        default="one-stream",
        help="impact relative to a 1-stream transfer (paper) or to no transfer",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


def parse_probe(text: str) -> Probe:
    """'10:200' -> Probe(10, 200.0)."""
    streams, sep, rate = text.partition(":")
    if not sep:
        raise UsageError(f"bad --probe {text!r}: expected N:MBPS, e.g. 10:200")
    try:
        n = int(streams)
        mbps = float(rate)
    except ValueError:
        raise UsageError(f"bad --probe {text!r}: expected N:MBPS, e.g. 10:200") from None
    try:
        return Probe(n, mbps)
    except ModelInputError as err:
        raise UsageError(f"bad --probe {text!r}: {err}") from None


def parse_fraction(text: str, option: str) -> float:
    """'5%' or '0.05' -> 0.05; anything outside [0, 1] is refused, so that a
    bare '5' is not silently read as 500%."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100.0 if raw.endswith("%") else float(raw)
    except ValueError:
        raise UsageError(f"bad {option} {text!r}: expected a percentage like 5% or 0.05") from None
    if not 0.0 <= value <= 1.0:  # also false for NaN
        raise UsageError(f"bad {option} {text!r}: must be between 0% and 100% (or 0 and 1)")
    return value


def parse_streams(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"bad --max-streams {text!r}: expected a whole number") from None


def run(args: argparse.Namespace) -> int:
    probes = [parse_probe(t) for t in args.probe]
    max_impact = parse_fraction(args.max_impact, "--max-impact")
    gain = parse_fraction(args.gain_threshold, "--gain-threshold")
    max_streams = parse_streams(args.max_streams)
    try:
        settings = Settings(max_impact, gain, max_streams, args.impact_baseline)
    except ModelInputError as err:
        raise UsageError(f"bad --max-streams {args.max_streams!r}: {err}") from None
    try:
        fit = fit_throughput(probes, args.model)
    except ModelInputError as err:
        raise UsageError(f"bad --probe values: {err}") from None
    pred = predict(fit, settings)
    if args.json:
        # allow_nan=False: a NaN or inf would be a bug; fail rather than print it.
        print(json.dumps(prediction_to_json(pred), indent=2, allow_nan=False))
    else:
        sys.stdout.write(render_prediction_table(pred))
    return 0

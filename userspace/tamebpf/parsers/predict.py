"""`tamebpf predict`'s arguments (tamebpf/commands/predict.py runs it)."""

from __future__ import annotations

import argparse
from typing import Any

from tamebpf.common.defaults import DEFAULT_MODEL, MODELS
from tamebpf.options import add_advice_options

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
    p.set_defaults(run="run")

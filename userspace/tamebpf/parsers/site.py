"""`tamebpf site`'s arguments (tamebpf/commands/site.py runs it)."""

from __future__ import annotations

from typing import Any

from tamebpf.common.defaults import PATHS_FROM_TIMEOUT_S
from tamebpf.options import ExamplesFormatter, add_advice_options, add_site_options

EPILOG = """\
examples:
  tamebpf site --site http://prometheus.example:9090
  tamebpf site --json                          the site of /etc/tamebpf/tamebpf.toml's [site]

Per path a site's nodes run (a destination's /24 or /64, and a direction):
each node's streams, goodput and pace target as its 'tamebpf export' last
published them, the site's budget (the model's advice for the whole site
from the newest fit any node exported) and the impact the streams the site
runs now have on other traffic. Nothing is sent to the paths, nor changed.
Exit status: 0; 1 when the site's Prometheus cannot be asked or answers
nothing usable; 2 for a bad argument.
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "site",
        help="the site's view: per path its nodes' streams, the budget, the impact",
        description="What the site's nodes run per path, from the Prometheus that scrapes "
        "their exports, against the site's budget (docs/deploy.md, \"A site of several "
        "nodes\").",
        epilog=EPILOG,
        formatter_class=ExamplesFormatter,
    )
    add_site_options(p, "read the nodes' series from it")
    add_advice_options(p)
    p.add_argument("--timeout", metavar="S", default=f"{PATHS_FROM_TIMEOUT_S:g}",
                   help="the most seconds the queries may take in all (default %(default)s)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(run="run")

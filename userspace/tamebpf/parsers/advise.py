"""`tamebpf advise`'s arguments (tamebpf/commands/advise.py runs it)."""

from __future__ import annotations

from typing import Any

from tamebpf.common.defaults import (
    CONGESTION,
    DEFAULT_MAX_AGE_S,
    DEFAULT_MAX_PROBE_S,
    DEFAULT_MODEL,
    DEFAULT_PROBES,
    PATHS_FROM_MAX_BYTES,
    PATHS_FROM_TIMEOUT_S,
    QUICK_DURATIONS_S,
    TWO_PROBE_MODELS,
)
from tamebpf.common.values import IPERF3_PORT
from tamebpf.options import (
    ExamplesFormatter,
    add_advice_options,
    add_site_options,
    add_state_dir_option,
)
from tamebpf.present.toolflags import FORMATS

# How accurate the advice is, in one sentence (the README's advise row says
# the same); the measured numbers are docs/accuracy.md's, not repeated here.
ACCURACY = ("Accuracy: on the testbed's emulated paths the advice usually reaches 95% of the "
            "best throughput within the impact limit, but on long crowded paths it can "
            "differ 2x from run to run; docs/accuracy.md has the measurements.")

EPILOG = f"""\
examples:
  sudo tamebpf advise dtn.example.org --max-impact 5%
  sudo tamebpf advise dtn.example.org:5202 --max-impact 10% --json
  sudo tamebpf advise dtn.example.org --max-impact 5% --reverse        advice for downloads
  sudo tamebpf advise dtn.example.org --max-impact 5% --site http://prometheus.example:9090
  sudo tamebpf advise dtn.example.org --max-impact 5% --format globus-url-copy --concurrency 4
  N=$(sudo tamebpf advise dtn.example.org --max-impact 5% --format shell) || N=4

Exit status 3 means no advice is possible (the reason is on stderr), 1 an
error, 2 a bad argument; the last example falls back to 4 streams in each.

{ACCURACY}
"""

# --paths-from's default, and the range of --paths-from-timeout.
PATHS_FROM_ENV = "TAMEBPF_PATHS_FROM"
MIN_PATHS_FROM_S, MAX_PATHS_FROM_S = 0.1, 60.0


def register(sub: Any) -> None:
    p = sub.add_parser(
        "advise",
        help="probe a destination and advise how many streams to use (root)",
        description="Run iperf3 probes (n1, then n2 parallel streams) against an "
        "'iperf3 -s' server at HOST, measure them in the kernel, fit the model and advise "
        "the largest stream count whose predicted impact on cross traffic stays within "
        "--max-impact. By default each probe runs until its share of the path has settled "
        "(it counts the streams' congestion epochs in the kernel), at most "
        f"{DEFAULT_MAX_PROBE_S:g} s: seconds each on an idle path, longer on crowded ones. "
        "BBR senders are "
        "advised from the bottleneck's capacity less what the probes took (a third probe "
        "where the first two leave the answer open). Every advice is remembered per path: "
        "a second advise within --max-age answers at once from path memory, sending "
        "nothing (docs/paths.md).",
        epilog=EPILOG,
        formatter_class=ExamplesFormatter,
    )
    p.add_argument("dest", metavar="HOST[:PORT]",
                   help=f"iperf3 server (default port {IPERF3_PORT})")
    add_advice_options(p, required_impact=True)
    p.add_argument("--probes", default=",".join(map(str, DEFAULT_PROBES)), metavar="N1,N2",
                   help="stream counts of the two probes (default %(default)s)")
    p.add_argument("--quick", action="store_true",
                   help="two fixed " + " s + ".join(f"{d:g}" for d in QUICK_DURATIONS_S)
                   + " s probes (about 5 s in all): a quick look. Close on short paths and "
                   "paths without cross traffic; on long paths (45 ms and more) whose queues "
                   "other traffic keeps full the probes end in start-up, and the advice is "
                   "further off than the default's (docs/accuracy.md)")
    p.add_argument("--duration", default=None,
                   metavar="S[,S2]",
                   help="fixed seconds of traffic per probe instead of probing until settled: "
                   "one value for both, or one each")
    p.add_argument("--max-probe-time", metavar="S",
                   help="the most each probe runs while waiting for its share to settle "
                   f"(default {DEFAULT_MAX_PROBE_S:g})")
    p.add_argument("--model", choices=TWO_PROBE_MODELS, default=DEFAULT_MODEL,
                   help="loss curve fitted to the probes: square = (alpha n + beta)^2, the "
                   "(m+n)^2 growth; partial = the paper's a n^2 + b (default %(default)s; "
                   "docs/model.md compares them)")
    p.add_argument("--capacity", metavar="RATE",
                   help="the bottleneck's link rate if you know it, in Mbit/s or with a unit "
                   "(10G, 100M, 500k): the probes then only estimate the competing traffic, "
                   "which makes the advice much more accurate with cross traffic "
                   "(docs/advise.md)")
    p.add_argument("--congestion", choices=CONGESTION, default="system",
                   help="congestion control of the probes (default: the host's)")
    p.add_argument("--netns", metavar="NAME", help="probe from this network namespace")
    p.add_argument("--reverse", action="store_true",
                   help="advice for downloads from HOST: the probes receive, as iperf3 -R "
                   "(the server sends; --congestion then asks it for one)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--format", choices=FORMATS, metavar="TOOL",
                   help="print only the advised stream count as flags for a transfer tool: "
                   + ", ".join(FORMATS) + " (shell: the bare number)")
    p.add_argument("--concurrency", metavar="K",
                   help="with --format: the tool runs K transfers at once (globus-url-copy "
                   "-cc, rclone --transfers, xrdcp --parallel); both flags are printed, with "
                   "the streams per transfer such that all K together stay within the advice "
                   "(rounded down, said on stderr)")
    p.add_argument("--plot", metavar="FILE", help="write a plot (.png or .svg)")
    p.add_argument("--max-age", default=f"{DEFAULT_MAX_AGE_S:g}", metavar="S",
                   help="answer from path memory when it holds an advice for this path "
                   "(destination, network namespace, congestion control) at most this old, "
                   "sending nothing (default %(default)s s; docs/paths.md). The default "
                   "probes take only settled entries, --quick any")
    p.add_argument("--fresh", action="store_true",
                   help="probe even if path memory has a fresh answer (--probes, "
                   "--duration, --max-probe-time, --model and --plot probe too)")
    p.add_argument("--paths-from", metavar="URL", default=None,
                   help="when our own path memory has nothing fresh, answer from the path "
                   "entries other nodes' `tamebpf export` served to the Prometheus at URL "
                   f"(its HTTP query API; default ${PATHS_FROM_ENV}, else paths_from in "
                   "/etc/tamebpf/tamebpf.toml's [advise]; docs/paths.md). Every entry is "
                   "checked (finite, sane numbers; this destination; not dated ahead); one "
                   "that fails is named in one line and not used")
    p.add_argument("--paths-from-timeout", default=f"{PATHS_FROM_TIMEOUT_S:g}", metavar="S",
                   help="the most seconds the whole --paths-from request may take "
                   f"(connecting, every read; {MIN_PATHS_FROM_S:g} to {MAX_PATHS_FROM_S:g}, "
                   "default %(default)s); the answer is read up to "
                   f"{PATHS_FROM_MAX_BYTES // 2**20} MiB and a redirect is not followed. On any "
                   "failure: one warning line, and advise goes on as without it")
    add_site_options(p, "the model's count is the site's on the path, and this node is "
                     "advised what the site's other nodes leave of it (their entries are "
                     "read as --paths-from's)")
    add_state_dir_option(p)
    p.set_defaults(run="run")

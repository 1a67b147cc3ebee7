"""`tamebpf advise HOST[:PORT]`: probe, fit, advise (root)."""

from __future__ import annotations

import argparse
import os
import sys
import time
import urllib.parse
from typing import Any

from tamebpf import siteconfig
from tamebpf.advise.advisor import (
    Target,
    probe_congestion,
    run_advice,
)
from tamebpf.advise.memory import AdviceMemory
from tamebpf.advise.probes import NoServer
from tamebpf.defaults import (
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
from tamebpf.errors import NoAdviceError, UsageError
from tamebpf.kernel import preflight
from tamebpf.kernel.netns import check_netns
from tamebpf.lifecycle import terminate_as_interrupt
from tamebpf.options import (
    ExamplesFormatter,
    add_advice_options,
    add_state_dir_option,
    dump_json,
    parse_count,
    parse_duration,
    parse_rate_mbps,
    settings_from,
)
from tamebpf.paths.recall import Recalled
from tamebpf.present.advice import refusal_text, render, to_json
from tamebpf.present.paths import recalled_json, render_recalled
from tamebpf.present.plot import check_path, write_plot
from tamebpf.present.progress import ProgressLine
from tamebpf.present.toolflags import FORMATS, concurrency_refusal, tool_flags
from tamebpf.values import IPERF3_PORT, parse_host_port

# How accurate the advice is, in one sentence (the README's advise row says
# the same); the measured numbers are docs/accuracy.md's, not repeated here.
ACCURACY = ("Accuracy: on the testbed's emulated paths the advice usually reaches 95% of the "
            "best throughput within the impact limit, but on long crowded paths it can "
            "differ 2x from run to run; docs/accuracy.md has the measurements.")

EPILOG = f"""\
examples:
  sudo tamebpf advise dtn.example.org --max-impact 5%
  sudo tamebpf advise dtn.example.org:5202 --max-impact 10% --json
  sudo tamebpf advise dtn.example.org --max-impact 5% --format globus-url-copy --concurrency 4
  N=$(sudo tamebpf advise dtn.example.org --max-impact 5% --format shell) || N=4

Exit status 3 means no advice is possible (the reason is on stderr), 1 an
error, 2 a bad argument; the last example falls back to 4 streams in each.

{ACCURACY}
"""


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
                   "docs/results/design-runs.md compares them)")
    p.add_argument("--capacity", metavar="RATE",
                   help="the bottleneck's link rate if you know it, in Mbit/s or with a unit "
                   "(10G, 100M, 500k): the probes then only estimate the competing traffic, "
                   "which makes the advice much more accurate with cross traffic "
                   "(docs/results/design-runs.md)")
    p.add_argument("--congestion", choices=CONGESTION, default="system",
                   help="congestion control of the probes (default: the host's)")
    p.add_argument("--netns", metavar="NAME", help="probe from this network namespace")
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
    add_state_dir_option(p)
    p.set_defaults(func=run)


def parse_dest(dest: str) -> tuple[str, int]:
    """The iperf3 server: HOST, HOST:PORT, [IPV6]:PORT or a bare IPv6 address."""
    return parse_host_port(dest, "HOST[:PORT]", default_port=IPERF3_PORT)


MIN_PROBE_S, MAX_PROBE_S = 0.5, 60.0


PATHS_FROM_ENV = "TAMEBPF_PATHS_FROM"
MIN_PATHS_FROM_S, MAX_PATHS_FROM_S = 0.1, 60.0


def paths_from_default() -> str | None:
    """--paths-from when not given: $TAMEBPF_PATHS_FROM, else the host's
    settings file ([advise] paths_from, tamebpf.siteconfig)."""
    return os.environ.get(PATHS_FROM_ENV) or siteconfig.setting("advise", "paths_from")


def parse_paths_from(url: str | None) -> str | None:
    """A Prometheus base URL (http or https), or None."""
    if not url:
        return None
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UsageError(f"--paths-from {url!r}: give Prometheus's base URL, e.g. "
                         "http://prometheus.example:9090")
    return url


def parse_concurrency(text: str | None, tool: str | None) -> int | None:
    """--concurrency K, checked against --format's tool before any probe."""
    if text is None:
        return None
    if not tool:
        raise UsageError("--concurrency goes with --format TOOL (e.g. --format "
                         "globus-url-copy --concurrency 4)")
    refusal = concurrency_refusal(tool)
    if refusal:
        raise UsageError(refusal)
    return parse_count(text, "--concurrency", 1)


def parse_capacity(text: str) -> float:
    """The bottleneck's link rate in Mbit/s (100, 10G, 500k)."""
    return parse_rate_mbps(text, "--capacity")


def parse_durations(text: str) -> tuple[float, float]:
    parts = text.split(",")
    try:
        values = [parse_duration(p, "--duration", MIN_PROBE_S, MAX_PROBE_S) for p in parts]
    except UsageError:
        values = []
    if len(parts) not in (1, 2) or len(values) != len(parts):
        raise UsageError(f"--duration {text!r}: give seconds per probe, one value or two "
                         f"(e.g. 2 or 2.5,1.5), each from {MIN_PROBE_S:g} to {MAX_PROBE_S:g}")
    return (values[0], values[-1])


def parse_max_probe(text: str) -> float:
    return parse_duration(text, "--max-probe-time", MIN_PROBE_S, MAX_PROBE_S)


MAX_AGE_LIMIT_S = 10 * 365 * 24 * 3600.0  # ten years: "any age", yet a finite number


def parse_max_age(text: str) -> float:
    return parse_duration(text, "--max-age", 0.0, MAX_AGE_LIMIT_S)


def parse_probes(text: str) -> tuple[int, int]:
    parts = text.split(",")
    try:
        n1, n2 = (parse_count(p, "--probes") for p in parts)
    except (UsageError, ValueError):
        raise UsageError(f"--probes {text!r}: give two stream counts, e.g. 1,10") from None
    if not 1 <= n1 < n2:
        raise UsageError(f"--probes {text!r}: need 1 <= N1 < N2")
    return n1, n2


def run(args: argparse.Namespace) -> int:
    host, port = parse_dest(args.dest)
    n1, n2 = parse_probes(args.probes)
    fixed = [name for name, given in (("--quick", args.quick),
                                      ("--duration", args.duration is not None)) if given]
    if len(fixed) > 1 or (fixed and args.max_probe_time is not None):
        raise UsageError(" and ".join(fixed + (["--max-probe-time"] if args.max_probe_time
                                               is not None else []))
                         + ": choose one (--quick or --duration: fixed probe lengths; "
                         "--max-probe-time: probes that end when settled)")
    durations = parse_durations(args.duration) if args.duration is not None \
        else QUICK_DURATIONS_S if args.quick else None
    max_probe = None if args.max_probe_time is None else parse_max_probe(args.max_probe_time)
    capacity = None if args.capacity is None else parse_capacity(args.capacity)
    if args.json and args.format:
        raise UsageError("--json and --format: choose one output")
    concurrency = parse_concurrency(args.concurrency, args.format)
    if args.plot:
        check_path(args.plot)
    settings = settings_from(args)
    max_age = parse_max_age(args.max_age)
    paths_from_timeout = parse_duration(args.paths_from_timeout, "--paths-from-timeout",
                                        MIN_PATHS_FROM_S, MAX_PATHS_FROM_S)
    if args.netns is not None:
        check_netns(args.netns)  # a bad name is exit 2, as for flows and watch
    target = Target(host, port, args.netns, args.congestion)
    memory = AdviceMemory(args.state_dir)
    probe_options = (args.fresh or args.plot or args.duration is not None
                     or args.max_probe_time is not None or (n1, n2) != DEFAULT_PROBES
                     or args.model != DEFAULT_MODEL)
    if not probe_options:
        recalled = memory.lookup(target, settings, max_age, args.quick, capacity,
                                 parse_paths_from(args.paths_from or paths_from_default()),
                                 paths_from_timeout)
        if recalled is not None:
            return _from_memory(args, recalled, target, concurrency)
    preflight.check("advise")  # after the arguments: a bad one is exit 2 for anyone
    memory.say_if_off()
    progress = ProgressLine()
    try:
        with terminate_as_interrupt():
            result = run_advice(target, settings, (n1, n2), durations, args.model,
                                on_progress=progress, capacity_mbps=capacity,
                                max_probe_s=max_probe)
    except NoServer as err:
        raise NoAdviceError(
            f"no advice for {host}:{port}: no iperf3 server answers ({err.message})"
            + ("" if probe_options else ", and path memory has no fresh entry for that path"),
            f"either start 'iperf3 -s -p {port}' there, or run a transfer to it under "
            "'tamebpf run -- CMD' (or while 'tamebpf export' runs): path memory learns "
            "from it and advise then answers sending nothing (docs/paths.md)") from None
    finally:
        progress.clear()
    if not result.refused:
        memory.remember(result, probe_congestion(target)[0], "quick" if args.quick else
                        "fixed" if durations is not None else "settled")
    if result.refused:
        if args.json:
            dump_json(to_json(result), sys.stdout)
        elif not args.format:
            sys.stdout.write(render(result))
        # The reason is in the report above; said once, not twice.
        raise NoAdviceError(f"no advice for {host}:{port}" + (
            f": {refusal_text(result.refused)}" if args.format else " (the reason is above)"))
    if args.plot:
        write_plot(result, args.plot)
    if args.format:
        sys.stdout.write(tool_flags(args.format, result.prediction.advice.num_flows,
                                    concurrency))
    elif args.json:
        dump_json(to_json(result), sys.stdout)
    else:
        sys.stdout.write(render(result))
    return 0


def _from_memory(args: argparse.Namespace, recalled: Recalled, target: Target,
                 concurrency: int | None) -> int:
    """The advice path memory holds (advise/memory.py): nothing is sent."""
    now = time.time()
    if args.format:
        sys.stdout.write(tool_flags(args.format, recalled.advice.num_flows, concurrency))
    elif args.json:
        dump_json(recalled_json(recalled, target, now), sys.stdout)
    else:
        sys.stdout.write(render_recalled(recalled, target, now))
    return 0

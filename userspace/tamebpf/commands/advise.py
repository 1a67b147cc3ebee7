"""`tamebpf advise HOST[:PORT]`: probe, fit, advise (root)."""

from __future__ import annotations

import argparse
import os
import sys
import time
import urllib.parse

from tamebpf import siteconfig
from tamebpf.advise.advisor import (
    Target,
    probe_congestion,
    run_advice,
)
from tamebpf.advise.memory import AdviceMemory
from tamebpf.advise.probes import NoServer
from tamebpf.common.defaults import DEFAULT_MODEL, DEFAULT_PROBES, QUICK_DURATIONS_S
from tamebpf.common.errors import NoAdviceError, TamebpfError, UsageError
from tamebpf.common.lifecycle import terminate_as_interrupt
from tamebpf.common.values import IPERF3_PORT, parse_host, parse_host_port, shown
from tamebpf.kernel import preflight
from tamebpf.kernel.netns import check_netns
from tamebpf.options import (
    dump_json,
    parse_count,
    parse_duration,
    parse_rate_mbps,
    settings_from,
)
from tamebpf.parsers.advise import MAX_PATHS_FROM_S, MIN_PATHS_FROM_S, PATHS_FROM_ENV
from tamebpf.paths.recall import Recalled
from tamebpf.paths.where import resolve
from tamebpf.present.advice import refusal_text, render, to_json
from tamebpf.present.paths import recalled_json, render_recalled
from tamebpf.present.plot import check_path, plot_file, write_plot
from tamebpf.present.progress import ProgressLine
from tamebpf.present.toolflags import concurrency_refusal, tool_flags


def parse_dest(dest: str) -> tuple[str, int]:
    """The iperf3 server: HOST, HOST:PORT, [IPV6]:PORT or a bare IPv6 address."""
    return parse_host_port(dest, "HOST[:PORT]", default_port=IPERF3_PORT)


MIN_PROBE_S, MAX_PROBE_S = 0.5, 60.0


def paths_from_default() -> str | None:
    """--paths-from when not given: $TAMEBPF_PATHS_FROM, else the host's
    settings file ([advise] paths_from, tamebpf.siteconfig)."""
    return os.environ.get(PATHS_FROM_ENV) or siteconfig.setting("advise", "paths_from")


def parse_paths_from(url: str | None) -> str | None:
    """A Prometheus base URL (http or https), or None."""
    if not url:
        return None
    hint = "give Prometheus's base URL, e.g. http://prometheus.example:9090"
    if any(ord(c) <= 0x20 or ord(c) == 0x7F for c in url):
        # urlsplit would drop a tab or a line break without a word
        raise UsageError(f"bad --paths-from {shown(url)}: holds a space or a control "
                         "character", hint)
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as err:  # a port out of range, a bad [IPv6]
        raise UsageError(f"bad --paths-from {shown(url)}: {err}", hint) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"bad --paths-from {shown(url)}: not an http or https URL", hint)
    parse_host(parts.hostname, "--paths-from", url)
    if port == 0:
        raise UsageError(f"bad --paths-from {shown(url)}: port 0", hint)
    return url


def check_paths_from_host(url: str | None, seconds: float) -> None:
    """A --paths-from host that does not exist is bad input, said before
    anything else; a name server that fails or is slow is not: the query
    then says so and advise probes (paths/remote.py)."""
    host = urllib.parse.urlsplit(url).hostname if url else None
    if host:
        try:
            resolve(host, "--paths-from host", seconds=seconds)
        except UsageError:
            raise
        except TamebpfError:
            pass


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
    resolve(host, "HOST[:PORT]", port)
    target = Target(host, port, args.netns, args.congestion,
                    "receive" if args.reverse else "send")
    memory = AdviceMemory(args.state_dir)
    probe_options = (args.fresh or args.plot or args.duration is not None
                     or args.max_probe_time is not None or (n1, n2) != DEFAULT_PROBES
                     or args.model != DEFAULT_MODEL)
    paths_from = parse_paths_from(args.paths_from or paths_from_default())
    if not probe_options:
        check_paths_from_host(paths_from, paths_from_timeout)
        recalled = memory.lookup(target, settings, max_age, args.quick, capacity,
                                 paths_from, paths_from_timeout)
        if recalled is not None:
            return _from_memory(args, recalled, target, concurrency)
    preflight.check("advise")  # after the arguments: a bad one is exit 2 for anyone
    memory.say_if_off()
    with plot_file(args.plot) as plot:
        progress = ProgressLine()
        try:
            with terminate_as_interrupt():
                result = run_advice(target, settings, (n1, n2), durations, args.model,
                                    on_progress=progress, capacity_mbps=capacity,
                                    max_probe_s=max_probe)
        except NoServer as err:
            # A path marked changed that a probe once answered waits for the
            # next probe; one only transfers taught is learned anew by the next
            # transfer (paths/passive.py).
            hint = (f"start 'iperf3 -s -p {port}' there: a path a probe once answered waits "
                    "for a probe once marked changed (one only transfers taught is learned "
                    "anew by the next transfer under 'tamebpf run -- CMD' or 'export'; "
                    "docs/paths.md)") \
                if memory.changed and not probe_options else \
                (f"either start 'iperf3 -s -p {port}' there, or run a transfer to it under "
                 "'tamebpf run -- CMD' (or while 'tamebpf export' runs): path memory learns "
                 "from it and advise then answers sending nothing (docs/paths.md)")
            raise NoAdviceError(
                f"no advice for {host}:{port}: no iperf3 server answers ({err.message})"
                + ("" if probe_options else f", and path memory {memory.no_answer}"),
                hint) from None
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
        if plot is not None:
            write_plot(result, plot)
        if args.format:
            sys.stdout.write(tool_flags(args.format, result.prediction.advice.num_flows,
                                        concurrency, args.reverse))
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
        sys.stdout.write(tool_flags(args.format, recalled.advice.num_flows, concurrency,
                                    args.reverse))
    elif args.json:
        dump_json(recalled_json(recalled, target, now), sys.stdout)
    else:
        sys.stdout.write(render_recalled(recalled, target, now))
    return 0

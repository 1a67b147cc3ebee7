"""`tamebpf advise HOST[:PORT]`: probe, fit, advise (root)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

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
from tamebpf.common.logs import log
from tamebpf.common.values import IPERF3_PORT, parse_host_port, parse_url
from tamebpf.common.words import count, printable
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
from tamebpf.paths.where import check_url_host, resolve
from tamebpf.present.advice import refusal_text, render, to_json
from tamebpf.present.paths import recalled_json, render_recalled
from tamebpf.present.plot import check_path, plot_file, write_plot
from tamebpf.present.progress import ProgressLine
from tamebpf.present.toolflags import concurrency_refusal, tool_flags
from tamebpf.site import query as site_query
from tamebpf.site.advice import SiteAdvice, site_advice
from tamebpf.site.prefix import site_prefix


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
    return parse_url(url, "--paths-from") if url else None


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
    site = siteconfig.site_url(args.site)
    if site is not None:
        check_url_host(parse_url(site, "--site"), "--site host")
    node = siteconfig.node_name(args.node)
    # The site's Prometheus holds the other nodes' entries too.
    paths_from = parse_paths_from(args.paths_from or paths_from_default() or site)
    asked = SiteAsk(site, node, paths_from_timeout)
    if not probe_options:
        check_url_host(paths_from, "--paths-from host", paths_from_timeout)
        recalled = memory.lookup(target, settings, max_age, args.quick, capacity,
                                 paths_from, paths_from_timeout)
        if recalled is not None:
            return _from_memory(args, recalled, target, concurrency, asked)
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
        sa = asked.advice(target, result.prediction.advice.num_flows)
        if args.format:
            streams = result.prediction.advice.num_flows if sa is None else sa.streams
            sys.stdout.write(tool_flags(args.format, streams, concurrency, args.reverse))
        elif args.json:
            dump_json(asked.json(to_json(result), sa), sys.stdout)
        else:
            sys.stdout.write(render(result) + _site_text(sa))
        return 0


def _from_memory(args: argparse.Namespace, recalled: Recalled, target: Target,
                 concurrency: int | None, asked: SiteAsk) -> int:
    """The advice path memory holds (advise/memory.py): nothing is sent."""
    now = time.time()
    sa = asked.advice(target, recalled.advice.num_flows)
    if args.format:
        streams = recalled.advice.num_flows if sa is None else sa.streams
        sys.stdout.write(tool_flags(args.format, streams, concurrency, args.reverse))
    elif args.json:
        dump_json(asked.json(recalled_json(recalled, target, now), sa), sys.stdout)
    else:
        sys.stdout.write(render_recalled(recalled, target, now) + _site_text(sa))
    return 0


@dataclass
class SiteAsk:
    """--site: the site's Prometheus (None: no site), this node's name,
    how long a query may take, and why it could not say, once asked."""

    url: str | None
    node: str
    timeout: float
    error: str | None = None

    def advice(self, target: Target, site_streams: int) -> SiteAdvice | None:
        """This node's part of the site's count (None: no site, or it could
        not say; a warning line says why, and the advice is this node's
        alone)."""
        if self.url is None:
            return None
        try:
            addr = str(resolve(target.host, "HOST[:PORT]", target.port)[0][4][0])
            dest = site_prefix(addr)
            view = site_query.fetch(self.url, dest, target.direction, time.time(),
                                    self.timeout)
        except (OSError, ValueError, TamebpfError) as err:
            self.error = str(err)
            log.warning("--site %s not used: %s; the advice is this node's alone",
                        printable(self.url), printable(str(err)))
            return None
        return site_advice(site_streams, view, self.node, dest, target.direction)

    def json(self, out: dict[str, Any], sa: SiteAdvice | None) -> dict[str, Any]:
        """The JSON's "site" object; the advice is then this node's part."""
        if self.url is None:
            return out
        out["site"] = {"prometheus": self.url, "node": self.node, "error": self.error,
                       **({} if sa is None else sa.to_json())}
        if sa is not None and out.get("advice"):
            out["advice"] = {**out["advice"], "num_flows": sa.streams,
                             "site_streams": sa.site_streams}
        return out


def _site_text(sa: SiteAdvice | None) -> str:
    if sa is None:
        return ""
    return f"{sa.text()}\nADVICE for this node: {count(sa.streams, 'stream')}\n"

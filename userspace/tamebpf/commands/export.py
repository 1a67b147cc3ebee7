"""`tamebpf export`: Prometheus metrics per transfer group, and a JSON-lines sink.

The metrics are read from the kernel at scrape time (tamebpf.exporter.collector); the
list is docs/metrics.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Protocol

from tamebpf import siteconfig
from tamebpf.cap.book import FollowBook
from tamebpf.cap.follow import Follower
from tamebpf.cap.scoutacks import ScoutAcks
from tamebpf.cap.view import cap_kernel, cap_table, read_caps
from tamebpf.common.errors import TamebpfError, UsageError
from tamebpf.common.lifecycle import terminate_as_exit
from tamebpf.common.logs import log
from tamebpf.common.outfile import OutputFile
from tamebpf.common.values import parse_count, parse_duration, parse_host_port
from tamebpf.exporter.acksampling import AckSampler
from tamebpf.exporter.jsonl import reading_to_jsonl
from tamebpf.exporter.server import MetricsServer
from tamebpf.exporter.webconfig import WebConfig, load_web_config
from tamebpf.groups.aggregate import Aggregator
from tamebpf.kernel.flows import FlowReader
from tamebpf.options import settings_from
from tamebpf.parsers.export import DEFAULT_LISTEN
from tamebpf.paths.passive import PathLearner
from tamebpf.paths.store import PathStore, state_dir
from tamebpf.paths.where import netns_id, resolve

if TYPE_CHECKING:
    from tamebpf.exporter.collector import TamebpfCollector


MIN_INTERVAL_S, MAX_INTERVAL_S = 0.01, 86400.0  # a JSON line at most every 10 ms, at least daily


def parse_listen(text: str) -> tuple[str, int] | None:
    """'127.0.0.1:9477', '[::1]:9477', ':9477' (every address) or 'off'."""
    if text == "off":
        return None
    if ":" not in text:
        raise UsageError(f"bad --listen {text!r}: expected ADDR:PORT, e.g. {DEFAULT_LISTEN}")
    host, port = parse_host_port(text, "--listen", empty_host="0.0.0.0", port_zero=True)
    resolve(host, "--listen", port)
    return host, port


def run(args: argparse.Namespace) -> int:
    node = siteconfig.node_name(args.node)
    listen = parse_listen(args.listen)
    if listen is None and not args.jsonl:
        raise UsageError("nothing to do: --listen off and no --jsonl FILE")
    interval = parse_duration(args.interval, "--interval", MIN_INTERVAL_S, MAX_INTERVAL_S)
    max_groups = parse_count(args.max_groups, "--max-groups", 1)
    max_connections = parse_count(args.max_connections, "--max-connections", 1, 65536)
    web = None if args.web_config is None else load_web_config(args.web_config)
    if web is not None and listen is None:
        raise UsageError("--web-config with --listen off: nothing is served")
    agg = Aggregator(args.group_by, settings_from(args), max_groups=max_groups)
    TamebpfCollector = prometheus_collector()
    try:
        with sink(args.jsonl) as out, terminate_as_exit(on_hangup=_hung_up), \
                FlowReader(cgroup=args.cgroup, netns=args.netns, verbose=args.verbose,
                           command="export") as reader:
            book = FollowBook(state_dir(args.state_dir))
            learner = None if args.no_learn else path_learner(args)
            sampler = None if learner is None or not args.ack_sampling else \
                AckSampler(learner.netns, args.netns[0] if args.netns else None)
            collector = TamebpfCollector(reader, agg, node=node, per_flow=args.per_flow,
                                         caps=lambda: read_caps(args.state_dir),
                                         cap_table=cap_table,
                                         paths=PathStore(state_dir(args.state_dir)).latest,
                                         follows=book.specs,
                                         ack_windows=dict if sampler is None else sampler.counts)
            with serving(collector, listen, web, max_connections), \
                    learning(collector, learner, interval, sampler), following(collector, args):
                if out is None:
                    threading.Event().wait()
                else:
                    write_jsonl(collector, out, interval)
    except KeyboardInterrupt:
        pass
    return 0


def _hung_up() -> None:
    log.info("SIGHUP: export has nothing to reload (its options are read at start); "
             "stopping as on SIGTERM, restart it to change them", extra={"event": "hangup"})


def path_learner(args: argparse.Namespace) -> PathLearner | None:
    """The learner for the namespace export reads (None: flows of several
    namespaces, whose paths cannot be told apart by address)."""
    if len(args.netns) > 1:
        log.info("path memory: not learning from transfers: flows of %d network namespaces "
                 "cannot be told apart by address (give one --netns)", len(args.netns))
        return None
    return PathLearner(PathStore(state_dir(args.state_dir)),
                       netns_id(args.netns[0] if args.netns else None), settings_from(args))


@contextlib.contextmanager
def periodic(work: Callable[[], None], every_s: float, name: str) -> Iterator[None]:
    """Runs work every every_s on a thread of its own while the block runs;
    on the way out the thread is stopped and waited for (up to 5 s) before
    the caller tidies what work uses."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(every_s):
            work()

    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


@contextlib.contextmanager
def learning(collector: TamebpfCollector, learner: PathLearner | None,
             interval: float, sampler: AckSampler | None = None) -> Iterator[None]:
    """Every interval, the groups of a reading (a scrape's, if one is
    recent) go to path memory; a failed write is logged, the export goes on.
    With a sampler, a path that needs a capacity first gets a window on its
    transfers' ACKs (exporter/acksampling.py), in this same thread: one
    window at a time, cut short when the export stops."""
    if learner is None:
        yield
        return
    halt = threading.Event()

    def observe() -> None:
        # Another reader's reading when there is one (the JSON-lines sink's,
        # a scrape's): a refresh of our own between theirs would cut their
        # rate windows short (export's jsonl once read 0 streams).
        reading = collector.read(max_age_s=2 * interval)
        try:
            # One read of path memory a step, for the sampler and the learner:
            # both want every path's newest entry.
            newest = learner.newest(reading.groups)
            measured = None
            if sampler is not None:
                sampler.sample(reading.groups, newest, collector.open_flows, collector.agg.key,
                               halt.wait, time.monotonic())
                measured = sampler.measured(time.monotonic())
            learner.observe(reading.groups, reading.time_s, measured, newest)
        except (sqlite3.Error, OSError) as err:
            log.warning("path memory in %s could not be written (%s)",
                        learner.store.directory, err, extra={"event": "paths_error"})

    with periodic(observe, interval, "path-learner"):
        try:
            yield
        finally:
            halt.set()  # a window open now closes before periodic waits for the thread


FOLLOW_STEP_S = 2.0  # the follow caps' agent reads flows this often (cap/follow.py)


@contextlib.contextmanager
def following(collector: TamebpfCollector, args: argparse.Namespace) -> Iterator[None]:
    """Caps that follow their path (docs/paths.md): every FOLLOW_STEP_S the
    follower reads the caps' streams and sets their targets. Idle when no
    cap follows (one read of the follow book a step)."""
    kernel = cap_kernel()
    if kernel is None:
        yield
        return
    store = PathStore(state_dir(args.state_dir))
    # A following cap whose path has no capacity samples its scout's ACKs
    # (cap/scoutacks.py), with export's other learning.
    scout_acks = None if args.no_learn else \
        ScoutAcks(store, args.netns[0] if len(args.netns) == 1 else None)
    follower = Follower(FollowBook(state_dir(args.state_dir)), store, kernel,
                        scout_acks=scout_acks, node=collector.node)

    def step() -> None:
        specs = follower.book.specs()
        if not specs:
            return
        try:
            follower.step(collector.open_flows(), cap_table(), specs=specs)
        except (TamebpfError, sqlite3.Error, OSError) as err:
            log.warning("following caps: %s", err, extra={"event": "follow_error"})

    try:
        with periodic(step, FOLLOW_STEP_S, "cap-follow"):
            yield
    finally:
        follower.close()


def prometheus_collector() -> type[TamebpfCollector]:
    """The collector, imported here rather than with the command line: every
    other command runs without prometheus_client (EL9 packages none for
    Python 3.11), and this one says how to get it."""
    try:
        from tamebpf.exporter.collector import TamebpfCollector
    except ModuleNotFoundError as err:
        raise TamebpfError(
            f"'tamebpf export' needs the Python package {err.name}",
            "install it: apt install python3-prometheus-client (Debian), "
            "python3.11 -m pip install prometheus_client (EL9)") from None
    return TamebpfCollector


@contextlib.contextmanager
def serving(collector: TamebpfCollector, listen: tuple[str, int] | None,
            web: WebConfig | None = None, max_connections: int = 1024) -> Iterator[None]:
    if listen is None:
        yield
        return
    from prometheus_client import make_wsgi_app

    from tamebpf.exporter.collector import make_registry

    host, port = listen
    app = make_wsgi_app(make_registry(collector))
    try:
        server = MetricsServer(host, port, app if web is None else web.guard(app),
                               None if web is None else web.context, max_connections)
    except OSError as err:
        raise TamebpfError(f"cannot listen on {host}:{port}: {err.strerror}",
                           "pick another --listen ADDR:PORT") from None
    addr, bound_port = str(server.server_address[0]), server.server_address[1]
    shown = f"[{addr}]" if ":" in addr else addr
    scheme = "http" if web is None else web.scheme
    log.info("serving metrics on %s://%s:%d/metrics%s", scheme, shown, bound_port,
             " (basic auth)" if web is not None and web.users else "",
             extra={"event": "listening", "port": bound_port})
    server.start()
    try:
        yield
    finally:
        server.close()


class Lines(Protocol):
    def write(self, text: str, /) -> object: ...
    def flush(self) -> None: ...


def sink(path: str | None) -> contextlib.AbstractContextManager[Lines | None]:
    """Where --jsonl's lines go: stdout for '-', else FILE opened for
    appending before anything is loaded (common/outfile.py), and kept open."""
    if path is None:
        return contextlib.nullcontext()
    if path == "-":
        return contextlib.nullcontext(sys.stdout)
    return OutputFile(path, "--jsonl", append=True)


def write_jsonl(collector: TamebpfCollector, out: Lines, interval: float,
                iterations: int | None = None) -> None:
    """Every interval, a fresh reading as JSON lines (on a fixed schedule)."""
    collector.read(0)  # the baseline for the rates
    due = time.monotonic() + interval
    done = 0
    while iterations is None or done < iterations:
        time.sleep(max(0.0, due - time.monotonic()))
        due += interval
        if due <= time.monotonic():
            due = time.monotonic() + interval
        reading = collector.read(0)
        for rec in reading_to_jsonl(reading, len(collector.programs)):
            out.write(json.dumps(rec, allow_nan=False) + "\n")
        out.flush()
        done += 1

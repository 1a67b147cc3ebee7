"""`tamebpf run -- CMD`: run a transfer the way tamebpf advises (docs/run.md)."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys

from tamebpf import siteconfig
from tamebpf.common.errors import UsageError
from tamebpf.common.logs import log
from tamebpf.common.outfile import OutputFile
from tamebpf.common.values import parse_url
from tamebpf.kernel.netns import check_netns
from tamebpf.options import (
    JSON_INDENT,
    parse_rate_mbps,
    settings_from,
)
from tamebpf.paths.where import check_url_host
from tamebpf.runner.session import RunOptions, Session
from tamebpf.runner.summary import Summary, render


def command_of(argv: list[str]) -> list[str]:
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise UsageError("no command to run", "give it after --: tamebpf run -- CMD [ARGS...]")
    return argv


def run(args: argparse.Namespace) -> int:
    argv = command_of(args.argv)
    settings = settings_from(args)
    rate = None if args.rate is None else parse_rate_mbps(args.rate, "--rate")
    if rate is not None and rate <= 0:
        raise UsageError(f"--rate {args.rate}: give a rate above 0")
    if args.netns is not None:
        check_netns(args.netns)
    site = siteconfig.site_url(args.site)
    if site is not None:
        check_url_host(parse_url(site, "--site"), "--site host")
    node = siteconfig.node_name(args.node)
    if args.log_level == "info":
        # What following does step by step is news for a service's log, not
        # for the user of one command: the summary says it (--log-level
        # debug shows the steps).
        log.setLevel(logging.WARNING)
    # --json=FILE is opened before CMD starts and written through the same
    # descriptor once it has ended: CMD's time is when a link could be
    # swapped in at the name (common/outfile.py).
    out = None if args.json in (None, "-") else OutputFile(args.json, "--json")
    with out or contextlib.nullcontext():
        session = Session(RunOptions(argv, settings, args.netns, rate, args.state_dir,
                                     not args.no_learn, args.verbose, site, node))
        status, summary = session.run()
        report(summary, args.json, out)
    return status


def report(summary: Summary, json_to: str | None, out: OutputFile | None) -> None:
    if json_to is None:
        print(render(summary), file=sys.stderr)
        return
    text = json.dumps(summary.to_json(), indent=JSON_INDENT, allow_nan=False) + "\n"
    if out is None:
        sys.stderr.write(text)
        return
    try:
        out.replace(text)
    except OSError as err:
        print(f"tamebpf: --json={json_to}: {err.strerror}", file=sys.stderr)
        print(render(summary), file=sys.stderr)

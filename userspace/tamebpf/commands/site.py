"""`tamebpf site`: the site's view through its Prometheus (docs/deploy.md)."""

from __future__ import annotations

import argparse
import sys
import time

from tamebpf import siteconfig
from tamebpf.common.errors import TamebpfError, UsageError
from tamebpf.common.values import parse_duration, parse_url
from tamebpf.options import dump_json, settings_from
from tamebpf.paths import remote
from tamebpf.paths.where import check_url_host
from tamebpf.present.site import SitePath, render, to_json
from tamebpf.site import query
from tamebpf.site.budget import pick

MIN_TIMEOUT_S, MAX_TIMEOUT_S = 0.1, 60.0


def run(args: argparse.Namespace) -> int:
    url = siteconfig.site_url(args.site)
    if url is None:
        raise UsageError("no site's Prometheus to ask",
                         "give --site URL, or set [site] prometheus in "
                         f"{siteconfig.config_path()}")
    check_url_host(parse_url(url, "--site"), "--site host")
    node = siteconfig.node_name(args.node)
    timeout = parse_duration(args.timeout, "--timeout", MIN_TIMEOUT_S, MAX_TIMEOUT_S)
    settings = settings_from(args)
    now = time.time()
    try:
        views = query.fetch_all(url, now, timeout)
    except (OSError, query.SiteDataError) as err:
        raise TamebpfError(f"no site view from {url}: {err}",
                           "is Prometheus up there, and does it scrape the nodes' "
                           "'tamebpf export'?") from None
    paths = []
    for (dest, direction), view in views.items():
        try:
            answer = remote.fetch_within(url, dest, direction, now, timeout)
        except (OSError, ValueError) as err:
            paths.append(SitePath(dest, direction, view, None, f"the nodes' fits: {err}"))
            continue
        budget = pick(None, [(r.node, r.entry) for r in answer.entries], settings, now)
        paths.append(SitePath(dest, direction, view, budget))
    if args.json:
        dump_json(to_json(url, node, paths, now), sys.stdout)
    else:
        sys.stdout.write(render(url, node, paths))
    return 0

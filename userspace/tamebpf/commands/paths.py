"""`tamebpf paths`: what path memory knows (list), and `paths forget`."""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import sqlite3
import sys
import time
from collections.abc import Iterator

from tamebpf.common.errors import UsageError
from tamebpf.common.values import Network, parse_network
from tamebpf.options import dump_json
from tamebpf.paths.statedir import StateFileRefused
from tamebpf.paths.store import PathStore, state_dir
from tamebpf.present.paths import entry_json, render_paths


@contextlib.contextmanager
def one_line(store: PathStore) -> Iterator[None]:
    """A refused, unreadable or unwritable path memory is one line and exit 2:
    `paths` exists to read that directory, so one it cannot use is the input
    to fix, as a --state-dir naming a file is."""
    try:
        yield
    except StateFileRefused as err:
        raise UsageError(f"path memory is off: {err}") from None
    except (sqlite3.Error, OSError) as err:
        raise UsageError(f"path memory in {store.directory} could not be used: {err}",
                           "check the directory's permissions and free space, or give "
                           "--state-dir") from None


def run_list(args: argparse.Namespace) -> int:
    store = PathStore(state_dir(getattr(args, "state_dir", None)))
    with one_line(store):
        entries = store.latest()
    now = time.time()
    if args.json:
        dump_json({"state_dir": store.directory, "paths": [entry_json(e, now)
                                                            for e in entries]}, sys.stdout)
    else:
        sys.stdout.write(render_paths(entries, now, store.directory))
    return 0


def parse_cidr(text: str) -> Network:
    return parse_network(text, "--dest", "an address or prefix, e.g. 198.51.100.7 or "
                         "198.51.100.0/24")


def inside(dest: str, net: Network) -> bool:
    try:
        d = ipaddress.ip_network(dest)
    except ValueError:
        return False
    return d.version == net.version and d.subnet_of(net)  # type: ignore[arg-type]


def run_forget(args: argparse.Namespace) -> int:
    net = None if args.all else parse_cidr(args.dest)
    store = PathStore(state_dir(getattr(args, "state_dir", None)))
    with one_line(store):
        dests = None if net is None else [d for d in store.destinations() if inside(d, net)]
        gone = store.forget(dests)
    what = "all paths" if net is None else f"destinations in {net}"
    print(f"forgot {gone} {'entry' if gone == 1 else 'entries'} ({what})")
    return 0

"""Values typed on the command line, parsed the same way by every command,
and the options several commands share.

Pure (no I/O). The parsers of single values (and host:port) live in
tamebpf.common.values. Each
parser raises UsageError naming the option and the bad
value, so a bad input is one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING, Any

from tamebpf.common.defaults import (
    DEFAULT_GAIN_THRESHOLD,
    DEFAULT_MAX_IMPACT,
    DEFAULT_MAX_STREAMS,
    GROUP_BY,
)
from tamebpf.common.errors import UsageError
from tamebpf.common.values import parse_count as parse_count  # shared from here too
from tamebpf.common.values import parse_duration as parse_duration
from tamebpf.common.values import parse_fraction as parse_fraction
from tamebpf.common.values import parse_rate_mbps as parse_rate_mbps

if TYPE_CHECKING:
    from tamebpf.model import Settings

JSON_INDENT = 1  # every command's --json output


class ExamplesFormatter(argparse.HelpFormatter):
    """Help whose prose is wrapped to the terminal, as argparse's default,
    but whose `examples:` blocks (in the epilog) keep their lines and
    alignment; scripts/gen_man.py makes those the man page's EXAMPLES."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        wrap = super()._fill_text
        return "\n\n".join(
            block if block.lstrip().startswith("examples:") else wrap(block, width, indent)
            for block in text.strip("\n").split("\n\n"))


def dump_json(obj: Any, out: IO[str]) -> None:
    """The one JSON layout of --json: indented, no NaN, a final newline."""
    json.dump(obj, out, indent=JSON_INDENT, allow_nan=False)
    out.write("\n")


def dump_json_objects(keys: Sequence[str], rows: Sequence[Sequence[Any]], out: IO[str],
                      chunk: int = 1000) -> None:
    """A long JSON array of objects, one a line, each row's values under
    `keys`: the layout of json.dumps for each {key: value} (scalar values
    only), in a fraction of its time for 100k flows. json's C encoder writes
    a whole chunk of rows as arrays with NUL between values (a NUL inside a
    string is escaped, so every raw NUL is a separator), and one %-template
    puts the keys back: no Python loop per value."""
    encode = json.JSONEncoder(allow_nan=False, separators=("\0", ": ")).encode
    row = "{" + ", ".join(json.dumps(k).replace("%", "%%") + ": %s" for k in keys) + "}"
    whole = ",\n".join([row] * chunk)
    out.write("[")
    sep = "\n"
    for start in range(0, len(rows), chunk):
        part = rows[start:start + chunk]
        template = whole if len(part) == chunk else ",\n".join([row] * len(part))
        # [[v,v,...],[v,...]] -> v NUL v NUL ... (rows joined the same way)
        values = encode(part)[2:-2].replace("]\0[", "\0").split("\0")
        out.write(sep + template % tuple(values))
        sep = ",\n"
    out.write("\n]\n")


def add_advice_options(p: argparse.ArgumentParser, *, required_impact: bool = False) -> None:
    """--max-impact, --gain-threshold and --max-streams: the limits of the
    advice, the same for every command that advises (advise, predict, watch,
    export). `advise` asks for --max-impact explicitly: it sends traffic."""
    p.add_argument("--max-impact", required=required_impact,
                   default=None if required_impact else str(DEFAULT_MAX_IMPACT), metavar="PCT",
                   help="largest tolerated throughput loss of other traffic: 5%% or 0.05"
                   + ("" if required_impact else f" (default {DEFAULT_MAX_IMPACT:.0%}%)"))
    p.add_argument("--gain-threshold", default=str(DEFAULT_GAIN_THRESHOLD), metavar="PCT",
                   help="stop adding streams when one more adds less than this share of "
                   f"the throughput; 0 turns it off (default {DEFAULT_GAIN_THRESHOLD:.0%}%)")
    p.add_argument("--max-streams", default=str(DEFAULT_MAX_STREAMS), metavar="N",
                   help=f"never advise more than this (default {DEFAULT_MAX_STREAMS})")


def add_state_dir_option(p: argparse.ArgumentParser, sub: bool = False) -> None:
    """Where path memory lives (docs/paths.md); advise and paths share it.
    `sub`: on a sub-command whose parent takes it too (`paths forget`): no
    default there, so the parent's value is not overwritten."""
    p.add_argument("--state-dir", metavar="DIR", default=argparse.SUPPRESS if sub else None,
                   help="path memory's directory (default: $TAMEBPF_STATE_DIR, else "
                   "/var/lib/tamebpf; created on first write)")


def settings_from(args: argparse.Namespace, **extra: Any) -> Settings:
    """The Settings that add_advice_options' values describe."""
    # Imported when a command runs, not with the parsers that add the options:
    # --help and a mistyped option need no model (docs/performance.md, "Startup").
    from tamebpf.model import ModelInputError, Settings

    max_impact = parse_fraction(args.max_impact, "--max-impact")
    gain = parse_fraction(args.gain_threshold, "--gain-threshold")
    max_streams = parse_count(args.max_streams, "--max-streams")
    try:
        return Settings(max_impact, gain, max_streams, **extra)
    except ModelInputError as err:
        raise UsageError(f"bad --max-streams {args.max_streams!r}: {err}") from None


def add_reader_arguments(p: argparse.ArgumentParser) -> None:
    """What `watch` and `export` read and how they group it."""
    p.add_argument("--cgroup", metavar="PATH",
                   help="only flows in this cgroup v2 subtree; default: every cgroup")
    p.add_argument("--netns", metavar="NAME", action="append", default=[],
                   help="read flows in this network namespace ('ip netns' name or "
                   "/proc/PID/ns/net); repeatable; default: our own")
    p.add_argument("--group-by", choices=GROUP_BY, default="comm",
                   help="group flows by process name or by cgroup, and destination "
                   "(default comm)")
    add_advice_options(p)
    p.add_argument("-v", "--verbose", action="store_true", help="libbpf's debug log on stderr")


def add_site_options(p: argparse.ArgumentParser, what: str) -> None:
    """--site and --node: this node shares the path's budget with the
    site's other nodes (docs/deploy.md, "A site of several nodes")."""
    p.add_argument("--site", metavar="URL",
                   help=f"the site's Prometheus: {what} (default: [site] prometheus in "
                   "/etc/tamebpf/tamebpf.toml; none: this node alone)")
    p.add_argument("--node", metavar="NAME",
                   help="this node's name in the site's series, as its 'tamebpf export "
                   "--node' (default: [site] node, else the short host name)")

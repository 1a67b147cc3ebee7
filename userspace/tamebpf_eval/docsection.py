"""Write one generated section of a Markdown file, keeping the rest.

Benchmarks and evaluations each own a section between two HTML comments
(`<!-- NAME:start -->` ... `<!-- NAME:end -->`), so several scripts can
write into one document (docs/performance.md) without touching each
other's numbers or the hand-written text around them.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


def write_section(path: str, name: str, text: str, title: str) -> None:
    """Replace section `name` of `path` with `text` (which carries the
    markers), or append it; a missing file starts with `# title`."""
    start, end = markers(name)
    old = f"# {title}\n\n"
    if os.path.exists(path):
        with open(path) as f:
            old = f.read()
    if start in old and end in old:
        head, rest = old.split(start, 1)
        new = head + text.rstrip("\n") + rest.split(end, 1)[1]
    else:
        new = old.rstrip("\n") + "\n\n" + text
    with open(path, "w") as f:
        f.write(new)


def replay_main(doc: str, report: Callable[..., str], section: str, title: str,
                results: str | None = None) -> int:
    """The command line of an evaluation that replays stored records into
    one section: `--write FILE` writes the section there (a missing file
    starts with `# title`), and the text is printed either way. With
    `results` (a default path), `--results PATH` is passed to `report`."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    if results is not None:
        ap.add_argument("--results", default=results)
    ap.add_argument("--write", metavar="FILE", help="write the section into this Markdown file")
    args = ap.parse_args()
    text = report(args.results) if results is not None else report()
    sys.stdout.write(text)
    if args.write:
        write_section(args.write, section, text, title)
    return 0

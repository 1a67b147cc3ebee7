"""Write one generated section of a Markdown file, keeping the rest.

Benchmarks and evaluations each own a section between two HTML comments
(`<!-- NAME:start -->` ... `<!-- NAME:end -->`), so several scripts can
write into one document (docs/performance.md) without touching each
other's numbers or the hand-written text around them.
"""

from __future__ import annotations

import os


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


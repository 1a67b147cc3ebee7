"""Progress of a probe on stderr (advise, cap --auto): anything that runs
for seconds shows that it is running and how far it got."""

from __future__ import annotations

import sys

from tamebpf.common.records import Progress
from tamebpf.common.words import count


class ProgressLine:
    """Progress on stderr: one rewritten line on a terminal, else a line a
    second (logs and pipes should not fill with carriage returns)."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.last: tuple[int, int] = (0, -1)

    def __call__(self, p: Progress) -> None:
        rate = "" if p.goodput_mbps is None else f", {p.goodput_mbps:9.1f} Mbit/s"
        elapsed = min(p.elapsed_s, p.duration_s)
        when = (f"{elapsed:4.1f} s (until settled, at most {p.duration_s:g} s)"
                if p.until_settled else f"{elapsed:.1f}/{p.duration_s:g} s")
        epochs = "" if p.epochs is None else f", {p.epochs:g} epochs"
        line = f"probe {p.index}/{p.total}: {count(p.streams, 'stream')}, {when}{epochs}{rate}"
        if self.tty:
            sys.stderr.write("\r\x1b[K" + line)
            sys.stderr.flush()
        elif (p.index, int(p.elapsed_s)) != self.last:
            self.last = (p.index, int(p.elapsed_s))
            print(line, file=sys.stderr, flush=True)

    def clear(self) -> None:
        if self.tty:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()

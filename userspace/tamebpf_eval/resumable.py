"""What the resumable eval runs (the fresh draws) share: they take hours,
span sessions and may be stopped at any case, so each measures only the
cases not yet in its results file, saves after each case, and scores
from the file alone with --report."""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from tamebpf_eval.cases import log
from tamebpf_eval.docsection import write_section

Record = dict[str, Any]


class Keyed(Protocol):
    @property
    def key(self) -> str: ...


def _exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def arguments(doc: str | None, results_help: str) -> argparse.ArgumentParser:
    """The options every resumable run takes; a run adds its own. SIGTERM
    becomes SystemExit, so a stopped run tears its testbed down as Ctrl-C
    does."""
    signal.signal(signal.SIGTERM, _exit)
    ap = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    ap.add_argument("--only", help="run only cases whose key contains this")
    ap.add_argument("--report", action="store_true", help="measure nothing; score and write")
    ap.add_argument("--results", help=results_help)
    ap.add_argument("--write", metavar="FILE", help="write the tables into this Markdown file")
    return ap


def measure_missing(records: list[Record], cases: Iterable[Keyed], only: str | None,
                    measure: Callable[[Any], Record],
                    save: Callable[[list[Record]], None]) -> None:
    """Measure, in the given order, each case not yet in records whose key
    contains `only`, and save after each one."""
    done = {r["key"] for r in records}
    todo = [c for c in cases if c.key not in done and (not only or only in c.key)]
    for i, case in enumerate(todo, 1):
        log(f"case {i}/{len(todo)}: {case.key}")
        records.append(measure(case))
        save(records)


def publish(text: str, write: str | None, section: str, title: str) -> None:
    """Print the report; with --write, also put it in its section of that page."""
    sys.stdout.write(text)
    if write:
        write_section(write, section, text, title)

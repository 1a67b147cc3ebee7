"""The advised stream count as flags for common transfer tools (pure presentation).

`tamebpf advise --format TOOL` prints one line a script can paste into the
tool's command line; `--format shell` prints the bare number. N is the
number of TCP connections that carry the data at the same time, which is
what the model counts; each tool's own documentation (cited per entry) says
which flag sets that. tests/integration/test_toolflags_streams.py runs every
tool with the printed flags and counts its streams with `tamebpf flows`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

log = logging.getLogger("tamebpf")


@dataclass(frozen=True)
class ToolFlags:
    template: str  # the flags, with {n} for the stream count
    max_streams: int | None = None  # the most the tool accepts (None: no limit)


TOOLS: dict[str, ToolFlags] = {
    # globus-url-copy -help (globus-gass-copy-progs 10.12): "-p <parallelism>:
    # specify the number of parallel data connections should be used". The
    # Globus service and its CLI set parallelism elsewhere (per endpoint).
    "globus-url-copy": ToolFlags("-p {n}"),
    # rclone help flags (1.60): "--transfers: number of file transfers to run
    # in parallel", "--multi-thread-streams: max number of streams to use for
    # multi-thread downloads". So one file at a time, split into N streams.
    # rclone splits only files above --multi-thread-cutoff (default 250Mi),
    # into parts of at least half the cutoff: a file gets min(N, size/125Mi)
    # streams (measured with 1.60.1: 300 MiB and N=4 gave 2 parts of 150 MiB).
    "rclone": ToolFlags("--transfers 1 --multi-thread-streams {n}"),
    # xrdcp(1) (xrootd-client 5.5.3): "-S | --streams num: use num parallel
    # data streams to do the transfer (the main stream is in this case not
    # used to carry out the transfer). The maximum value is 15." Measured:
    # --streams 4 opens 5 connections, of which 4 carry the file.
    "xrdcp": ToolFlags("--streams {n}", max_streams=15),
    # FDT's documentation (fdt.cern.ch, client options): "-P <number>: number
    # of parallel streams to use".
    "fdt": ToolFlags("-P {n}"),
    # iperf3(1): "-P, --parallel n: number of parallel client streams to run".
    "iperf3": ToolFlags("-P {n}"),
    "shell": ToolFlags("{n}"),
}

# Old names still accepted, with a warning: "globus" was globus-url-copy.
DEPRECATED: dict[str, str] = {"globus": "globus-url-copy"}


class ToolChoices(tuple[str, ...]):
    """The --format choices: lists only the current names (help, man page,
    completion) but also accepts the deprecated ones (argparse checks
    choices with `in`)."""

    def __contains__(self, name: object) -> bool:
        return name in DEPRECATED or tuple.__contains__(self, name)


FORMATS: tuple[str, ...] = ToolChoices(TOOLS)


def tool_flags(tool: str, streams: int) -> str:
    """The flags (one line, newline-terminated) that make TOOL use STREAMS streams.

    A deprecated tool name and a count above what the tool accepts are
    warned about on the "tamebpf" logger (stderr), so the line stays pasteable."""
    if tool in DEPRECATED:
        log.warning("--format %s is deprecated: use --format %s", tool, DEPRECATED[tool])
        tool = DEPRECATED[tool]
    if tool not in TOOLS:
        raise ValueError(f"unknown tool {tool!r}: choose one of {', '.join(FORMATS)}")
    if streams < 1:
        raise ValueError(f"stream count {streams} must be at least 1")
    spec = TOOLS[tool]
    if spec.max_streams is not None and streams > spec.max_streams:
        log.warning("%s takes at most %d streams: advised %d, printing %d",
                    tool, spec.max_streams, streams, spec.max_streams)
        streams = spec.max_streams
    return spec.template.format(n=streams) + "\n"

"""The advised stream count as flags for common transfer tools (pure presentation).

`tamebpf advise --format TOOL` prints one line a script can paste into the
tool's command line; `--format shell` prints the bare number. N is the
number of TCP connections that carry the data at the same time, which is
what the model counts; each tool's own documentation (cited per entry) says
which flag sets that. tests/integration/test_toolflags_streams.py runs every
tool with the printed flags and counts its streams with `tamebpf flows`.

Some tools run several transfers at once, each with its own streams
(`--concurrency K`): then both flags are printed, and the streams per
transfer are the advice divided by K, rounded down, so that all of them
together stay within the advice.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

log = logging.getLogger("tamebpf")


@dataclass(frozen=True)
class ToolFlags:
    template: str  # the flags, with {n} for the stream count
    max_streams: int | None = None  # the most the tool accepts (None: no limit)
    # The flags for {k} transfers at once with {n} streams each (None: the
    # tool has no such second axis).
    concurrent: str | None = None
    # True where the transfers at once share the tool's {n} streams to one
    # server (xrdcp) rather than opening {n} each.
    shared_streams: bool = False
    # The flags of its download form (advise --reverse) where they differ;
    # None: the same flags set the streams of a download.
    download: str | None = None


TOOLS: dict[str, ToolFlags] = {
    # globus-url-copy -help (globus-gass-copy-progs 10.12): "-p <parallelism>:
    # specify the number of parallel data connections should be used". The
    # Globus service and its CLI set parallelism elsewhere (per endpoint).
    # "-cc <concurrency>: number of concurrent ftp connections to use for
    # multiple transfers": each of the K transfers opens its own -p streams.
    "globus-url-copy": ToolFlags("-p {n}", concurrent="-cc {k} -p {n}"),
    # rclone help flags (1.60): "--transfers: number of file transfers to run
    # in parallel", "--multi-thread-streams: max number of streams to use for
    # multi-thread downloads". So one file at a time, split into N streams.
    # rclone splits only files above --multi-thread-cutoff (default 250Mi),
    # into parts of at least half the cutoff: a file gets min(N, size/125Mi)
    # streams (measured with 1.60.1: 300 MiB and N=4 gave 2 parts of 150 MiB).
    # --transfers K runs K files at once, each split into its own N streams.
    "rclone": ToolFlags("--transfers 1 --multi-thread-streams {n}",
                        concurrent="--transfers {k} --multi-thread-streams {n}"),
    # xrdcp(1) (xrootd-client 5.5.3): "-S | --streams num: use num parallel
    # data streams to do the transfer (the main stream is in this case not
    # used to carry out the transfer). The maximum value is 15." Measured:
    # --streams 4 opens 5 connections, of which 4 carry the file. "--parallel
    # n: number of copy jobs to be run simultaneously"; the jobs to one
    # server share its connection and so its streams (measured with 5.5.3:
    # --parallel 4 --streams 2 opens 3 connections, 2 carrying data).
    "xrdcp": ToolFlags("--streams {n}", max_streams=15,
                       concurrent="--parallel {k} --streams {n}", shared_streams=True),
    # FDT's documentation (fdt.cern.ch, client options): "-P <number>: number
    # of parallel streams to use"; "-pull: pull mode (the client receives)".
    "fdt": ToolFlags("-P {n}", download="-pull -P {n}"),
    # iperf3(1): "-P, --parallel n: number of parallel client streams to run";
    # "-R, --reverse: reverse the direction of a test, so that the server
    # sends data to the client".
    "iperf3": ToolFlags("-P {n}", download="-R -P {n}"),
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


def current_name(tool: str) -> str:
    """TOOL's current name (a deprecated one warned about), or ValueError."""
    if tool in DEPRECATED:
        log.warning("--format %s is deprecated: use --format %s", tool, DEPRECATED[tool])
        tool = DEPRECATED[tool]
    if tool not in TOOLS:
        raise ValueError(f"unknown tool {tool!r}: choose one of {', '.join(FORMATS)}")
    return tool


def concurrency_refusal(tool: str) -> str | None:
    """Why TOOL takes no --concurrency (no second axis), or None if it takes one."""
    name = DEPRECATED.get(tool, tool)
    if name not in TOOLS or TOOLS[name].concurrent is not None:
        return None
    takers = [n for n, spec in TOOLS.items() if spec.concurrent is not None]
    return (f"--format {name} has one axis only (streams, no transfers at once): "
            f"--concurrency works with {', '.join(takers)}")


def tool_flags(tool: str, streams: int, concurrency: int | None = None,
               download: bool = False) -> str:
    """The flags (one line, newline-terminated) that make TOOL use STREAMS
    streams in all; with CONCURRENCY, for that many transfers at once;
    with DOWNLOAD, in the tool's download form. (globus-url-copy, rclone
    and xrdcp name the direction by their source and destination, not by a
    flag: the same flags set a download's streams.)

    A deprecated tool name, a count above what the tool accepts and the
    streams per transfer rounded down are said on the "tamebpf" logger
    (stderr), so the line stays pasteable. A tool without a second axis
    given a concurrency is a ValueError."""
    tool = current_name(tool)
    if streams < 1:
        raise ValueError(f"stream count {streams} must be at least 1")
    spec = TOOLS[tool]
    if concurrency is None:
        template = spec.download if download and spec.download else spec.template
        return template.format(n=clamped(tool, streams)) + "\n"
    if spec.concurrent is None:
        raise ValueError(concurrency_refusal(tool))
    if concurrency < 1:
        raise ValueError(f"concurrency {concurrency} must be at least 1")
    if spec.shared_streams:
        return spec.concurrent.format(k=concurrency, n=clamped(tool, streams)) + "\n"
    if concurrency > streams:
        log.warning("advised %d streams, fewer than %d transfers at once: printing %d "
                    "transfers of 1 stream", streams, concurrency, streams)
        concurrency = streams
    per_transfer = streams // concurrency
    if per_transfer * concurrency != streams:
        log.warning("%d transfers at once: %d streams each, %d in all (the advised %d, "
                    "rounded down to a multiple of %d)", concurrency, per_transfer,
                    per_transfer * concurrency, streams, concurrency)
    return spec.concurrent.format(k=concurrency, n=clamped(tool, per_transfer)) + "\n"


def clamped(tool: str, streams: int) -> int:
    """STREAMS, or the most TOOL accepts (said on stderr)."""
    limit = TOOLS[tool].max_streams
    if limit is not None and streams > limit:
        log.warning("%s takes at most %d streams: advised %d, printing %d",
                    tool, limit, streams, limit)
        return limit
    return streams

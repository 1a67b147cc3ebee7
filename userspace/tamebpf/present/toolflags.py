"""The advised stream count as flags for common transfer tools (pure presentation).

`tamebpf advise --format TOOL` prints one line a script can paste into the
tool's command line; `--format shell` prints the bare number.
"""

from __future__ import annotations

# tool -> template of the flags that set its number of parallel streams
TOOL_FLAGS: dict[str, str] = {
    "globus": "-p {n}",                                    # globus-url-copy parallelism
    "rclone": "--transfers {n} --multi-thread-streams {n}",
    "xrdcp": "--streams {n}",
    "fdt": "-P {n}",
    "iperf3": "-P {n}",
    "shell": "{n}",
}

FORMATS: tuple[str, ...] = tuple(TOOL_FLAGS)


def tool_flags(tool: str, streams: int) -> str:
    """The flags (one line, newline-terminated) that make TOOL use STREAMS streams."""
    if tool not in TOOL_FLAGS:
        raise ValueError(f"unknown tool {tool!r}: choose one of {', '.join(FORMATS)}")
    if streams < 1:
        raise ValueError(f"stream count {streams} must be at least 1")
    return TOOL_FLAGS[tool].format(n=streams) + "\n"

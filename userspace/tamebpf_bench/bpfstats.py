"""What BPF programs cost, read from the kernel: run-time stats and CPU time.

The kernel counts each program's runs and run time only while run-time
stats are on (BPF_STATS_RUN_TIME); bpf_run_stats turns them on for a block
and the kernel turns them off when its fd closes, also if we die. A
program's time over the CPUs' busy time in the same span is the most it
can take from a transfer that is CPU-bound (loopback iperf3 is): what
goodput ratios on a noisy 2-CPU VM cannot resolve.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def bpf_run_stats() -> Iterator[None]:
    """Kernel BPF run-time stats while the context lasts (BPF_STATS_RUN_TIME)."""
    fd = ctypes.CDLL("libbpf.so.1", use_errno=True).bpf_enable_stats(0)
    if fd < 0:
        raise SystemExit(f"cannot enable BPF run-time stats: {os.strerror(-fd)}")
    try:
        yield
    finally:
        os.close(fd)


def bpftool_json(*argv: str) -> object:
    """bpftool's JSON answer; a listing with nothing in it (bpftool prints
    no JSON for a cgroup without programs) is an empty list."""
    out = subprocess.run(["bpftool", "-j", *argv], capture_output=True, text=True,
                         check=True, timeout=30).stdout
    return json.loads(out) if out.strip() else []


def own_prog_ids() -> set[int]:
    """The BPF programs this process holds open, by id (the fdinfo of its
    program fds; bpftool's pid lookup is not built in everywhere)."""
    out = set()
    for fd in os.listdir("/proc/self/fdinfo"):
        try:
            text = Path("/proc/self/fdinfo", fd).read_text()
        except OSError:
            continue  # closed meanwhile, or the listing's own fd
        for line in text.splitlines():
            if line.startswith("prog_id:") and "prog_type:" in text:
                out.add(int(line.split()[1]))
    return out


def own_prog_runs(name: str) -> tuple[int, int]:
    """(runs, total ns) of the programs called `name` that this process
    holds open: ours, not another tool's of the same name."""
    ours = own_prog_ids()
    progs = [p for p in bpftool_json("prog", "show")  # type: ignore[attr-defined]
             if p.get("name") == name and p["id"] in ours]
    if not progs:
        raise SystemExit(f"no BPF program {name!r} held by this process (pid {os.getpid()})")
    return sum(p.get("run_cnt", 0) for p in progs), sum(p.get("run_time_ns", 0) for p in progs)


def prog_runs(ids: set[int]) -> dict[int, tuple[str, int, int]]:
    """(name, runs, total ns) of the programs with these ids, by id."""
    return {p["id"]: (p.get("name", "?"), p.get("run_cnt", 0), p.get("run_time_ns", 0))
            for p in bpftool_json("prog", "show")  # type: ignore[attr-defined]
            if p["id"] in ids}


def prog_hooks(ids: set[int]) -> dict[int, str]:
    """Where each of these programs is attached, from its links, in the
    section names of bpf/*.bpf.c (tp_btf/NAME, iter/NAME, the cgroup
    hook); a program with no link is missing."""
    out = {}
    for link in bpftool_json("link", "show"):  # type: ignore[attr-defined]
        if link.get("prog_id") not in ids:
            continue
        if link.get("type") == "raw_tracepoint":
            hook = f"tp_btf/{link.get('tp_name', '?')}"
        elif link.get("type") == "iter":
            hook = f"iter/{link.get('target_name', '?')}"
        else:
            hook = str(link.get("attach_type", link.get("type", "?")))
        out[int(link["prog_id"])] = hook
    return out


def busy_cpu_ns() -> int:
    """Time all CPUs spent not idle since boot (/proc/stat), in ns: user,
    nice, system, irq, softirq and steal; idle and iowait are not busy."""
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = f
    return (user + nice + system + irq + softirq + steal) * 1_000_000_000 \
        // os.sysconf("SC_CLK_TCK")

"""Overhead of flow telemetry and pace caps on TCP throughput (make bench).

Loopback iperf3 with 1 and 16 streams, the sides of an arm in alternating
runs so that machine noise hits them alike; reports the median of the
paired ratios. With --direction receive the transfer is a download (iperf3
-R: the client, whose goodput is measured, receives). Three arms:
- telemetry (default): telemetry attached (and read once a second, as
  `watch` and `export` do) versus not attached;
- acks: export's passive capacity sampling (tamebpf.exporter.acksampling): telemetry
  on both sides, and on one an ACK sampling window (kernel/acktrain.AckWindow)
  held open on iperf3's connections for the whole run. That is the cost per
  received segment while a window is open, host wide; export opens one
  for 5 s, a few times an hour per path, and nothing runs per packet between.
  Goodput pairs on this VM wander by tens of percent, so the same runs also
  read the window's per-segment program from the kernel's BPF run-time
  stats: its share of the CPUs' busy time while the window was open, the
  most it can take from a CPU-bound transfer (tamebpf_bench.bpfstats);
- pace: the client in a cgroup of its own, four sides: none, telemetry, a
  pace cap on that cgroup (in the transfer's direction) whose rate is far
  above what loopback reaches, so that its per-socket work runs and limits
  nothing, and the cap with telemetry; run as two pairs back to back, so
  that telemetry attached / detached is measured without the cap and with
  it, and the cap / none beside. The runs with telemetry also read every
  program of ours from the run-time stats: runs and time per segment of the
  transfer (received, in a download), which is what runs per packet.
Writes its section of docs/performance.md with --write.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from tamebpf.cap.spec import parse_dest
from tamebpf.cap.table import PACE_NO_LIMIT, CapTable
from tamebpf.common.errors import TamebpfError
from tamebpf.common.lifecycle import terminate_as_exit
from tamebpf.common.records import Flow
from tamebpf.kernel.acktrain import AckWindow
from tamebpf.kernel.flows import FlowReader
from tamebpf_bench.bench_cap import bench_cgroup, cap_prog_ids
from tamebpf_bench.bpfstats import (
    bpf_run_stats,
    bpftool_json,
    busy_cpu_ns,
    own_prog_ids,
    own_prog_runs,
    prog_hooks,
    prog_runs,
)
from tamebpf_eval.commands import pin_dir
from tamebpf_eval.docsection import markers, write_section

SEND, RECEIVE = "send", "receive"


@dataclass(frozen=True)
class Side:
    """What is on during one side's iperf3 runs."""

    telemetry: bool = False
    window: bool = False  # an ACK sampling window on iperf3's connections
    cap: bool = False     # a pace cap on the client's cgroup that never binds


@dataclass(frozen=True)
class Arm:
    sides: dict[str, Side]
    blocks: tuple[tuple[str, ...], ...]  # sides run back to back (run_order)
    ratios: dict[str, tuple[str, str]]   # what is compared: (side, its baseline)


ARMS = {
    "telemetry": Arm({"off": Side(), "on": Side(telemetry=True)}, (("off", "on"),),
                     {"on/off": ("on", "off")}),
    "acks": Arm({"off": Side(telemetry=True), "on": Side(telemetry=True, window=True)},
                (("off", "on"),), {"on/off": ("on", "off")}),
    "pace": Arm({"none": Side(), "telemetry": Side(telemetry=True), "cap": Side(cap=True),
                 "cap+telemetry": Side(telemetry=True, cap=True)},
                (("none", "telemetry"), ("cap", "cap+telemetry")),
                {"telemetry attached / detached, no cap": ("telemetry", "none"),
                 "telemetry attached / detached, cap set": ("cap+telemetry", "cap"),
                 "cap set / none, telemetry detached": ("cap", "none")}),
}

# The arm's docs section, by (arm, direction).
SECTIONS = {("telemetry", SEND): "bench_overhead", ("acks", SEND): "bench_acks",
            ("pace", RECEIVE): "bench_download"}


def section_name(arm: str, direction: str) -> str:
    return SECTIONS.get((arm, direction), f"bench_{arm}_{direction}")


def run_order(blocks: tuple[tuple[str, ...], ...], rep: int) -> list[tuple[str, ...]]:
    """The blocks of one rep in the order they run, each block's sides
    back to back: reversed on odd reps, and the blocks themselves in
    reverse order every other pair of reps, so that over four reps each
    side runs as often before its baseline as after, and as often early as
    late."""
    ordered = [b if rep % 2 == 0 else b[::-1] for b in blocks]
    if rep // 2 % 2:
        ordered.reverse()
    return ordered


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


Snapshot = Callable[[], list[Flow]]


@dataclass
class Telemetry:
    """Flow telemetry while attached: a snapshot that is safe beside the
    periodic reads, and each flow's last reading (by cookie) from all of
    them, closed flows included, to count the transfer's segments."""

    snapshot: Snapshot
    flows: dict[int, Flow]


@contextlib.contextmanager
def telemetry(interval: float | None) -> Iterator[Telemetry]:
    """Attach flow telemetry and read a snapshot every `interval` seconds
    (None: only when asked)."""
    stop = threading.Event()
    lock = threading.Lock()
    flows: dict[int, Flow] = {}
    with FlowReader(command="bench") as reader:
        def snapshot() -> list[Flow]:
            with lock:
                snap = reader.snapshot()
                flows.update((f.cookie, f) for f in snap)
                return snap

        def poll() -> None:
            while interval is not None and not stop.wait(interval):
                snapshot()
        t = threading.Thread(target=poll, daemon=True)
        t.start()
        try:
            yield Telemetry(snapshot, flows)
        finally:
            stop.set()
            t.join()


def segments(flows: Iterable[Flow], port: int, direction: str) -> int:
    """The data segments the iperf3 client's connections to `port` received
    (a download) or sent, as TCP counts them (data_segs_in, data_segs_out)."""
    mine = [f for f in flows if f.remote_port == port]
    return sum(f.data_segs_in if direction == RECEIVE else f.data_segs_out for f in mine)


WINDOW_WAIT_S = 1.0  # iperf3's streams are up by then (-O 1 omits that second)


# bpf/acktrain.bpf.c: the program that runs per received segment, by the
# direction of the marked connections (log_ack: their ACKs; log_data: data).
WINDOW_PROGS = {SEND: "log_ack", RECEIVE: "log_data"}


@dataclass
class WindowCost:
    """The window's per-segment program over one open window: its runs and
    run time (BPF run-time stats) and the CPUs' busy time meanwhile."""

    runs: int
    prog_ns: int
    busy_ns: int
    seconds: float

    @property
    def share(self) -> float:
        return self.prog_ns / self.busy_ns


@contextlib.contextmanager
def ack_window(snapshot: Snapshot, port: int, streams: int, direction: str = SEND,
               costs: list[WindowCost] | None = None) -> Iterator[None]:
    """An ACK sampling window on the iperf3 client's connections to `port`
    (its streams and its control connection), open until the block ends;
    with `costs` (BPF run-time stats on), what it cost is appended there."""
    deadline = time.monotonic() + WINDOW_WAIT_S
    while True:
        mine = [f.cookie for f in snapshot() if f.remote_port == port
                and f.state == "ESTABLISHED" and not f.closed]
        if len(mine) > streams or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    if len(mine) <= streams:
        raise TamebpfError(f"iperf3's {streams} streams were not up within {WINDOW_WAIT_S:g} s")
    with AckWindow(mine, receive=direction == RECEIVE):
        if costs is None:
            yield
            return
        runs0, ns0 = own_prog_runs(WINDOW_PROGS[direction])
        busy0, t0 = busy_cpu_ns(), time.monotonic()
        yield
        runs1, ns1 = own_prog_runs(WINDOW_PROGS[direction])
        costs.append(WindowCost(runs1 - runs0, ns1 - ns0, busy_cpu_ns() - busy0,
                                time.monotonic() - t0))


@dataclass
class ProgCost:
    """One program of ours over one iperf3 run (BPF run-time stats)."""

    name: str
    hook: str
    runs: int
    ns: int


@dataclass
class RunCost:
    """Our attached programs over one iperf3 run, the data segments of the
    transfer meanwhile (`segments`), the CPUs' busy time, and what was
    attached to the client's cgroup (anyone's programs, by name)."""

    progs: list[ProgCost]
    segments: int
    seconds: float
    busy_ns: int
    cgroup_progs: list[str] = field(default_factory=list)


@dataclass
class Bench:
    """What every run of one benchmark shares. The client runs in `cgroup`
    if given; `cap` holds a pace cap on it for as long as it is entered."""

    port: int
    seconds: int
    interval: float
    direction: str = SEND
    pin: str | None = None
    cgroup: str | None = None
    cap: Callable[[], contextlib.AbstractContextManager[None]] | None = None
    cap_ids: Callable[[], set[int]] = set

    def cgroup_progs(self) -> list[str]:
        """Every program attached to the client's cgroup, anyone's."""
        if not self.cgroup:
            return []
        return [str(p.get("name", p["id"]))
                for p in bpftool_json("cgroup", "show", self.cgroup)]  # type: ignore[attr-defined]


def iperf3_argv(b: Bench, streams: int, seconds: int, *extra: str) -> list[str]:
    """The client's command line; b.pin: "CLIENT_CPU,SERVER_CPU" (iperf3
    -A: the client sets the server's affinity for its test too)."""
    return ["iperf3", "-c", "127.0.0.1", "-p", str(b.port), "-P", str(streams),
            "-t", str(seconds), "-O", "1", *extra, *(["-R"] if b.direction == RECEIVE else []),
            *(["-A", b.pin] if b.pin else [])]


def join_cgroup(cgroup: str | None) -> Callable[[], None]:
    """What a child runs before exec: enter `cgroup`, if given."""
    def enter() -> None:
        if cgroup:
            with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
    return enter


def iperf3(b: Bench, streams: int,
           during: Callable[[], contextlib.AbstractContextManager[None]] | None = None) -> float:
    """The client's received goodput in Mbit/s (a download, -R: what it
    received; else what the server did), first second omitted; `during`: a
    context entered once the client has started, left when it has ended."""
    proc = subprocess.Popen(iperf3_argv(b, streams, b.seconds, "-J"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=join_cgroup(b.cgroup))
    try:
        with during() if during is not None else contextlib.nullcontext():
            out, err = proc.communicate(timeout=b.seconds + 30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if proc.returncode:
        raise TamebpfError(f"iperf3 failed ({proc.returncode}): {err.strip()[-200:]}")
    return float(json.loads(out)["end"]["sum_received"]["bits_per_second"]) / 1e6


# One line of iperf3's text report per interval (-f m): a stream's, or with
# several streams their [SUM]; the summary's lines say sender or receiver.
INTERVAL_LINE = re.compile(r"^\[\s*(SUM|\d+)\]\s+[\d.]+-[\d.]+\s+sec\s+[\d.]+\s+\w?Bytes"
                           r"\s+([\d.]+)\s+Mbits/sec(.*)$")


def interval_mbit(line: str, streams: int) -> float | None:
    """The goodput of one interval of the whole transfer from a line of
    iperf3's report, None for any other line (omitted intervals, the
    summary, one stream's line of several)."""
    m = INTERVAL_LINE.match(line)
    if not m or any(w in m.group(3) for w in ("omitted", "sender", "receiver")):
        return None
    if (m.group(1) == "SUM") != (streams > 1):
        return None
    return float(m.group(2))


@contextlib.contextmanager
def iperf3_intervals(b: Bench, streams: int, seconds: int,
                     interval_s: float = 1.0) -> Iterator[Iterator[float]]:
    """An iperf3 run of `seconds` after the omitted first; yields the
    goodput of each of its intervals in Mbit/s as it ends (the client's:
    what it received in a download)."""
    proc = subprocess.Popen(iperf3_argv(b, streams, seconds, "-i", f"{interval_s:g}",
                                        "--forceflush", "-f", "m"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=join_cgroup(b.cgroup))
    assert proc.stdout is not None and proc.stderr is not None
    try:
        yield (mbit for line in proc.stdout
               if (mbit := interval_mbit(line, streams)) is not None)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if proc.returncode:
        raise TamebpfError(f"iperf3 failed ({proc.returncode}): "
                           f"{proc.stderr.read().strip()[-200:]}")


def measure(b: Bench, side: Side, streams: int, window_costs: list[WindowCost] | None = None,
            run_costs: list[RunCost] | None = None) -> float:
    """One iperf3 run of one side; `window_costs`: see ack_window;
    `run_costs` (with telemetry and BPF run-time stats on): what every
    attached program of ours cost over the run is appended there."""
    with contextlib.ExitStack() as stack:
        if side.cap:
            assert b.cap is not None
            stack.enter_context(b.cap())
        if not side.telemetry:
            return iperf3(b, streams)
        tel = stack.enter_context(telemetry(b.interval))
        during = (lambda: ack_window(tel.snapshot, b.port, streams, b.direction,
                                     window_costs)) if side.window else None
        if run_costs is None:
            return iperf3(b, streams, during)
        ids = own_prog_ids() | (b.cap_ids() if side.cap else set())
        hooks, cgroup_progs = prog_hooks(ids), b.cgroup_progs()
        before, busy0, t0 = prog_runs(ids), busy_cpu_ns(), time.monotonic()
        mbit = iperf3(b, streams, during)
        after, busy1, t1 = prog_runs(ids), busy_cpu_ns(), time.monotonic()
        tel.snapshot()  # the flows that closed since the last read
        run_costs.append(RunCost(
            [ProgCost(name, hooks[i], runs - before[i][1], ns - before[i][2])
             for i, (name, runs, ns) in after.items() if i in hooks and i in before],
            segments(tel.flows.values(), b.port, b.direction), t1 - t0, busy1 - busy0,
            cgroup_progs))
        return mbit


class PhaseCost:
    """What our programs cost over one phase with telemetry attached: the
    readings at its start, turned into a RunCost at its end."""

    def __init__(self, b: Bench, tel: Telemetry, cap: bool) -> None:
        self.b, self.tel = b, tel
        self.ids = own_prog_ids() | (b.cap_ids() if cap else set())
        self.hooks, self.cgroup_progs = prog_hooks(self.ids), b.cgroup_progs()
        self.segs = segments(tel.snapshot(), b.port, b.direction)
        self.before, self.busy, self.t = prog_runs(self.ids), busy_cpu_ns(), time.monotonic()

    def end(self) -> RunCost:
        after, busy, t = prog_runs(self.ids), busy_cpu_ns(), time.monotonic()
        segs = segments(self.tel.snapshot(), self.b.port, self.b.direction)
        return RunCost(
            [ProgCost(name, self.hooks[i], runs - self.before[i][1], ns - self.before[i][2])
             for i, (name, runs, ns) in after.items() if i in self.hooks and i in self.before],
            segs - self.segs, t - self.t, busy - self.busy, self.cgroup_progs)


# iperf3's interval in a toggled run: a phase is two, one to switch in
# (attaching takes some 35 ms of CPU), one measured.
PHASE_INTERVAL_S = 0.5


def toggled(b: Bench, side: Side, streams: int, first_on: bool, phases: int,
            costs: list[RunCost] | None = None) -> list[tuple[float, float]]:
    """One iperf3 run of `phases` phases in which telemetry is attached and
    detached in turn, starting attached if `first_on`: it attaches or
    detaches in each phase's first interval, the second is measured. Both
    sides share the run and its sockets, a phase apart, so what changes
    from run to run (buffer autotuning, which CPU does what) and most of
    others' load cancels in their ratio. Telemetry is read as often as
    `watch` would (every b.interval), each read in the middle of a
    measured interval. `side` says what else is on throughout (the cap).
    Returns (attached, detached) goodput of each pair of phases in turn;
    `costs`: what our programs cost over each phase with telemetry is
    appended there."""
    measured: list[tuple[bool, float]] = []
    with contextlib.ExitStack() as stack:
        if side.cap:
            assert b.cap is not None
            stack.enter_context(b.cap())
        attached = stack.enter_context(contextlib.ExitStack())
        on, tel, cost, reader = first_on, None, None, None
        owed = 0.0  # reads owed to the measured time attached

        def attach() -> tuple[Telemetry, PhaseCost | None]:
            t = attached.enter_context(telemetry(None))
            return t, PhaseCost(b, t, side.cap) if costs is not None else None

        if on:
            tel, cost = attach()
        with iperf3_intervals(b, streams, int(phases * 2 * PHASE_INTERVAL_S),
                              PHASE_INTERVAL_S) as intervals:
            for i, mbit in enumerate(intervals):
                if len(measured) == phases:
                    continue  # past the last phase
                if i % 2 == 0:  # switched: the measured interval begins
                    owed += PHASE_INTERVAL_S / b.interval if on else 0.0
                    if tel is not None and owed >= 1.0:
                        owed -= 1.0
                        reader = threading.Timer(PHASE_INTERVAL_S / 2, tel.snapshot)
                        reader.start()
                    continue
                if reader is not None:
                    reader.join()
                    reader = None
                measured.append((on, mbit))
                if cost is not None and costs is not None:
                    costs.append(cost.end())
                if len(measured) == phases:
                    continue
                on = not on
                if on:
                    tel, cost = attach()
                else:
                    attached.close()
                    tel, cost = None, None
    if len(measured) < phases:
        raise TamebpfError(f"iperf3 reported {len(measured)} of {phases} phases")
    pairs = [dict(measured[k:k + 2]) for k in range(0, phases - 1, 2)]
    return [(p[True], p[False]) for p in pairs]


@contextlib.contextmanager
def pace_cap(table: CapTable, cgroup: str, port: int, bytes_per_s: int,
             direction: str) -> Iterator[None]:
    """A pace cap on `cgroup`'s streams to the iperf3 server, in `direction`."""
    dest = parse_dest(f"127.0.0.1/32:{port}")
    table.add(cgroup, dest, PACE_NO_LIMIT, pace_bytes_per_s=bytes_per_s, direction=direction)
    try:
        yield
    finally:
        table.remove(cgroup, dest)


def median_interval(xs: list[float], level: float = 0.90) -> tuple[float, float]:
    """A distribution-free interval for the median of xs (order statistics:
    the k-th smallest and largest, k the largest with P(Binomial(n, 1/2) <
    k) <= (1 - level) / 2); the whole range when n is too small for it."""
    ys, n = sorted(xs), len(xs)
    tail, k, below = (1 - level) / 2, 0, 0.0
    while k < n // 2:
        below += math.comb(n, k) / 2 ** n  # P(Binomial < k + 1)
        if below > tail:
            break
        k += 1
    k = max(k, 1)
    return ys[k - 1], ys[n - k]



@dataclass
class Row:
    """One stream count's results: goodput by side, the ratios by what
    they compare, and what the runs cost."""

    mbit: dict[str, list[float]] = field(default_factory=dict)
    ratios: dict[str, list[float]] = field(default_factory=dict)
    window_costs: list[WindowCost] = field(default_factory=list)
    run_costs: dict[str, list[RunCost]] = field(default_factory=dict)


Results = dict[int, Row]


@dataclass(frozen=True)
class Options:
    reps: int = 7
    seconds: int = 5
    interval: float = 1.0
    arm: str = "telemetry"
    direction: str = SEND
    pin: str | None = None
    cap_gbit: float = 1000.0
    toggle: bool = False  # telemetry attached and detached within each run (toggled)


def toggle_sides(arm: Arm, block: tuple[str, ...]) -> tuple[str, str]:
    """(attached, detached): a block's two sides, which may differ only in
    telemetry to be measured within one run (toggled)."""
    if len(block) == 2:
        on, off = sorted(block, key=lambda name: not arm.sides[name].telemetry)
        a, b = arm.sides[on], arm.sides[off]
        if a.telemetry and not b.telemetry and (a.window, a.cap) == (b.window, b.cap):
            return on, off
    raise SystemExit(f"--toggle: sides {', '.join(block)} differ in more than telemetry")


def run_toggled(b: Bench, arm: Arm, block: tuple[str, ...], streams: int, o: Options,
                row: Row, got: dict[str, float]) -> set[str]:
    """One toggled run of `block` into `row`: each phase's goodput, the
    ratio of each pair of phases; `got`, each side's mean over the run.
    Returns the keys of the ratios it gave."""
    on, off = toggle_sides(arm, block)
    costs = row.run_costs.setdefault(on, []) if o.arm == "pace" else None
    pairs = toggled(b, arm.sides[off], streams, block[0] == on,
                    round(o.seconds / (2 * PHASE_INTERVAL_S)), costs)
    row.mbit[on] += [p[0] for p in pairs]
    row.mbit[off] += [p[1] for p in pairs]
    got[on], got[off] = (statistics.mean(p[i] for p in pairs) for i in (0, 1))
    keys = set()
    for key, ratio in arm.ratios.items():
        if set(ratio) == {on, off}:
            row.ratios[key] += [p[0] / p[1] if ratio[0] == on else p[1] / p[0] for p in pairs]
            keys.add(key)
    return keys


def run(streams_list: list[int], o: Options) -> Results:
    arm = ARMS[o.arm]
    results: Results = {n: Row({s: [] for s in arm.sides}, {k: [] for k in arm.ratios})
                        for n in streams_list}
    uses_cap = any(s.cap for s in arm.sides.values())
    with contextlib.ExitStack() as stack:
        b = Bench(free_port(), o.seconds, o.interval, o.direction, o.pin)
        if uses_cap:
            # The client in a cgroup of its own on every side, capped or not.
            b.cgroup = cg = stack.enter_context(bench_cgroup())
            pin = stack.enter_context(pin_dir("tamebpf-bench-"))
            table = CapTable("bench")
            b.cap = lambda: pace_cap(table, cg, b.port, int(o.cap_gbit * 1e9 / 8), o.direction)
            b.cap_ids = lambda: cap_prog_ids(cg, pin)
        # Run-time stats on for every side of an arm that reads them (they
        # slow every program a little, on all sides alike).
        if o.arm != "telemetry":
            stack.enter_context(bpf_run_stats())
        server = subprocess.Popen(["iperf3", "-s", "-p", str(b.port)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(0.5)
            for rep in range(o.reps):
                for n in streams_list:
                    row, got = results[n], dict[str, float]()
                    paired: set[str] = set()  # ratios of phase pairs (toggle)
                    for block in run_order(arm.blocks, rep):
                        if o.toggle:
                            paired |= run_toggled(b, arm, block, n, o, row, got)
                            continue
                        for name in block:
                            side = arm.sides[name]
                            costs = row.run_costs.setdefault(name, []) \
                                if o.arm == "pace" and side.telemetry else None
                            got[name] = measure(b, side, n, row.window_costs if side.window
                                                else None, costs)
                            row.mbit[name].append(got[name])
                    for key, (a, base) in arm.ratios.items():
                        if key not in paired:
                            row.ratios[key].append(got[a] / got[base])
                    share = f" window's program {row.window_costs[-1].share:.2%} of CPU" \
                        if row.window_costs else ""
                    print(f"rep {rep + 1}/{o.reps} streams {n:2d}: "
                          + " ".join(f"{k} {v:.1f}" for k, v in got.items()) + " Mbit/s; "
                          + " ".join(f"{v[-1]:.4f}" for v in row.ratios.values()) + share,
                          file=sys.stderr, flush=True)
        finally:
            server.kill()
            server.wait()
    return results


def reproduce(o: Options) -> str:
    return " ".join(["python -m tamebpf_bench.bench_overhead", *sys.argv[1:]])


def section(results: Results, o: Options) -> str:
    if o.arm == "pace":
        return pace_section(results, o)
    start, end = markers(section_name(o.arm, o.direction))
    if o.arm == "telemetry":
        title, what = "flows: telemetry overhead", (
            f"telemetry attached and read every {o.interval:g} s versus not attached")
        off, on = "detached", "attached"
    else:
        title, what = "export: ACK sampling window overhead", (
            f"export's telemetry (read every {o.interval:g} s) on both sides, and on one an ACK "
            "sampling window open on iperf3's connections for the whole run")
        off, on = "no window", "window open"
    if o.direction == RECEIVE:
        title += ", download"
    lines = [
        start,
        f"## {title}",
        "",
        f"Loopback iperf3 (`-t {o.seconds} -O 1`"
        + (", `-R`: the client downloads" if o.direction == RECEIVE else "")
        + (f", client and server pinned to CPUs {o.pin} (`-A {o.pin}`)" if o.pin else "")
        + f", receiver goodput), {what}; "
        + (f"{o.reps} alternating pairs per row. Ratio = median of the per-pair ratios "
           f"{on}/{off}" if not o.toggle else
           f"{o.reps} runs per row, in each of which it is attached and detached in turn every "
           f"{2 * PHASE_INTERVAL_S:g} s (an iperf3 interval of {PHASE_INTERVAL_S:g} s to "
           "switch, the next measured). Ratio = median of the ratios of neighbouring phases "
           f"{on}/{off}")
        + " (1.000 = no cost); its 90% interval from their order statistics "
        "(distribution-free).",
        "",
        "Measured on this VM: "
        f"Linux {platform.release()}, {os.cpu_count()} CPUs.",
        "",
        f"| streams | {off} Mbit/s (median) | {on} Mbit/s (median) | ratio (median) "
        "| median's 90% interval | ratio min..max |",
        "|---|---|---|---|---|---|",
    ]
    for n, r in results.items():
        ratios = r.ratios["on/off"]
        lo, hi = median_interval(ratios)
        lines.append(
            f"| {n} | {statistics.median(r.mbit['off']):.0f} "
            f"| {statistics.median(r.mbit['on']):.0f} "
            f"| {statistics.median(ratios):.3f} | {lo:.3f}..{hi:.3f} | "
            f"{min(ratios):.3f}..{max(ratios):.3f} |")
    if o.arm == "acks":
        lines += _cost_table(results, WINDOW_PROGS[o.direction])
    lines += ["", f"Reproduce: `make bench` (runs `{reproduce(o)}`).",
              "Loopback throughput is CPU-bound and noisy on a 2-CPU VM; the spread column "
              "shows how far single pairs wander."]
    if o.arm == "telemetry":
        lines.append("Nothing of the telemetry runs per packet or per ACK: between snapshots "
                     "only the state-change tracepoint runs, so the cost is one iterator "
                     "pass a second, below what this machine can resolve.")
    elif o.direction == SEND:
        lines.append("While a window is open, tp_btf/tcp_probe runs for every segment TCP "
                     "receives on the host (one load turns a data segment away, an ACK costs "
                     "one socket-storage lookup more; a marked socket's ACKs are also "
                     "logged). export opens a 5-s window at most 3 times an hour per path "
                     "(tamebpf.exporter.acksampling), so its cost over an hour is at most 1/240 of "
                     "the one measured here; between windows the program is detached and "
                     "nothing runs per packet.")
    else:
        lines.append("While a window is open, tp_btf/tcp_probe runs for every segment TCP "
                     "receives on the host (one load turns a pure ACK away, another socket's "
                     "data costs one socket-storage lookup more; a marked socket's data "
                     "segments are also logged and counted); between windows the program is "
                     "detached and nothing runs per packet.")
    lines.append(end)
    return "\n".join(lines) + "\n"


def _cost_table(results: Results, prog: str) -> list[str]:
    """The window's per-segment program in the "window open" runs, from the
    kernel's run-time stats."""
    lines = [
        "",
        f"The same \"window open\" runs, read from the kernel's BPF run-time stats: the "
        f"window's per-segment program ({prog}, tp_btf/tcp_probe) against the time "
        "all CPUs were busy while the window was open. Loopback iperf3 is CPU-bound, so "
        "its share of that time is the most it can take from the transfer's goodput.",
        "",
        "| streams | runs per second (median) | ns per run (median) "
        "| share of busy CPU time (median) | share min..max |",
        "|---|---|---|---|---|",
    ]
    for n, r in results.items():
        costs = r.window_costs
        if not costs:
            continue
        shares = [c.share for c in costs]
        lines.append(
            f"| {n} | {statistics.median(c.runs / c.seconds for c in costs):,.0f} "
            f"| {statistics.median(c.prog_ns / max(1, c.runs) for c in costs):.0f} "
            f"| {statistics.median(shares):.2%} | {min(shares):.2%}..{max(shares):.2%} |")
    return lines


@dataclass(frozen=True)
class ProgRow:
    """One program over a side's runs: medians of the per-run figures
    (ns_per_run of the runs it ran in; None if it never ran)."""

    name: str
    hook: str
    runs_per_s: float
    runs_per_segment: float
    ns_per_run: float | None
    ns_per_segment: float
    share: float  # of the CPUs' busy time


def cost_rows(costs: list[RunCost]) -> list[ProgRow]:
    """The programs that ran, in the order of the first run's list, and a
    last row "all": every program of ours attached, together."""
    by_name: dict[str, list[tuple[ProgCost, RunCost]]] = {}
    for run_cost in costs:
        for p in run_cost.progs:
            by_name.setdefault(p.name, []).append((p, run_cost))

    def row(name: str, hook: str, got: list[tuple[int, int, RunCost]]) -> ProgRow:
        ran = [ns / runs for runs, ns, _ in got if runs]
        return ProgRow(name, hook,
                       statistics.median(runs / c.seconds for runs, _, c in got),
                       statistics.median(runs / max(1, c.segments) for runs, _, c in got),
                       statistics.median(ran) if ran else None,
                       statistics.median(ns / max(1, c.segments) for _, ns, c in got),
                       statistics.median(ns / max(1, c.busy_ns) for _, ns, c in got))

    rows = [row(name, got[0][0].hook, [(p.runs, p.ns, c) for p, c in got])
            for name, got in by_name.items() if any(p.runs for p, _ in got)]
    if costs:
        rows.append(row("all", "", [(sum(p.runs for p in c.progs), sum(p.ns for p in c.progs), c)
                                    for c in costs]))
    return rows


def attached(costs: list[RunCost]) -> str:
    """What was attached in the first run: our programs with their hooks,
    and every program on the client's cgroup."""
    if not costs:
        return "nothing measured"
    first = costs[0]
    ours = ", ".join(f"{p.name} ({p.hook})" for p in first.progs) or "none"
    return f"{ours}; on the client's cgroup: {', '.join(first.cgroup_progs) or 'nothing'}"


SIDE_WORDS = {"telemetry": "telemetry, no cap", "cap+telemetry": "telemetry and the cap"}


def method_words(o: Options) -> str:
    """How the pace arm's sides were run and compared."""
    if not o.toggle:
        return ("Each rep runs the pairs none/telemetry and cap/cap + telemetry back to back, "
                "both orders alternating from rep to rep; "
                f"{o.reps} reps per stream count. Ratio = median of the per-rep ratios "
                "(1.000 = no cost); its 90% interval from their order statistics "
                "(distribution-free).")
    phase = 2 * PHASE_INTERVAL_S
    return (f"A run holds two sides: none and telemetry in one, cap and cap + telemetry in "
            f"another; within a run, telemetry is attached and detached in turn every "
            f"{phase:g} s (iperf3 `-i {PHASE_INTERVAL_S:g}`: an interval to switch, the next "
            "measured; read once per second of measured attached time, mid-interval), "
            f"starting attached or detached in turn. {o.reps} reps of the two runs per stream "
            "count, their order alternating. Telemetry's ratio: attached over detached for "
            "each pair of neighbouring phases (same run, same sockets, a phase apart); the "
            "cap's: the capped run's detached phases over the other run's, one ratio a rep. "
            "Ratio = median of those ratios (1.000 = no cost); its 90% interval from their "
            "order statistics (distribution-free).")


def pace_section(results: Results, o: Options) -> str:
    start, end = markers(section_name(o.arm, o.direction))
    download = o.direction == RECEIVE
    cap = f"a {o.direction} pace cap of {o.cap_gbit:g} Gbit/s"
    seg = "received" if download else "sent"
    lines = [
        start,
        "## Downloads: telemetry and the receive pace cap" if download
        else f"## Pace cap and telemetry, direction {o.direction}",
        "",
        f"Loopback iperf3 (`-t {o.seconds} -O 1`"
        + (", `-R`: the client downloads" if download else "")
        + (f", client and server pinned to CPUs {o.pin} (`-A {o.pin}`)" if o.pin else "")
        + (", the client's received goodput" if download else ", receiver goodput")
        + f"), the client in a test cgroup. Four sides: *none*; *telemetry*: the flow "
        f"programs attached as `watch` and `export` attach them, read every {o.interval:g} s; "
        f"*cap*: {cap} on the client's cgroup (`cap set --mode pace --direction "
        f"{o.direction}`), far above what loopback reaches, so that its per-socket work runs "
        "and limits nothing; *cap + telemetry*. " + method_words(o)
        + " BPF run-time stats are on throughout.",
        "",
        f"Measured on this VM: Linux {platform.release()}, {os.cpu_count()} CPUs.",
        "",
        "| streams | ratio of | Mbit/s (median) | baseline Mbit/s (median) | ratios "
        "| ratio (median) | median's 90% interval | ratio min..max |",
        "|---|---|---|---|---|---|---|---|",
    ]
    arm = ARMS[o.arm]
    for n, r in results.items():
        for key, (a, base) in arm.ratios.items():
            ratios = r.ratios[key]
            lo, hi = median_interval(ratios)
            lines.append(
                f"| {n} | {key} | {statistics.median(r.mbit[a]):.0f} "
                f"| {statistics.median(r.mbit[base]):.0f} | {len(ratios)} "
                f"| {statistics.median(ratios):.3f} "
                f"| {lo:.3f}..{hi:.3f} | {min(ratios):.3f}..{max(ratios):.3f} |")
    first = next(iter(results.values())).run_costs if results else {}
    lines += [
        "",
        "The runs with telemetry, read from the kernel's BPF run-time stats: each program of "
        f"ours that ran, per second, per data segment the client {seg} (as TCP counts them, "
        "data_segs_" + ("in" if download else "out") + "; up to 64 KB each on loopback) and "
        "as a share of the CPUs' busy time meanwhile, the most it can take from a CPU-bound "
        "transfer; medians over the runs. *all*: every program of ours attached, together. "
        "Attached:",
        "",
        *[f"- {SIDE_WORDS.get(side, side)}: {attached(costs)}." for side, costs in first.items()],
        "",
        f"| streams | side | program | hook | runs per second | runs per {seg} segment "
        f"| ns per run | ns per {seg} segment | share of busy CPU time |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for n, r in results.items():
        for side, costs in r.run_costs.items():
            for p in cost_rows(costs):
                per_run = "—" if p.ns_per_run is None or p.name == "all" \
                    else f"{p.ns_per_run:.0f}"
                name = f"**{p.name}**" if p.name == "all" else p.name
                lines.append(
                    f"| {n} | {SIDE_WORDS.get(side, side)} | {name} | {p.hook} "
                    f"| {p.runs_per_s:,.0f} | {p.runs_per_segment:.4f} | {per_run} "
                    f"| {p.ns_per_segment:.1f} | {p.share:.3%} |")
    lines += ["", f"Reproduce: `make bench` (runs `{reproduce(o)}`).", end]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", default="1,16", help="comma-separated stream counts")
    ap.add_argument("--reps", type=int, default=7, help="alternating pairs per stream count")
    ap.add_argument("--seconds", type=int, default=5, help="length of one iperf3 run")
    ap.add_argument("--interval", type=float, default=1.0, help="snapshot interval, seconds")
    ap.add_argument("--arm", choices=sorted(ARMS), default="telemetry",
                    help="telemetry: attached versus not; acks: export with an ACK sampling "
                    "window open versus without; pace: telemetry attached versus not, "
                    "without and with a pace cap that never binds (default telemetry)")
    ap.add_argument("--direction", choices=(SEND, RECEIVE), default=SEND,
                    help="receive: the client downloads (iperf3 -R), and the pace arm's cap "
                    "paces what it receives (default send)")
    ap.add_argument("--cap-rate", type=float, default=1000.0, metavar="GBIT",
                    help="the pace arm's cap, Gbit/s (default 1000: far above loopback)")
    ap.add_argument("--pin", metavar="CLIENT,SERVER",
                    help="pin iperf3's client and server to these CPUs (iperf3 -A), e.g. 0,1")
    ap.add_argument("--toggle", action="store_true",
                    help="attach and detach telemetry within each run, every "
                    f"{2 * PHASE_INTERVAL_S:g} s (half to switch, half measured), instead of a "
                    "run per side: each pair's sides share a run; --seconds is then the "
                    f"run's length, a multiple of {4 * PHASE_INTERVAL_S:g}")
    ap.add_argument("--write", metavar="FILE", help="write the section into this Markdown file")
    args = ap.parse_args()
    if args.toggle and (args.seconds < 4 * PHASE_INTERVAL_S
                        or args.seconds % (4 * PHASE_INTERVAL_S)):
        ap.error(f"--toggle: --seconds must be a multiple of {4 * PHASE_INTERVAL_S:g} "
                 f"(pairs of {2 * PHASE_INTERVAL_S:g}-s phases)")
    if args.toggle:
        for block in ARMS[args.arm].blocks:
            toggle_sides(ARMS[args.arm], block)
    o = Options(args.reps, args.seconds, args.interval, args.arm, args.direction, args.pin,
                args.cap_rate, args.toggle)
    with terminate_as_exit():  # SIGTERM unwinds: caps removed, programs detached
        results = run([int(s) for s in args.streams.split(",")], o)
    text = section(results, o)
    sys.stdout.write(text)
    if args.write:
        write_section(args.write, section_name(o.arm, o.direction), text, "Performance")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Ground truth for make eval: what n streams really get, and what they take
from cross traffic that keeps running.

The testbed sweep (tamebpf_testbed.sweep) restarts the cross traffic for
every point, so each point also measures a different cross-traffic start-up;
that noise was larger than the model's error. Here the m cross flows start
once and run through the whole case (the probes included), as the traffic of
other users does on a real path. Each round measures the cross traffic alone,
then every n in turn (the order alternates between rounds so that drift in
the machine's load spreads over all n); a point is the median of its rounds.
Goodput is read from the senders' tcp_info bytes_acked at the window's edges
(a download's at the receiver's iperf3 servers, which send), so ours and the
cross traffic's cover the same interval.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tamebpf_testbed import Testbed, iperf, topology
from tamebpf_testbed.iperf import cross_rates

SETTLE_FRACTION = 0.85  # of the cross traffic's rate alone
SETTLE_TIMEOUT_S = 8.0


@dataclass
class Point:
    n: int
    mbit: list[float] = field(default_factory=list)  # our aggregate, one per round
    cross_with: list[float] = field(default_factory=list)  # cross traffic meanwhile


@dataclass
class Truth:
    points: dict[int, Point]
    cross_alone: list[float]  # the cross traffic with none of our streams, per round
    # The same runs over a longer window (measure's longer_s), when asked.
    longer: Truth | None = None


def start_cross(tb: Testbed, m: int, cc: str, warmup_s: float,
                reverse: bool = False) -> subprocess.Popen[bytes]:
    """m long-running cross flows (reverse: downloads), past their start-up
    when this returns."""
    argv = iperf.client_argv(tb.addresses["receiver"], iperf.PORT_CROSS, m, 3600, cc,
                             json_out=False, reverse=reverse)
    proc = tb.popen("cross", argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE)
    iperf.wait_flows(tb, "cross", iperf.PORT_CROSS, m, proc)
    time.sleep(warmup_s)
    return proc


def settle(tb: Testbed, m: int, alone_mbit: float | None, reverse: bool = False) -> None:
    """Every point and probe starts from the same state: the previous test
    over on the server, no cached ssthresh for the destination at the data's
    sender (Linux keeps one per destination in tcp_metrics, and a low one
    from a many-stream run ends the next run's slow start early), and the
    cross traffic (reverse: downloads) recovered from what the last test
    took from it (Reno at 50 ms needs seconds)."""
    iperf.wait_for(lambda: iperf.server_idle(tb, iperf.PORT_MAIN), 30.0,
                   "the iperf3 server to finish the previous test")
    topology.flush_tcp_metrics(tb.namespaces["receiver" if reverse else "sender"])
    if not m:
        return
    if alone_mbit is None:
        return
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    last = iperf.sent_bytes(tb, "cross", iperf.PORT_CROSS, reverse)
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = iperf.sent_bytes(tb, "cross", iperf.PORT_CROSS, reverse)
        if iperf.mbit_between(last, now) >= SETTLE_FRACTION * alone_mbit:
            return
        last = now


def run_streams(tb: Testbed, n: int, cc: str, m: int, warmup_s: float, window_s: float,
                cgroup: str | None = None) -> tuple[float, float | None, int, str]:
    """iperf3 -P n from the sender (inside `cgroup` when given): our goodput
    and the cross traffic's over the same window after warmup_s, iperf3's
    exit status and the end of its stderr."""
    ((mbit, cross),), code, err = run_windows(tb, n, cc, m, warmup_s, (window_s,), cgroup)
    return mbit, cross, code, err


def run_windows(tb: Testbed, n: int, cc: str, m: int, warmup_s: float,
                windows_s: Sequence[float], cgroup: str | None = None, reverse: bool = False
                ) -> tuple[list[tuple[float, float | None]], int, str]:
    """run_streams over several windows of one run, all opening after
    warmup_s (nested: the shorter ones are the first seconds of the longer
    ones): (ours, the cross traffic's) per window in the order given.
    reverse: our streams and the cross traffic download (iperf3 -R), their
    goodput read at the receiver's servers, which send."""
    seconds = round(warmup_s + max(windows_s) + 1)

    def enter_cgroup() -> None:  # in the child, before `ip netns exec` hides the host's /sys
        if cgroup:
            with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))

    proc = tb.popen("sender", iperf.client_argv(tb.addresses["receiver"], iperf.PORT_MAIN, n,
                                                seconds, cc, json_out=False, reverse=reverse),
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                    preexec_fn=enter_cgroup)
    got: dict[float, tuple[float, float | None]] = {}
    try:
        iperf.wait_flows(tb, "sender", iperf.PORT_MAIN, n, proc)
        time.sleep(warmup_s)
        s1 = iperf.sent_bytes(tb, "sender", iperf.PORT_MAIN, reverse)
        c1 = iperf.sent_bytes(tb, "cross", iperf.PORT_CROSS, reverse) if m else None
        t0 = time.monotonic()
        for w in sorted(set(windows_s)):
            time.sleep(max(0.0, t0 + w - time.monotonic()))
            s2 = iperf.sent_bytes(tb, "sender", iperf.PORT_MAIN, reverse)
            c2 = iperf.sent_bytes(tb, "cross", iperf.PORT_CROSS, reverse) if m else None
            got[w] = (iperf.mbit_between(s1, s2),
                      iperf.mbit_between(c1, c2) if c1 and c2 else None)
        _, err = proc.communicate(timeout=seconds + 30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    tb.check()  # a delay line that died mid-run invalidates the run
    return ([got[w] for w in windows_s], proc.returncode,
            err.decode(errors="replace").strip()[-200:])


def measure(tb: Testbed, ns: list[int], cc: str, m: int, rounds: int,
            reference: float | None, *, warmup_s: float = 2.0, window_s: float = 4.0,
            progress: Callable[[str], None] | None = None,
            longer_s: float | None = None, reverse: bool = False) -> Truth:
    """Needs the iperf3 servers up and, when m > 0, the cross traffic running;
    reference is its rate alone, measured before anything disturbed it.
    With longer_s, each run also goes on to a window of longer_s from the
    same start (Truth.longer): two truths from one set of runs. reverse:
    downloads, ours and the cross traffic's (run_windows)."""
    truths = [Truth({n: Point(n) for n in ns}, [])]
    windows = [window_s]
    if longer_s is not None:
        truths.append(Truth({n: Point(n) for n in ns}, []))
        windows.append(longer_s)
    for r in range(rounds):
        if m:
            settle(tb, m, reference, reverse)
            for t, alone in zip(truths, cross_rates(tb, windows, reverse), strict=True):
                t.cross_alone.append(alone)
        for n in (ns if r % 2 == 0 else list(reversed(ns))):
            settle(tb, m, reference, reverse)
            got, _, _ = run_windows(tb, n, cc, m, warmup_s, windows, reverse=reverse)
            for t, (mbit, cross) in zip(truths, got, strict=True):
                t.points[n].mbit.append(mbit)
                if cross is not None:
                    t.points[n].cross_with.append(cross)
            if progress:
                progress(f"round {r + 1}/{rounds} n={n}: " + "; ".join(
                    f"{mbit:.2f} Mbit/s" + (f", cross {cross:.2f}" if cross is not None else "")
                    + (f" over {w:g} s" if longer_s is not None else "")
                    for w, (mbit, cross) in zip(windows, got, strict=True)))
    truth = truths[0]
    truth.longer = truths[1] if longer_s is not None else None
    return truth

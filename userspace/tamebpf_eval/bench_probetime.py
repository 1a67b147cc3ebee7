"""Probing wall time of `tamebpf advise`, fast start on and off, side by side.

Fast start (the default) is two things (docs/advise.md): the probe client
pipelines iperf3's set-up, and a sock_ops program resends
a dropped SYN after 3 x RTT rather than 1 s. Off, the client waits for each
server state as iperf3 does and SYNs keep the kernel's timeout. For each
case of make eval (bottleneck, congestion control, cross flows) this runs
the advisor's default probe pair (1 stream then 10, 2 s each) `--rounds`
times each way, alternating which goes first, on one testbed with the cross
traffic running, and reports the pairs' wall time. Nothing is advised.

  make eval PRESET=probetime   (writes the table into docs/results/probetime.md)
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import time
from typing import Any

from tamebpf.advise.advisor import DEFAULT_PROBES, QUICK_DURATIONS_S
from tamebpf.advise.probes import run_probes
from tamebpf.advise.record import Target
from tamebpf.errors import TamebpfError
from tamebpf.testbed import Testbed
from tamebpf_eval.advise import Case, case_path, cases, log
from tamebpf_eval.docsection import markers, write_section
from tamebpf_eval.truth import settle

START, END = markers("probetime")
TARGET_S = 5.0


def pair(tb: Testbed, target: Target, case: Case, reference: float | None,
         fast: bool) -> float:
    """One default probe pair, as run_advice runs it (two stages of one
    test); its wall time."""
    settle(tb, case.cross, reference)
    probes = run_probes(target, list(zip(DEFAULT_PROBES, QUICK_DURATIONS_S, strict=True)),
                        fast_start=fast)
    return sum(p.duration_s for p in probes)


def measure(case: Case, rounds: int) -> dict[str, Any]:
    with case_path(case, "pt") as (tb, reference, target):
        # A pair that fails (the set-up timed out on a congested path) counts
        # as a failure of its mode, not of the benchmark.
        times: dict[str, list[float | None]] = {"fast": [], "slow": []}
        for r in range(rounds):
            for fast in ((True, False) if r % 2 == 0 else (False, True)):
                mode = "fast" if fast else "slow"
                t: float | None = None
                try:
                    t = pair(tb, target, case, reference, fast)
                    log(f"  round {r + 1}/{rounds} {mode}: {t:.2f} s")
                except TamebpfError as err:
                    log(f"  round {r + 1}/{rounds} {mode}: failed: {err}")
                times[mode].append(t)
        return {"key": case.key, "rtt": case.rtt, **times}


def _cells(ts: list[float | None]) -> tuple[str, str, float | None]:
    """'median s (max)', 'k/n within the target[, f failed]', the median."""
    ok = [t for t in ts if t is not None]
    failed = len(ts) - len(ok)
    within = f"{sum(t <= TARGET_S for t in ok)}/{len(ts)}" + (f", {failed} failed" if failed
                                                             else "")
    if not ok:
        return "-", within, None
    med = statistics.median(ok)
    return f"{med:.2f} s ({max(ok):.2f})", within, med


def _row(name: str, fast: list[float | None], slow: list[float | None]) -> str:
    f, fw, mf = _cells(fast)
    s, sw, ms = _cells(slow)
    ratio = f"{mf / ms:.2f}" if mf and ms else "-"
    return f"| {name} | {f} | {fw} | {s} | {sw} | {ratio} |"


def table(results: list[dict[str, Any]], rounds: int) -> str:
    out = [START, "## Probing time, fast start on and off (make probetime)", "",
           f"The advisor's default probe pair (1 stream for 2 s, then 10 for 2 s), "
           f"{rounds} pairs each way per case, alternating, on one testbed with the cross "
           "traffic running. Wall time of the pair: median (max), and how many pairs took "
           f"at most {TARGET_S:.0f} s. A failed pair: the probe's set-up timed out.", "",
           "| case | fast start | <= 5 s | iperf3-like start, kernel SYN timeout | <= 5 s "
           "| fast / slow (medians) |", "|---|---|---|---|---|---|"]
    for r in results:
        out.append(_row(r["key"], r["fast"], r["slow"]))
    out.append(_row("all", [x for r in results for x in r["fast"]],
                    [x for r in results for x in r["slow"]]))
    out += ["", "Reproduce: `make probetime` (about "
            f"{max(1, round(len(results) * rounds * 0.26))} min).", END, ""]
    return "\n".join(out)


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds: every testbed is torn down


def main() -> int:
    signal.signal(signal.SIGTERM, _exit_on_signal)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cc", default="cubic,reno")
    ap.add_argument("--cross", default="0,8,30")
    ap.add_argument("--rounds", type=int, default=2, help="pairs each way per case")
    ap.add_argument("--only", help="run only cases whose key (name/cc/m=N) contains this")
    ap.add_argument("--write", metavar="FILE", help="write the table into this Markdown file")
    args = ap.parse_args()
    results = []
    todo = cases(args.cc.split(","), [int(x) for x in args.cross.split(",")], args.only)
    t0 = time.monotonic()
    for i, case in enumerate(todo, 1):
        log(f"case {i}/{len(todo)}: {case.key}")
        results.append(measure(case, args.rounds))
    text = table(results, args.rounds)
    sys.stdout.write(text)
    log(f"took {(time.monotonic() - t0) / 60:.1f} min")
    if args.write:
        write_section(args.write, "probetime", text, "Accuracy of tamebpf advise")
    return 0


if __name__ == "__main__":
    sys.exit(main())

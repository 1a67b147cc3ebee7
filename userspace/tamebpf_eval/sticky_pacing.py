"""Does a stream the pace cap once paced still read the link in its ACKs?

`tamebpf run` paces its transfer from the first moment (a pace cap at a
conservative rate) and takes the path's capacity from the ACK spacing of
its first seconds or of its scout, the one stream the cap then leaves
"unpaced" (SO_MAX_PACING_RATE set to ~0U, unlimited). The kernel
(net/core/sock.c, sk_setsockopt) turns the socket's own pacing on for
good the first time a finite SO_MAX_PACING_RATE is set
(sk_pacing_status SK_PACING_NEEDED; ~0U does not turn it off), so TCP
goes on spacing its segments at its own pacing rate (twice cwnd/srtt in
slow start, 120% after), where an unpaced sender sends what each ACK
releases at once. On fresh draw 12's crowded paths the scouts' ACKs ran
at 1.1-1.2x their own rate and the trust rule refused them, and the
run's first seconds gave no trusted band where export's plain window on
the same paths did (06, 07). Is the pacing that stays on the reason?
(Measured: no; docs/results/sticky-pacing.md.)

This measures it on the cases of fresh draw 12 whose 60-s transfer under
`run` taught nothing: one CUBIC stream for 10 s beside the case's cross
traffic, in three arms side by side, 3 times each in turn: never paced
(iperf3 as is); with a pacing rate it never reaches set by iperf3 itself
(`--fq-rate 10G`: the kernel's switch alone); and under our pace cap at
1000 Mbit/s (the cap's own setsockopt, never binding). Its ACKs are
scored in two windows, with the transfers' estimator and trust rule
(estimate/acktrain.capacity_above_own) against the link's TCP goodput:
the first 5 s (slow start included: the window of run's first seconds
and of export's sampling) and the 5 s after (the stream settled, as the
scout is when its window opens). `--report` re-scores the stored record.

    make eval PRESET=sticky-pacing     # about 15 min
"""

from __future__ import annotations

import statistics
import subprocess
from dataclasses import asdict
from typing import Any

from tamebpf.cap.spec import parse_dest
from tamebpf.cap.table import PACE_NO_LIMIT, CapTable
from tamebpf.estimate.acktrain import capacity_above_own, pair_rates
from tamebpf.estimate.capacity import tcp_goodput_mbps
from tamebpf.kernel.acktrain import AckTrain
from tamebpf.kernel.probe import probe_cgroup
from tamebpf.records import AckLog
from tamebpf.runner.child import start
from tamebpf.units import pace_bytes_per_s
from tamebpf_eval.advise import Case, case_path, load, save
from tamebpf_eval.commands import pin_dir, stop
from tamebpf_eval.docsection import markers
from tamebpf_eval.resumable import arguments, measure_missing, publish
from tamebpf_eval.truth import settle
from tamebpf_testbed import iperf

DRAW = "docs/results/eval-fresh12.json.gz"
ARMS = ("never paced", "iperf3 --fq-rate 10G", "pace cap 1000 Mbit/s")
REPEATS = 3
SECONDS = 10.0
WINDOWS = ("first 5 s", "5-10 s")
SPLIT_S = 5.0  # run's first seconds' window is 5 s (runner/acks.py); the scout's opens later
CAP_MBPS = 1000.0
NEAR = 0.10
SECTION = "sticky_pacing"


def cases(results_dir: str = ".") -> list[Case]:
    """Fresh draw 12's cases whose run-60s transfer taught nothing."""
    out = []
    for rec in load(f"{results_dir}/{DRAW}"):
        a = rec["advice"].get("run-60s")
        if a is not None and a["refused"] is not None:
            out.append(Case(**rec["case"]))
    return out


def _windows(log: AckLog, mss: int) -> list[tuple[list[float], float]]:
    """For each of WINDOWS, the pair rates of the busiest connection's ACKs
    in it and its goodput (Mbit/s) over them."""
    acks = max(log.flows.values(), key=len, default=[])
    if not acks:
        return [([], 0.0) for _ in WINDOWS]
    split = acks[0][0] + SPLIT_S * 1e9
    out: list[tuple[list[float], float]] = []
    for part in ([a for a in acks if a[0] < split], [a for a in acks if a[0] >= split]):
        if len(part) < 2:
            out.append(([], 0.0))
            continue
        acked = sum((b[1] - a[1]) % (1 << 32) for a, b in zip(part, part[1:], strict=False))
        goodput = acked * 8e3 / max(part[-1][0] - part[0][0], 1)
        out.append((pair_rates(AckLog({0: part}, 0), mss), goodput))
    return out


def logged_transfer(target_addr: str, netns: str | None, cc: str, streams: int, seconds: float,
                    extra: list[str], pace_mbps: float | None) -> tuple[AckLog, int | None]:
    """iperf3 with `streams` for `seconds` in a cgroup of its own, every ACK
    of its connections logged, under a pace cap of `pace_mbps` if given:
    (the ACK log, iperf3's exit status). Cap and cgroup are gone after."""
    argv = iperf.client_argv(target_addr, iperf.PORT_MAIN, streams, seconds, cc,
                             json_out=False) + ["--logfile", "/dev/null", *extra]
    with probe_cgroup(streams) as cg, AckTrain(cg) as train:
        table = CapTable("eval") if pace_mbps is not None else None
        dest = parse_dest(f"{target_addr}/32")
        if table is not None and pace_mbps is not None:
            table.add(cg, dest, PACE_NO_LIMIT, pace_bytes_per_s=pace_bytes_per_s(pace_mbps))
        try:
            child = start(argv, cg, netns)
            try:
                child.wait(timeout=seconds + 30)
            except subprocess.TimeoutExpired:
                pass
            finally:
                stop(child)
            log = train.read()
        finally:
            if table is not None:
                table.remove(cg, dest)
    return log, child.returncode


def _transfer(target_addr: str, netns: str | None, cc: str, arm: str) -> dict[str, Any]:
    log, status = logged_transfer(target_addr, netns, cc, 1, SECONDS,
                                  ["--fq-rate", "10G"] if arm == ARMS[1] else [],
                                  CAP_MBPS if arm == ARMS[2] else None)
    return {"arm": arm, "exit": status,
            "windows": [{"goodput_mbps": round(g, 3), "ack_pair_mbps": [round(r, 2) for r in rs]}
                        for rs, g in _windows(log, 1448)]}


def measure(case: Case) -> dict[str, Any]:
    runs = []
    with pin_dir(), case_path(case, "sp") as (tb, reference, target):
        for _ in range(REPEATS):
            for arm in ARMS:
                settle(tb, case.cross, reference)
                runs.append(_transfer(target.host, target.netns, case.cc, arm))
    return {"case": asdict(case), "key": case.key, "runs": runs}


def _scored(window: dict[str, Any], link: float) -> tuple[bool, float | None, float]:
    """(trusted within NEAR of the link, median pair rate / own goodput,
    share of the pairs at or above its goodput that read the link)."""
    rates, own = window["ack_pair_mbps"], window["goodput_mbps"]
    e = capacity_above_own(rates, own, "stream's")
    ok = e.trusted and e.goodput_mbps is not None and abs(e.goodput_mbps / link - 1) <= NEAR
    above = [r for r in rates if r >= own]
    at_link = sum(1 for r in above if abs(r / link - 1) <= 0.08)
    ratio = statistics.median(rates) / own if rates and own > 0 else None
    return ok, ratio, at_link / len(above) if above else 0.0


def report(records: list[dict[str, Any]]) -> str:
    lines = ["| case | window | arm | its goodput Mbit/s (median) | median ACK pair rate / "
             "its goodput | pairs at the link's rate (of those above its goodput) | capacity "
             f"trusted, within {NEAR:.0%} |", "|---|---|---|---|---|---|---|"]
    ok_by: dict[tuple[int, str], int] = {}
    n_by: dict[tuple[int, str], int] = {}
    for rec in records:
        link = tcp_goodput_mbps(rec["case"]["rate"], 1448, False)
        for w, window in enumerate(WINDOWS):
            for arm in ARMS:
                runs = [r["windows"][w] for r in rec["runs"] if r["arm"] == arm]
                scored = [_scored(x, link) for x in runs]
                ok = sum(s[0] for s in scored)
                ok_by[w, arm] = ok_by.get((w, arm), 0) + ok
                n_by[w, arm] = n_by.get((w, arm), 0) + len(runs)
                ratios = [s[1] for s in scored if s[1] is not None]
                lines.append(
                    f"| {rec['key']} | {window} | {arm} | "
                    f"{statistics.median(x['goodput_mbps'] for x in runs):.1f} | "
                    + (f"{statistics.median(ratios):.2f}" if ratios else "-") + " | "
                    + f"{statistics.median(s[2] for s in scored):.0%} | {ok} of {len(runs)} |")
    lines += ["", "| window | " + " | ".join(ARMS) + " |", "|---|" + "---|" * len(ARMS)]
    for w, window in enumerate(WINDOWS):
        lines.append(f"| {window}: capacity trusted, within {NEAR:.0%} | "
                     + " | ".join(f"{ok_by.get((w, a), 0)} of {n_by.get((w, a), 0)}"
                                  for a in ARMS) + " |")
    start_m, end_m = markers(SECTION)
    return "\n".join([start_m, "## One stream's ACK spacing beside the case's cross traffic, "
                      "paced once or never (make eval PRESET=sticky-pacing)", "", *lines,
                      end_m]) + "\n"


def main() -> int:
    ap = arguments(__doc__, "default: docs/results/sticky-pacing.json.gz")
    args = ap.parse_args()
    path = args.results or "docs/results/sticky-pacing.json.gz"
    records = load(path)
    if not args.report:
        measure_missing(records, cases(), args.only, measure, lambda rs: save(path, rs))
    publish(report(records), args.write, SECTION, "Pacing that stays on")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

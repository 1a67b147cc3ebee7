"""Advice learned from transfers, with no server at the far end (issue 45's
acceptance), on a fresh draw against a settled ground truth.

The draw (DRAWS) comes from fresh_draw.draw's ranges, loss-based only, half
of its cases with an RTT of 80 ms or more; its seed was drawn and its rules
written before any case ran (docs/results/DRAW-decision-rules.md).

Per case, with the cross traffic running, each plan from a settled path and
a fresh state directory (nothing in path memory):
  "run-60s"     `tamebpf run --netns SENDER --max-impact 30% -- iperf3 -P 8
                -t 60` (its pace cap starts at run's default rate and
                follows the path);
  "export-60s"  `tamebpf export --netns SENDER --ack-sampling` watching a
                plain `iperf3 -P 8 -t 60`;
  "run-5min"    (RTT >= 80 ms only) as run-60s for 300 s; its log's
                follow_change events give the cap's target over time;
then, after each, `tamebpf advise RECEIVER:NO_SERVER_PORT --json` with the
same state directory, where no iperf3 server listens: it can answer only
from what the transfer taught; the sender's link counts what it sends.
Then the ground truth (tamebpf_eval.truth) at 1, 4, 16 streams and at each
advised count: 20 s warm-up, 15-s window, 3 rounds; on the long cases the
same runs go on to a 60-s window (truth.measure's longer_s): issue 45's
"3 rounds of 60-s windows".

Scored (tamebpf_eval.learned_score, by_class): issue 44's bar per RTT class
against a perfect round, whether advise answered from memory and sent
nothing, the learned capacity against the bottleneck's, and on the long
cases when the 5-min run's cap first settled within the 60-s truth's
spread for good, and whether by 3 min.

    make eval PRESET=fresh12 [EVAL_ARGS="--only KEY"]   # measure, resumable
    make eval PRESET=fresh12 EVAL_ARGS=--report         # score
    python -m tamebpf_eval.learned --draw fresh12 --short \\
        --results /tmp/smoke.json.gz   # a smoke run on a case of its own (~6 min)

About 14 min a case under 80 ms, 33 min a case at 80 ms or more.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Any

from tamebpf.estimate.spread import LONG_RTT_MS
from tamebpf_eval.cases import Case, case_path, log
from tamebpf_eval.commands import advise_from_memory, agent, json_log, pin_dir, run_transfer
from tamebpf_eval.fresh_draw import (
    MAX_IMPACT,
    TRUTH_STREAMS,
    WARMUP_S,
    WINDOW_S,
    Draw,
    draw,
    print_cases,
)
from tamebpf_eval.learned_score import BY_S, LONG_PLAN, advice_of, report
from tamebpf_eval.records import load, save
from tamebpf_eval.resumable import arguments, measure_missing, publish
from tamebpf_eval.truth import Truth, measure, settle
from tamebpf_testbed import Testbed, iperf

PLANS = ("run-60s", "export-60s", LONG_PLAN)
LONG_ONLY = (LONG_PLAN,)
DRAWS = {d.name: d for d in (
    # Drawn on 2026-11-28 at 02:33:28 UTC, `int.from_bytes(os.urandom(4),
    # "big") >> 1`, for issue 45's acceptance, before any of its cases ran
    # (docs/results/fresh12-decision-rules.md).
    Draw("fresh12", 1362227341, "advice learned from transfers, no server at the far end",
         PLANS, rounds=3, loss_based=12, bbr_cubic=0, bbr_bbr=0, long=6),
)}
STREAMS = 8  # the transfers' fixed count
NO_SERVER_PORT = iperf.PORT_CROSS + 97  # no iperf3 server listens there
EXPORT_ARGS = ("--ack-sampling", "--log-format", "json")  # and export's default --interval


@dataclass(frozen=True)
class Durations:
    transfer_s: float  # the 60-s transfers
    long_s: float  # the long run
    by_s: float  # when the long run's cap should be within the truth's spread
    warmup_s: float  # the truth's
    window_s: float
    long_window_s: float  # the long cases' second truth window
    rounds: int


FULL = Durations(60.0, 300.0, BY_S, WARMUP_S, WINDOW_S, 60.0, 3)
# --short: every step runs, shorter, on a case of its own (light, long, not
# one of a draw's: a smoke run shows none of them before it runs). Its
# transfers last 40 s: export learns from a count held for 3 readings, one
# every 10 s (its default --interval), and opens a 5-s ACK window first.
SHORT = Durations(40.0, 60.0, 40.0, 5.0, 5.0, 10.0, 2)
SMOKE = Case("smoke-20M-80ms-0.5bdp-droptail", 20.0, 80.0, 66, "droptail", "cubic", 3, None,
             "cubic")


def transfer_argv(tb: Testbed, case: Case, seconds: float) -> list[str]:
    return iperf.client_argv(tb.addresses["receiver"], iperf.PORT_MAIN, STREAMS, seconds,
                             case.cc, json_out=False)


def export_watching(tb: Testbed, case: Case, state: str, seconds: float) -> dict[str, Any]:
    """A plain transfer with `tamebpf export` watching: iperf3's exit status
    and the agent's log (its ACK windows and what they gave)."""
    with agent(state, tb.namespaces["sender"], *EXPORT_ARGS):
        proc = tb.popen("sender", transfer_argv(tb, case, seconds), stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            _, err = proc.communicate(timeout=seconds + 60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return {"exit": proc.returncode, "error": err.decode(errors="replace").strip()[-200:],
            "log": json_log(os.path.join(state, "agent.log"))}


def learn_and_ask(tb: Testbed, case: Case, plan: str, dur: Durations
                  ) -> tuple[dict[str, Any], dict[str, Any]]:
    """One plan's transfer with a fresh path memory, then advise from it:
    (what the transfer recorded, the advice as fresh_draw records one)."""
    with tempfile.TemporaryDirectory(prefix="tamebpf-learned-") as state:
        if plan == "export-60s":
            transfer = export_watching(tb, case, state, dur.transfer_s)
        else:
            seconds = dur.long_s if plan == LONG_PLAN else dur.transfer_s
            transfer = run_transfer(tb, state, MAX_IMPACT, transfer_argv(tb, case, seconds),
                                    seconds)
        asked = advise_from_memory(tb, state, NO_SERVER_PORT, case.cc, MAX_IMPACT)
    return transfer, advice_of(asked)


def points(truth: Truth) -> dict[str, Any]:
    return {str(n): {"mbit": p.mbit, "cross_with": p.cross_with}
            for n, p in truth.points.items()}


def evaluate(case: Case, d: Draw, dur: Durations) -> dict[str, Any]:
    long = case.rtt >= LONG_RTT_MS
    with pin_dir(), case_path(case, "fl") as (tb, reference, _):
        rec: dict[str, Any] = {
            "case": asdict(case), "key": case.key, "max_impact": MAX_IMPACT,
            "cross_reference": reference, "short": dur == SHORT, "streams": STREAMS,
            "transfer_s": dur.transfer_s, "long_s": dur.long_s, "by_s": dur.by_s,
            "advice": {}, "transfers": {}}
        for plan in d.plans:
            if plan in LONG_ONLY and not long:
                continue
            settle(tb, case.cross, reference)
            t0 = time.monotonic()
            rec["transfers"][plan], a = learn_and_ask(tb, case, plan, dur)
            rec["advice"][plan] = a
            log(f"  {plan}: " + (f"{a['n']} streams {a['streams_range']}" if a["refused"] is None
                                 else f"no answer ({a['refused']})")
                + f", {a['sent_packets']} packets sent, {time.monotonic() - t0:.0f} s")
        ns = sorted(set(TRUTH_STREAMS) | {a["n"] for a in rec["advice"].values() if a["n"]})
        truth = measure(tb, ns, case.cc, case.cross, dur.rounds, reference,
                        warmup_s=dur.warmup_s, window_s=dur.window_s,
                        progress=lambda s: log("  " + s),
                        longer_s=dur.long_window_s if long else None)
        rec["truth"], rec["cross_alone"] = points(truth), truth.cross_alone
        rec["truth_warmup_s"], rec["truth_window_s"], rec["rounds"] = \
            dur.warmup_s, dur.window_s, dur.rounds
        if truth.longer is not None:
            rec["truth_long"], rec["cross_alone_long"] = \
                points(truth.longer), truth.longer.cross_alone
            rec["truth_long_window_s"] = dur.long_window_s
        return rec


def main() -> int:
    ap = arguments(__doc__, "default: docs/results/eval-DRAW.json.gz")
    ap.add_argument("--draw", choices=sorted(DRAWS), required=True)
    ap.add_argument("--list", action="store_true", help="print the drawn cases and exit")
    ap.add_argument("--short", action="store_true",
                    help="every step, shorter (40-s transfers, a 60-s long run, 2 truth "
                    "rounds of 5 and 10 s), on a smoke case of its own, not the draw's: a "
                    "check of the harness, not for reporting; needs --results outside "
                    "docs/results")
    args = ap.parse_args()
    d = DRAWS[args.draw]
    if args.list:
        print_cases(d)
        return 0
    if args.short and (args.results is None or "docs/results" in os.path.abspath(args.results)):
        ap.error("--short: give --results FILE outside docs/results (a smoke run's records "
                 "are not the draw's)")
    results = args.results or d.results
    records = load(results)
    if any(bool(r.get("short")) != args.short for r in records) and not args.report:
        ap.error(f"{results} holds records of the other kind (--short or not): give another "
                 "--results")
    if not args.report:
        dur, cases = (SHORT, [SMOKE]) if args.short else (FULL, draw(d))
        measure_missing(records, cases, args.only, lambda case: evaluate(case, d, dur),
                        lambda rs: save(results, rs))
    publish(report(records, d), args.write, d.section, "Advice learned from transfers")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

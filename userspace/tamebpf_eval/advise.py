"""Accuracy of `tamebpf advise` on the WAN testbed (make eval).

For each case (bottleneck, queue, congestion control, m cross flows): start
the m cross flows and leave them running; run the advisor's probes (1 and 10
streams) at each probe length, and a 5-stream probe for the full order-2
baseline; then measure the ground truth (tamebpf_eval.truth): our
aggregate goodput for each n, and the cross traffic's goodput alone and
alongside our n streams, as the median of several rounds. Scores
(tamebpf_eval.score) are recomputed from the raw records every time:
- throughput error per n, |prediction - measurement| / measurement (Eq 15);
- impact error per n, |predicted - measured impact| (relative to one stream);
- advice quality: measured throughput at the advised n over the best measured
  throughput of any n whose measured impact stays within the limit;
- whether the measured impact at the advised n exceeds the limit.
Raw records go to docs/results/history/eval.json.gz, tables into the run's own file
under docs/results/ (--write; the Makefile's targets name it), which
docs/accuracy.md summarises.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

from tamebpf.advise.probes import run_probe, run_probes
from tamebpf.estimate.adaptive import past_start_up
from tamebpf.estimate.record import Target
from tamebpf.estimate.steady import Steady
from tamebpf_eval.docsection import write_section
from tamebpf_eval.records import gz_name, read_json, write_json
from tamebpf_eval.report import SECTION, plan_parts, tables
from tamebpf_eval.score import advised_n, probe_to_dict
from tamebpf_eval.truth import measure, settle, start_cross
from tamebpf_testbed import Testbed, iperf, teardown
from tamebpf_testbed.iperf import cross_rate

RESULTS = "docs/results/history/eval.json.gz"
CROSS_WARMUP_S = 5.0


@dataclass(frozen=True)
class Case:
    name: str
    rate: float
    rtt: float
    queue: int
    aqm: str
    cc: str
    cross: int
    cross_rtt: float | None = None  # the cross traffic's own RTT; None: the same as ours
    cross_cc: str | None = None  # the cross traffic's congestion control; None: ours

    @property
    def key(self) -> str:
        if self.cross_cc is None:
            return f"{self.name}/{self.cc}/m={self.cross}"
        return f"{self.name}/{self.cc}-vs-{self.cross_cc}/m={self.cross}"


# The paper's Fig. 2 bottlenecks, scaled to what the delay line emulates
# accurately here (docs/testbed.md): DropTail and RED, short and long RTT.
BOTTLENECKS = [
    ("100M-20ms-droptail", 100.0, 20.0, 25, "droptail"),
    ("100M-50ms-red", 100.0, 50.0, 100, "red"),
    ("20M-50ms-droptail", 20.0, 50.0, 25, "droptail"),
]


# Fresh cases (issue 15): drawn once, before any of them was run, with
# random.Random(20261124) from rates 20-150 Mbit/s, RTTs 20-120 ms, DropTail or
# RED, queues of 0.2-2 BDP, 1-30 cross flows, CUBIC/Reno/BBR and a cross-traffic
# RTT of half or twice ours in a third of them. Never tuned on: whatever their
# first run measures is the result. (rate, rtt, queue frames, BDP share, aqm,
# cc, cross flows, cross RTT)
FRESH = [
    (40, 100, 66, 0.2, "droptail", "cubic", 30, 50),
    (40, 120, 793, 2.0, "droptail", "bbr", 5, None),
    (20, 80, 26, 0.2, "droptail", "cubic", 30, None),
    (20, 120, 297, 1.5, "droptail", "bbr", 12, 240),
    (80, 20, 66, 0.5, "red", "cubic", 30, 40),
    (100, 30, 248, 1.0, "droptail", "reno", 8, None),
    (40, 80, 132, 0.5, "red", "cubic", 3, None),
    (80, 80, 1057, 2.0, "droptail", "reno", 30, 40),
    (120, 30, 89, 0.3, "red", "cubic", 2, None),
    (150, 100, 1858, 1.5, "droptail", "cubic", 20, None),
    (120, 60, 446, 0.75, "droptail", "cubic", 30, 30),
    (30, 20, 15, 0.3, "droptail", "bbr", 12, 10),
    (40, 100, 495, 1.5, "red", "reno", 12, None),
    (80, 120, 396, 0.5, "droptail", "bbr", 12, 240),
    (30, 20, 99, 2.0, "red", "bbr", 8, None),
    (120, 80, 159, 0.2, "droptail", "cubic", 1, 40),
    (20, 20, 17, 0.5, "red", "reno", 20, None),
    (120, 30, 89, 0.3, "droptail", "reno", 8, None),
    (100, 45, 74, 0.2, "red", "reno", 1, 22),
    (100, 80, 991, 1.5, "droptail", "cubic", 3, None),
]


def fresh_cases() -> list[Case]:
    out = []
    for i, (rate, rtt, queue, bdp, aqm, cc, m, cross_rtt) in enumerate(FRESH, 1):
        name = f"fresh{i:02d}-{rate}M-{rtt}ms-{bdp:g}bdp-{aqm}"
        if cross_rtt is not None:
            name += f"-xrtt{cross_rtt}"
        out.append(Case(name, float(rate), float(rtt), queue, aqm, cc, m,
                        None if cross_rtt is None else float(cross_rtt)))
    return out


def plan_seconds(plan: str) -> tuple[float, float]:
    """'S1+S10': two probes, each its own iperf3 test (as advise ran them up
    to issue 15's staged probes); 'S1:S10': the two as stages of one test
    (advise/probes.run_probes), as `tamebpf advise` runs them; 'S1:S10~L':
    stages that run on after S1 and S10, up to L seconds each, until their
    streams are past start-up (PastStartUpAfter; measured
    beside the default, not kept: docs/results/history/run-fresh-settled.md)."""
    s1, s10, limit = plan_parts(plan)  # ValueError unless two lengths
    d1, d10 = float(s1), float(s10)
    if not (0.5 <= d1 <= 60 and 0.5 <= d10 <= 60):
        raise ValueError(plan)
    if limit and not (staged(plan) and max(d1, d10) <= float(limit) <= 60):
        raise ValueError(plan)
    return d1, d10


@dataclass(frozen=True)
class PastStartUpAfter:
    """A 'S1:S10~L' stage's stop rule (run_probes' `enough`): past start-up
    (estimate.adaptive.past_start_up), asked once the stage has sent for
    `seconds`. The product once had this as PastStartUp with run_probes'
    `at_least`; it counts those seconds from the stage's first sample, not
    its start (one sample later: the plan as re-measured now differs from
    the history pages' by that much; `git checkout aacc835` runs it as
    it was)."""

    seconds: float

    def __call__(self, s: Steady, ack_rates: Callable[[], list[float]]) -> bool:
        return s.end_s >= self.seconds and past_start_up(s)


def plan_limit(plan: str) -> float | None:
    """A 'S1:S10~L' plan's L (None: the stages run exactly S1 and S10)."""
    limit = plan_parts(plan)[2]
    return float(limit) if limit else None


# A second fresh set, drawn by draw_cases(FRESH2_SEED, 12) from the same
# ranges on 2026-11-25, before any of them was run: the first set has been
# looked at case by case (docs/results/history/run-fresh-settled.md, "Probes that
# end in start-up"),
# so a change designed since is checked on these.
FRESH2_SEED = 20261125
RATES = (20, 30, 40, 80, 100, 120, 150)  # Mbit/s
RTTS = (20, 30, 45, 60, 80, 100, 120)  # ms
BDP_SHARES = (0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0)
CROSS_FLOWS = (1, 2, 3, 5, 8, 12, 20, 30)
FRAME_BYTES = 1514


def draw_cases(seed: int, count: int, prefix: str = "fresh2-") -> list[Case]:
    """`count` cases drawn at random from issue 15's ranges: rates 20-150
    Mbit/s, RTTs 20-120 ms, DropTail or RED, queues of 0.2-2 BDP (in
    1514-byte frames), 1-30 cross flows, CUBIC, Reno or BBR, and a third of
    them with a cross-traffic RTT of half or twice ours."""
    rnd = random.Random(seed)
    out = []
    for i in range(1, count + 1):
        rate, rtt, bdp = rnd.choice(RATES), rnd.choice(RTTS), rnd.choice(BDP_SHARES)
        aqm, cc = rnd.choice(("droptail", "red")), rnd.choice(("cubic", "reno", "bbr"))
        m = rnd.choice(CROSS_FLOWS)
        cross_rtt = rnd.choice((rtt / 2, rtt * 2)) if rnd.random() < 1 / 3 else None
        queue = max(2, round(bdp * rate * 1e6 * rtt / 1000 / 8 / FRAME_BYTES))
        name = f"{prefix}{i:02d}-{rate}M-{rtt}ms-{bdp:g}bdp-{aqm}"
        if cross_rtt is not None:
            name += f"-xrtt{cross_rtt:g}"
        out.append(Case(name, float(rate), float(rtt), queue, aqm, cc, m, cross_rtt))
    return out


def cases(ccs: list[str], crosses: list[int], only: str | None,
          which: str = "design") -> list[Case]:
    if which == "fresh2":
        return [c for c in draw_cases(FRESH2_SEED, 12) if not only or only in c.key]
    out = fresh_cases() if which == "fresh" else [
        Case(n, r, t, q, a, cc, m) for m in crosses for cc in ccs
        for (n, r, t, q, a) in BOTTLENECKS]
    return [c for c in out if not only or only in c.key]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def case_path(case: Case, prefix: str) -> Iterator[tuple[Testbed, float | None, Target]]:
    """A testbed for the case with both iperf3 servers up and, when the case
    has any, its cross traffic running: (testbed, the cross traffic's rate
    alone or None, the advisor's target). Torn down on every way out."""
    name = prefix + os.urandom(2).hex()
    tb = Testbed.up(name, case.rate, case.rtt, case.queue, aqm=case.aqm, cc=case.cc,
                    cross_rtt_ms=case.cross_rtt)
    procs = []
    try:
        procs = [iperf.start_server(tb, p) for p in (iperf.PORT_MAIN, iperf.PORT_CROSS)]
        reference = None
        if case.cross:
            procs.append(start_cross(tb, case.cross, case.cross_cc or case.cc, CROSS_WARMUP_S))
            reference = cross_rate(tb, 3.0)
            log(f"  cross traffic alone: {reference:.2f} Mbit/s")
        yield tb, reference, Target(tb.addresses["receiver"], iperf.PORT_MAIN,
                                    tb.namespaces["sender"], case.cc)
    finally:
        for proc in reversed(procs):
            proc.kill()
            proc.wait()
        teardown(name)


def staged(plan: str) -> bool:
    return ":" in plan


def measure_probes(tb: Testbed, case: Case, reference: float | None, target: Target,
                   plans: list[str], default: str) -> dict[str, list[dict[str, Any]]]:
    """Each plan's probes, the default's first, as `tamebpf advise` runs them:
    1 then 10 streams back to back. Every other probe starts from a settled
    path. The default plan adds a 5-stream probe (the full order-2 baseline)."""
    probes: dict[str, list[dict[str, Any]]] = {}
    for plan in [default] + [p for p in plans if p != default]:
        d1, d10 = plan_seconds(plan)
        probes[plan] = []
        settle(tb, case.cross, reference)
        limit = plan_limit(plan)
        if limit is not None:
            pair = run_probes(target, [(1, max(d1, limit)), (10, max(d10, limit))],
                              enough=[PastStartUpAfter(d1), PastStartUpAfter(d10)])
        elif staged(plan):
            pair = run_probes(target, [(1, d1), (10, d10)])
        else:
            srtt_us = 0  # as run_advice did: the 1-stream probe hands its RTT on
            pair = []
            for n, d in [(1, d1), (10, d10)]:
                if n == 10:
                    iperf.wait_for(lambda: iperf.server_idle(tb, iperf.PORT_MAIN), 30.0,
                                   "the iperf3 server to finish the previous probe")
                pair.append(run_probe(target, n, d, srtt_us=srtt_us))
                srtt_us = pair[0].path_srtt_us
        extra = []
        if plan == default:
            settle(tb, case.cross, reference)
            extra = [run_probe(target, 5, d10)]
        for p in pair + extra:
            probes[plan].append(probe_to_dict(p))
            log(f"  probe {plan} x {p.streams}: {p.steady.goodput_mbps:.2f} Mbit/s "
                f"(window {p.steady.end_s - p.steady.start_s:.2f} s, wall {p.duration_s:.2f} s)")
    return probes


def evaluate(case: Case, ns: list[int], plans: list[str], default: str, rounds: int,
             limit: float, window_s: float = 4.0, warmup_s: float = 2.0) -> dict[str, Any]:
    with case_path(case, "ev") as (tb, reference, target):
        probes = measure_probes(tb, case, reference, target, plans, default)
        rec: dict[str, Any] = {"case": asdict(case), "key": case.key,
                               "default_plan": default, "probes": probes}
        # Measure where the default advice lands too, not only interpolate there.
        wanted = sorted(set(ns) | {advised_n(rec, limit, default)})
        truth = measure(tb, wanted, case.cc, case.cross, rounds, reference,
                        window_s=window_s, warmup_s=warmup_s,
                        progress=lambda s: log("  " + s))
        rec["truth"] = {str(n): {"mbit": p.mbit, "cross_with": p.cross_with}
                        for n, p in truth.points.items()}
        rec["cross_alone"] = truth.cross_alone
        rec["cross_reference"] = reference
        rec["rounds"] = rounds
        rec["truth_window_s"] = window_s
        rec["truth_warmup_s"] = warmup_s
        return rec


def reprobe(case: Case, rec: dict[str, Any], plans: list[str], default: str) -> dict[str, Any]:
    """The record with its probes measured again for `plans` (replacing any
    of the same plan) and `default` as its default; its ground truth kept."""
    with case_path(case, "ev") as (tb, reference, target):
        probes = measure_probes(tb, case, reference, target, plans, default)
    return {**rec, "probes": {**rec["probes"], **probes}, "default_plan": default,
            "reprobed_plans": plans}


def truth_only(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """By key, each record's case and ground truth with none of its probes:
    what `--reprobe --truth-from` measures every plan on afresh, so the plans
    it reports were all run side by side."""
    return {r["key"]: {**r, "probes": {}} for r in records}


def with_acked_goodput(rec: dict[str, Any]) -> dict[str, Any]:
    """The record with each probe's goodput taken from bytes acked over the
    same steady window (where the probe recorded it): the two counts scored
    on the very same probes."""
    def probe(p: dict[str, Any]) -> dict[str, Any]:
        acked = p["steady"].get("goodput_acked_mbps")
        return p if acked is None else {**p, "steady": {**p["steady"], "goodput_mbps": acked}}
    return {**rec, "probes": {plan: [probe(p) for p in ps] for plan, ps in rec["probes"].items()}}


def load(path: str) -> list[dict[str, Any]]:
    """The records of `path` (.json, .json.gz or .json.xz); none if missing."""
    try:
        data = read_json(path)
    except FileNotFoundError:
        if path == gz_name(path) or not os.path.exists(gz_name(path)):
            return []
        data = read_json(gz_name(path))  # where save() put it
    return data.get("records", []) if isinstance(data, dict) else []


def save(path: str, records: list[dict[str, Any]]) -> None:
    """Records to `path`, gzipped (records.write_json)."""
    write_json(path, {"records": records})


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds: every testbed is torn down


def main() -> int:
    signal.signal(signal.SIGTERM, _exit_on_signal)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started with &
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cc", default="cubic,reno", help="congestion controls (default %(default)s)")
    ap.add_argument("--cross", default="2", help="cross-flow counts (default %(default)s; "
                    "the full table: 0,2,8,30)")
    ap.add_argument("--streams", default="1,2,4,8,16,30", help="ground-truth stream counts")
    ap.add_argument("--rounds", type=int, default=3, help="ground-truth rounds per point")
    ap.add_argument("--truth-window", type=float, default=4.0, metavar="SECONDS",
                    help="ground-truth measuring window per point and round (default "
                    "%(default)s; the report's 'truth spread' column says whether rounds agree)")
    ap.add_argument("--truth-warmup", type=float, default=2.0, metavar="SECONDS",
                    help="seconds our streams run before the window opens (default "
                    "%(default)s): time for their share of the path to settle")
    ap.add_argument("--max-impact", type=float, default=0.5)
    ap.add_argument("--plans", default="1+1,2.5+1.5,3+2",
                    help="probe lengths to compare, 'S1+S10': seconds of the 1-stream and the "
                    "10-stream probe (default %(default)s)")
    ap.add_argument("--plan", default="2+2", help="the advisor's default (%(default)s)")
    ap.add_argument("--set", choices=("design", "fresh", "fresh2"), default="design",
                    dest="which",
                    help="the design cases (--cc x --cross x 3 bottlenecks), the 20 fresh "
                    "cases drawn before their first run (their own cc and cross flows), or "
                    "the 12 of a second draw (fresh2) for changes made since")
    ap.add_argument("--only", help="run only cases whose key (name/cc/m=N) contains this")
    ap.add_argument("--append", action="store_true",
                    help=f"keep the cases already in {RESULTS} (a re-run case replaces its record)")
    ap.add_argument("--reprobe", action="store_true",
                    help=f"measure only the probes of --plans (and --plan, which becomes each "
                    f"record's default) on the cases already in {RESULTS}, keeping their "
                    "ground truth")
    ap.add_argument("--truth-from", metavar="FILE",
                    help="with --reprobe: take each case's ground truth from this results "
                    "file and keep none of its probes, so every plan in --results is "
                    "measured side by side in this run")
    ap.add_argument("--report", action="store_true",
                    help=f"measure nothing: re-score {RESULTS} and write the tables")
    ap.add_argument("--goodput-from", choices=("delivered", "acked"), default="delivered",
                    help="probe goodput to score: segments delivered (the advisor's, default) "
                    "or bytes acked in the same window (as measured before), where recorded")
    ap.add_argument("--write", metavar="FILE", help="write tables into this Markdown file")
    ap.add_argument("--results", default=RESULTS, metavar="FILE",
                    help="raw records (default %(default)s)")
    ap.add_argument("--section", default=SECTION, metavar="NAME",
                    help="the section of --write's file the tables replace (default "
                    "%(default)s; another name keeps a separate run's tables beside it)")
    ap.add_argument("--heading", default="Results", help="the tables' heading")
    args = ap.parse_args()
    plans = list(dict.fromkeys([args.plan] + args.plans.split(",")))
    for plan in plans:
        try:
            plan_seconds(plan)
        except ValueError:
            ap.error(f"bad probe plan {plan!r}: want S1+S10 (two tests), S1:S10 (one "
                     "staged test) or S1:S10~L (stages run on up to L s until past "
                     "start-up), in seconds, e.g. 2+2, 2.5:1.5 or 2:2~4.5")
    if args.truth_from and not args.reprobe:
        ap.error("--truth-from goes with --reprobe (it names where the ground truth is kept)")
    records = load(args.results) if args.append or args.report or args.reprobe else []
    if args.reprobe and not args.report:
        todo = cases(args.cc.split(","), [int(x) for x in args.cross.split(",")], args.only,
                     args.which)
        by_key = {r["key"]: r for r in records}
        source = args.truth_from or args.results
        truths = truth_only(load(args.truth_from)) if args.truth_from else by_key
        if args.truth_from:  # its cases, of those selected (advise refuses BBR: no truth)
            todo = [c for c in todo if c.key in truths]
            if not todo:
                ap.error(f"--truth-from: {args.truth_from} has none of the cases selected")
        missing = [c.key for c in todo if c.key not in truths]
        if missing:
            ap.error(f"--reprobe: no record in {source} for {', '.join(missing)}")
        for i, case in enumerate(todo, 1):
            log(f"case {i}/{len(todo)}: {case.key} (probes only)")
            by_key[case.key] = reprobe(case, truths[case.key], plans, args.plan)
            records = list(by_key.values())
            save(args.results, records)
    elif not args.report:
        todo = cases(args.cc.split(","), [int(x) for x in args.cross.split(",")], args.only,
                     args.which)
        for i, case in enumerate(todo, 1):
            log(f"case {i}/{len(todo)}: {case.key}")
            rec = evaluate(case, [int(x) for x in args.streams.split(",")], plans,
                           args.plan, args.rounds, args.max_impact, args.truth_window,
                           args.truth_warmup)
            records = [r for r in records if r["key"] != case.key] + [rec]
            save(args.results, records)  # a long run that dies keeps what it measured
    if args.goodput_from == "acked":
        records = [with_acked_goodput(r) for r in records]
    text = tables(records, args.max_impact, args.section, args.heading)
    sys.stdout.write(text)
    if args.write:
        write_section(args.write, args.section, text, "Accuracy of tamebpf advise")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

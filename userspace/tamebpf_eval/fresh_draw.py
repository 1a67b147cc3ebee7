"""Accuracy of the default `tamebpf advise` (probes until settled) and of
`--quick`, on a fresh draw against a settled ground truth (issue 29).

Each draw (DRAWS) is its cases, drawn by draw(seed) before any of them ran,
from the
issue's ranges: 18 loss-based (rates 20-200 Mbit/s, RTT 10-150 ms, DropTail
and RED, queues of 0.2-2 BDP, 1-30 cross flows of CUBIC or Reno as ours, a
third of them with a cross-traffic RTT of half or twice ours) and 6 with a
BBR sender (3 against CUBIC cross traffic, 3 against BBR). The decision
rules for what the result changes were written before each draw's first
run: docs/results/DRAW-decision-rules.md.

Per case, with the cross traffic running, each of the draw's plans:
"default", `advise` as it is (settled probes, 1 then 10 streams; for BBR a
third probe where the share asks for one); a candidate measured beside it
on the loss-based cases ("bounded": the pair under the bounded stop rules,
injected through run_probes' stop-rule hook, bounded_advice); then --quick
(2 s + 2 s); then the ground truth
(tamebpf_eval.truth) at 1, 4 and 16 streams and at each advised count:
20 s warm-up, 15 s window, 2 rounds. Scored as make eval scores
(tamebpf_eval.score): throughput error over the truth's points, impact
error, advice quality (>= 95% of the best nondisruptive), over the limit
by more than 0.05, probing time (the RTT check's included).

    make eval PRESET=fresh7 [EVAL_ARGS="--only KEY"]  # measure
    make eval PRESET=fresh7 EVAL_ARGS=--report        # score

Draws 5 and 6 measured candidates that have left tamebpf (capacity first,
the order by RTT): their records re-score, but they re-measure only at the
commit that had them (Draw.retired).

About 9 min a case; cases are kept as they finish and a run resumes.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from tamebpf.advise.advisor import DEFAULT_PROBES, QUICK_DURATIONS_S, run_advice
from tamebpf.advise.probes import StopRule, probe_congestion, run_probes
from tamebpf.defaults import DEFAULT_MAX_PROBE_S
from tamebpf.estimate.advice import build
from tamebpf.estimate.record import TIME_LIMIT, AdviseResult, Target
from tamebpf.estimate.settled import Settled
from tamebpf.estimate.spread import LONG_RTT_MS
from tamebpf.estimate.steady import Steady
from tamebpf.model import DEFAULT_MODEL, Settings
from tamebpf.present.advice import refusal_text, warning_texts
from tamebpf_eval import by_class
from tamebpf_eval.cases import FRAME_BYTES, Case, case_path, log
from tamebpf_eval.records import load, save
from tamebpf_eval.resumable import arguments, measure_missing, publish
from tamebpf_eval.score import OVER_BY, TARGET_QUALITY, p90, probe_to_dict, score, truth_table
from tamebpf_eval.truth import measure, settle

LOSS_BASED, BBR_CUBIC, BBR_BBR = 18, 3, 3


@dataclass(frozen=True)
class Draw:
    name: str
    seed: int
    why: str  # what it measures, for its section's heading
    plans: tuple[str, ...] = ("default", "quick")  # run in this order, each case
    # What of the draw's plans has left tamebpf since ("": nothing): its
    # records re-score (--report), its cases re-measure only at the commit
    # that had it.
    retired: str = ""
    rounds: int = 2  # truth rounds a case; with 3 or more, issue 44's by-class bar
    # The mix of cases: loss-based, BBR against CUBIC, BBR against BBR; and
    # how many of the loss-based have an RTT of LONG_RTT_MS or more (None:
    # each RTT drawn from all of RTTS, as in draws 3-8).
    loss_based: int = LOSS_BASED
    bbr_cubic: int = BBR_CUBIC
    bbr_bbr: int = BBR_BBR
    long: int | None = None

    @property
    def results(self) -> str:
        return f"docs/results/eval-{self.name}.json.gz"

    @property
    def section(self) -> str:
        return f"eval_{self.name}"


DRAWS = {d.name: d for d in (
    # Drawn on 2026-11-25 for issue 29, before any of its cases ran. Stopped
    # after 3 cases: the capacity trust rule it measured was replaced
    # (docs/results/history/run-fresh3.md says why).
    Draw("fresh3", 291125, "the settled default and --quick"),
    # Drawn on 2026-11-25 (os.urandom) for the large-band trust rule
    # (estimate/acktrain.LARGE_BAND), before any of its cases ran.
    Draw("fresh4", 9654106, "the settled default and --quick, large-band capacity trust"),
    # Drawn on 2026-11-26 (os.urandom) for the capacity-first default
    # (advisor.capacity_first), before any of its cases ran; "both" is the
    # default it replaced (1 then 10 streams, each until settled), measured
    # beside it on the same cases (docs/results/history/fresh5-decision-rules.md).
    Draw("fresh5", 155056400, "capacity first beside both probes and --quick",
         ("default", "both", "quick"), "its default, capacity first"),
    # Drawn on 2026-11-26 (os.urandom) for the order of the probes by the
    # path's RTT (advisor order "by-rtt"), before any of its cases ran; the
    # default (1 then 10 streams, each until settled) measured beside it
    # (docs/results/history/fresh6-decision-rules.md).
    Draw("fresh6", 969760752, "the pair in order beside the order by RTT and --quick",
         ("default", "by-rtt", "quick"), "the order by RTT"),
    # Drawn on 2026-11-26 (os.urandom) for the "bounded" stop profile
    # (advise/settled.StopProfile), before any of its cases ran; the default
    # ("settled") measured beside it (docs/results/fresh7-decision-rules.md).
    Draw("fresh7", 1342042681, "the settled default beside the bounded stop and --quick",
         ("default", "bounded", "quick")),
    # Drawn on 2026-11-27 at 06:49:44 UTC, `int.from_bytes(os.urandom(4),
    # "big") >> 1`, for issue 44's acceptance (the count range, the bar per
    # RTT class against a perfect round), before any of its cases ran; 3
    # truth rounds (docs/results/fresh8-decision-rules.md).
    Draw("fresh8", 722463913, "the default with its count range, and --quick, by RTT class",
         rounds=3),
    # Drawn on 2026-11-27 at 21:51:56 UTC, `int.from_bytes(os.urandom(4),
    # "big") >> 1`, for issue 44's acceptance after draw 8 refitted the
    # count range and widened the impact range, before any of its cases
    # ran; 3 truth rounds, half the loss-based cases long
    # (docs/results/fresh11-decision-rules.md).
    Draw("fresh11", 561449279, "the default with its count and impact ranges, and --quick, "
         "by RTT class", rounds=3, long=9),
)}
RATES = (20, 30, 40, 60, 80, 100, 120, 150, 200)  # Mbit/s
RTTS = (10, 20, 30, 45, 60, 80, 100, 120, 150)  # ms
BDP_SHARES = (0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0)
CROSS_FLOWS = (1, 2, 3, 5, 8, 12, 20, 30)
MAX_IMPACT = 0.30
TRUTH_STREAMS = (1, 4, 16)
WARMUP_S, WINDOW_S = 20.0, 15.0


def draw(d: Draw) -> list[Case]:
    rnd = random.Random(d.seed)
    kinds = [("loss", None)] * d.loss_based + [("bbr", "cubic")] * d.bbr_cubic + \
        [("bbr", "bbr")] * d.bbr_bbr
    # Exactly a third of the loss-based cases get a cross-traffic RTT of
    # their own (half or twice ours).
    other_rtt = set(rnd.sample(range(d.loss_based), d.loss_based // 3))
    # A draw that fixes how many loss-based cases are long picks which next;
    # their RTT comes from the long RTTs, the others' from the short ones.
    # (Without, nothing more is drawn here: draws 3-8 are as they were.)
    long = None if d.long is None else set(rnd.sample(range(d.loss_based), d.long))
    out = []
    for i, (kind, cross_cc) in enumerate(kinds):
        rtts = RTTS if long is None or kind != "loss" else \
            tuple(r for r in RTTS if (r >= LONG_RTT_MS) == (i in long))
        rate, rtt, bdp = rnd.choice(RATES), rnd.choice(rtts), rnd.choice(BDP_SHARES)
        aqm = rnd.choice(("droptail", "red"))
        m = rnd.choice(CROSS_FLOWS)
        cc = rnd.choice(("cubic", "reno")) if kind == "loss" else "bbr"
        cross_rtt = rnd.choice((rtt / 2, rtt * 2)) if i in other_rtt else None
        queue = max(2, round(bdp * rate * 1e6 * rtt / 1000 / 8 / FRAME_BYTES))
        name = f"{d.name}-{i + 1:02d}-{rate}M-{rtt}ms-{bdp:g}bdp-{aqm}"
        if cross_rtt is not None:
            name += f"-xrtt{cross_rtt:g}"
        out.append(Case(name, float(rate), float(rtt), queue, aqm, cc, m, cross_rtt,
                        cross_cc or cc))
    return out


def print_cases(d: Draw) -> None:
    """--list: the drawn cases, one a line."""
    for c in draw(d):
        print(c.key, f"queue {c.queue}", f"cross RTT {c.cross_rtt}" if c.cross_rtt else "")


# Plans measured on the loss-based cases only: BBR's probes have one order
# and one stop rule, "default"'s.
LOSS_BASED_ONLY = ("both", "by-rtt", "bounded")

# The bounded stop rules (fresh draw 7's candidate, chosen on the short
# paths of draws 4-6: docs/results/short-design.md; not kept: run-fresh7.md):
# the 1-stream probe stops once its goodput is within BOUNDED_FIRST_RSE, and
# the 10-stream probe waits for a tight capacity estimate at most
# BOUNDED_CAPACITY_WAIT_RTTS smoothed RTTs.
BOUNDED_FIRST_RSE = 0.10
BOUNDED_CAPACITY_WAIT_RTTS = 200.0


@dataclass(frozen=True)
class CapacityWait:
    """The capacity probe's settled rule (settled.Settled with capacity),
    that after `rtts` smoothed RTTs stops as a probe without one would, while
    the estimate is still not tight: the advice then takes the throughput
    fit, as it does when the probe reaches its limit."""

    rtts: float

    def __call__(self, s: Steady, ack_rates: Callable[[], list[float]]) -> str | None:
        waiting = Settled(capacity=True)
        ran_rtts = s.end_s / (s.srtt_ms / 1000) if s.srtt_ms else 0.0
        if ran_rtts < self.rtts:
            return waiting(s, ack_rates)
        return Settled(capacity=False)(s, ack_rates) or waiting(s, ack_rates)


def bounded_advice(target: Target, settings: Settings) -> AdviseResult:
    """`advise`'s settled pair for a loss-based sender under the bounded stop
    rules, given to run_probes as its stop rules (`enough`)."""
    cc, source = probe_congestion(target)
    rules: list[StopRule | None] = [Settled(capacity=False, rse=BOUNDED_FIRST_RSE),
                                    CapacityWait(BOUNDED_CAPACITY_WAIT_RTTS)]
    results = run_probes(target, [(n, DEFAULT_MAX_PROBE_S) for n in DEFAULT_PROBES],
                         enough=rules)
    return replace(build(target, results, settings, DEFAULT_MODEL, None),
                   congestion=f"{cc} ({source})")


def advise_once(target: Target, plan: str) -> tuple[AdviseResult, float]:
    t0 = time.monotonic()
    settings = Settings(max_impact=MAX_IMPACT)
    if plan == "bounded":
        result = bounded_advice(target, settings)
    elif plan in ("default", "quick"):
        result = run_advice(target, settings,
                            durations_s=QUICK_DURATIONS_S if plan == "quick" else None)
    else:
        raise ValueError(f"plan {plan!r} has left tamebpf")
    return result, time.monotonic() - t0


def advice_record(result: AdviseResult, wall_s: float) -> dict[str, Any]:
    a = result.prediction.advice
    at = next((c for c in result.confidence if c.streams == a.num_flows), None)
    return {
        "n": a.num_flows, "wall_s": wall_s, "used": result.used,
        "streams_range": None if result.streams_range is None else list(result.streams_range),
        "impact_range": None if at is None else [at.low, at.high],
        "refused": None if result.refused is None else refusal_text(result.refused),
        "curve": [[c.streams, c.throughput, c.impact] for c in result.prediction.curve],
        "probes": [probe_to_dict(p) for p in result.probes],
        "warnings": warning_texts(result),
        "capacity": None if result.capacity is None else asdict(result.capacity),
        "share_impact_vs_none": None if result.share is None else
        [p.impact_vs_none for p in result.share.curve],
    }


def evaluate(case: Case, d: Draw) -> dict[str, Any]:
    with case_path(case, "fd") as (tb, reference, target):
        rec: dict[str, Any] = {"case": asdict(case), "key": case.key, "advice": {},
                               "max_impact": MAX_IMPACT, "cross_reference": reference}
        for plan in d.plans:
            if plan in LOSS_BASED_ONLY and case.cc == "bbr":
                continue
            settle(tb, case.cross, reference)
            result, wall = advise_once(target, plan)
            rec["advice"][plan] = advice_record(result, wall)
            ran = ", ".join(f"{p.streams}x {p.duration_s:.1f} s {p.stopped or 'fixed'}"
                            for p in result.probes)
            log(f"  {plan}: {result.prediction.advice.num_flows} streams in {wall:.1f} s ({ran})")
        ns = sorted(set(TRUTH_STREAMS) | {a["n"] for a in rec["advice"].values()})
        truth = measure(tb, ns, case.cc, case.cross, d.rounds, reference, warmup_s=WARMUP_S,
                        window_s=WINDOW_S, progress=lambda s: log("  " + s))
        rec["truth"] = {str(n): {"mbit": p.mbit, "cross_with": p.cross_with}
                        for n, p in truth.points.items()}
        rec["cross_alone"] = truth.cross_alone
        rec["truth_warmup_s"], rec["truth_window_s"], rec["rounds"] = WARMUP_S, WINDOW_S, d.rounds
        return rec


def plan_score(rec: dict[str, Any], plan: str) -> dict[str, Any] | None:
    a = rec["advice"].get(plan)
    if a is None or a["refused"]:
        return None
    truth = truth_table(rec)
    thru = {int(n): t for n, t, _ in a["curve"]}
    imp = {int(n): i for n, _, i in a["curve"]}
    out = score(thru, imp, a["n"], truth, rec["max_impact"])
    # The RTT check that chose the order is part of the probing.
    check = a.get("rtt_check") or {}
    out["probing_s"] = sum(p["duration_s"] for p in a["probes"]) + check.get("seconds", 0.0)
    return out


def _row(label: str, recs: list[dict[str, Any]], plan: str) -> str:
    scores = [(r, plan_score(r, plan)) for r in recs if plan in r["advice"]]
    ok = [(r, s) for r, s in scores if s is not None]
    refused = len(scores) - len(ok)
    if not ok:
        return f"| {label} | {plan} | 0 (refused {refused}) | - | - | - | - | - | - |"
    errs = [s["thru_err_mean"] for _, s in ok if s["thru_err_mean"] is not None]
    imp = [e for _, s in ok for e in s["impact_errs"]]
    q = [s["quality"] for _, s in ok if s["quality"] is not None]
    over = sum((s["exceeds_by"] or 0.0) > OVER_BY for _, s in ok)
    t = [s["probing_s"] for _, s in ok]
    short = [s["probing_s"] for r, s in ok if r["case"]["rtt"] <= 30]
    ip90 = p90(imp)
    return (f"| {label} | {plan} | {len(ok)}" + (f" (refused {refused})" if refused else "")
            + f" | {over}/{len(ok)} | {sum(x >= TARGET_QUALITY for x in q)}/{len(q)} | "
            f"{statistics.median(errs):.3f} / {statistics.fmean(errs):.3f} | "
            + ("-" if ip90 is None else f"{ip90:.3f}") + " | "
            f"{statistics.median(t):.1f} / {max(t):.1f} | "
            + (f"{statistics.median(short):.1f} ({len(short)})" if short else "-") + " |")


def at_limit(records: list[dict[str, Any]], plan: str) -> str:
    """How many of the plan's settled probes ran to their time limit, per
    probe size, on these records: where its probing time goes."""
    ran = [a for r in records if (a := r["advice"].get(plan)) is not None]
    sizes = sorted({p["streams"] for a in ran for p in a["probes"]})
    parts = []
    for n in sizes:
        probes = [p for a in ran for p in a["probes"] if p["streams"] == n]
        hit = sum(p.get("stopped") == TIME_LIMIT for p in probes)
        parts.append(f"{n}-stream {hit} of {len(probes)}")
    return f"{plan}: " + ", ".join(parts)


def report(records: list[dict[str, Any]], d: Draw) -> str:
    loss = [r for r in records if r["case"]["cc"] != "bbr"]
    bbr = [r for r in records if r["case"]["cc"] == "bbr"]
    lines = [f"<!-- {d.section}:start -->",
             f"## Fresh draw {d.name}: {d.why} (make eval-{d.name})", "",
             f"{len(records)} of {d.loss_based + d.bbr_cubic + d.bbr_bbr} cases measured; impact "
             f"limit {MAX_IMPACT:g}; ground truth {WARMUP_S:g} s warm-up, {WINDOW_S:g} s window, "
             f"{d.rounds} rounds. Targets: over by > 0.05 in <= 1 in 10; >= 95% of the best in "
             ">= 90%; throughput error median <= 0.08, mean <= 0.15; impact error p90 <= 0.15; "
             "probing median <= 20 s, worst <= 35 s, <= 6 s on paths of 30 ms or less.", "",
             "| cases | plan | scored | over by > 0.05 | >= 95% of best | thru err median / "
             "mean | impact err p90 | probing median / worst s | median s, RTT <= 30 ms |",
             "|---|---|---|---|---|---|---|---|---|"]
    for label, group in (("loss-based", loss), ("BBR sender", bbr)):
        if group:
            lines += [_row(label, group, plan) for plan in d.plans
                      if any(plan in r["advice"] for r in group)]
    settled_plans = [p for p in d.plans if p != "quick" and any(p in r["advice"] for r in loss)]
    if settled_plans:
        lines += ["", "Loss-based probes that ran to their time limit: "
                  + "; ".join(at_limit(loss, p) for p in settled_plans) + "."]
    lines += ["", "| case | plan | advised | quality | thru err | over by | probes (s, why "
              "ended; by-rtt: the RTT check first) |", "|---|---|---|---|---|---|---|"]
    for r in records:
        for plan in d.plans:
            if plan not in r["advice"]:
                continue
            s = plan_score(r, plan)
            a = r["advice"][plan]
            probes = ", ".join(
                f"{p['streams']}: {p['duration_s']:.1f} {p.get('stopped') or 'fixed'}"
                for p in a["probes"])
            if a.get("rtt_check"):  # the handshake RTT that chose the order, and its time
                c = a["rtt_check"]
                probes = f"RTT {c['srtt_us'] / 1000:.0f} ms: {c['seconds']:.1f}, " + probes
            if s is None:
                lines.append(f"| {r['key']} | {plan} | refused | - | - | - | {probes} |")
                continue
            lines.append(
                f"| {r['key']} | {plan} | {s['advised']} | "
                + ("-" if s["quality"] is None else f"{s['quality']:.2f}") + " | "
                + ("-" if s["thru_err_mean"] is None else f"{s['thru_err_mean']:.3f}") + " | "
                + ("-" if s["exceeds_by"] is None else f"{s['exceeds_by']:+.2f}")
                + f" | {probes} |")
    if d.rounds >= 3:
        lines += ["", *by_class.report(records, d.plans)]
    lines.append(f"<!-- {d.section}:end -->")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = arguments(__doc__, "default: docs/results/eval-DRAW.json.gz")
    ap.add_argument("--draw", choices=sorted(DRAWS), required=True)
    ap.add_argument("--list", action="store_true", help="print the drawn cases and exit")
    args = ap.parse_args()
    d = DRAWS[args.draw]
    if args.list:
        print_cases(d)
        return 0
    if d.retired and not args.report:
        ap.error(f"{d.name} measured {d.retired}, which has left tamebpf: "
                 f"EVAL_ARGS=--report re-scores its records; `git checkout aacc835 && "
                 f"make eval PRESET={d.name}` re-measures it")
    results = args.results or d.results
    records = load(results)
    if not args.report:
        measure_missing(records, draw(d), args.only, lambda case: evaluate(case, d),
                        lambda rs: save(results, rs))
    publish(report(records, d), args.write, d.section, "Accuracy of tamebpf advise")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

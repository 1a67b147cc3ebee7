"""Choosing a stop rule for short paths, on the short-path cases of draws 4-6.

On paths of 30 ms or less the default probes for a median 15.5 s (fresh
draw 6), where issue 29 asks for 6 s: the 10-stream probe, whose ACKs
estimate the capacity, waits for that estimate to be trusted, and on those
paths it often never is (docs/results/probe-limit.md). This re-probes each
loss-based case of 30 ms or less of fresh draws 4-6 (their ground truth is
stored with them) as `advise` probes by default, 1 stream then 10 as the
stages of one test, but every stage runs its full 15 s. While it runs,
each candidate rule of a stage is asked at every check, as run_probes asks
the real one, and what the probe had measured when a candidate first said
"stop" is kept under its name (tamebpf_eval.settled.Recorder). A plan is a
rule for the 1-stream stage and one for the 10-stream stage; each is
scored as if it had ended the probes when its rules said so, by the
advisor (estimate.advice.build) against the draw's truth, at its impact
limit.

These cases were looked at before: this chooses, it does not measure. A
rule chosen here is measured on a fresh draw whose rules are written
before its first case runs.

    make eval PRESET=short-design                      # measure (~2 min a case)
    make eval PRESET=short-design EVAL_ARGS=--report   # score what was measured
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import asdict, replace
from typing import Any

from tamebpf.advise.estimate import acktrain
from tamebpf.advise.estimate.steady import Steady, window_samples
from tamebpf.advise.probes import run_probes
from tamebpf.advise.settled import DEFAULT_MAX_PROBE_S, Settled
from tamebpf.model.confidence import relative_standard_error
from tamebpf_eval.advise import case_path, load
from tamebpf_eval.fresh_draw import DRAWS, MAX_IMPACT, draw
from tamebpf_eval.report import OVER_BY, TARGET_QUALITY
from tamebpf_eval.resumable import arguments, measure_missing, publish
from tamebpf_eval.score import OURS, estimators, p90, probe_from_dict
from tamebpf_eval.settled import Recorder
from tamebpf_eval.settled import load as load_gz
from tamebpf_eval.settled import save as save_gz
from tamebpf_eval.truth import settle

RESULTS = "docs/results/short-design.json.gz"
SECTION = "short_design"
SOURCES = ("fresh4", "fresh5", "fresh6")
SHORT_RTT_MS = 30.0
TODAY = "k4+k4-cap"  # the default as it is: advise/settled.Settled on both stages

Rule = Callable[[Steady, Callable[[], list[float]]], Any]


def _after(seconds: float) -> Rule:
    def rule(s: Steady, rates: Callable[[], list[float]]) -> bool:
        return s.end_s >= seconds
    return rule


def _capacity_until(seconds: float, base: Settled) -> Rule:
    """Today's rule for the capacity probe, but after `seconds` of probe it
    ends on the rest of the rule alone: the capacity, if still not trusted,
    is left to the throughput fit, as it is when the probe hits its limit."""
    settled_alone = replace(base, capacity=False)

    def rule(s: Steady, rates: Callable[[], list[float]]) -> Any:
        return base(s, rates) or (s.end_s >= seconds and settled_alone(s, rates))
    return rule


def _capacity_until_rtts(rtts: float) -> Rule:
    """As _capacity_until, after `rtts` smoothed RTTs of probe: on a short
    path that is a few seconds, on a long one past the probe's limit (200
    RTTs at 75 ms are 15 s), so long paths keep today's rule. This is the
    product's own rule (Settled.capacity_wait_rtts, the bounded profile's
    second stage), so what is scored here is what ships."""
    return Settled(capacity=True, capacity_wait_rtts=rtts)


def first_stage() -> dict[str, Rule]:
    """Candidates for the 1-stream probe (it never estimates the capacity)."""
    return {"k4": Settled(), "k2": Settled(epochs=2), "k4-rse10": Settled(rse=0.10),
            "t2": _after(2.0), "t3": _after(3.0)}


def second_stage() -> dict[str, Rule]:
    """Candidates for the 10-stream probe, whose ACKs estimate the capacity."""
    today = Settled(capacity=True)
    return {"k4-cap": today,
            "k4": Settled(capacity=False),
            "k4-rse10": Settled(capacity=False, rse=0.10),
            "k4-cap-until4": _capacity_until(4.0, today),
            "k4-cap-until6": _capacity_until(6.0, today),
            "k4-cap-until150rtt": _capacity_until_rtts(150.0),
            "k4-cap-until200rtt": _capacity_until_rtts(200.0),
            "t2": _after(2.0), "t3": _after(3.0)}


def _view(full: dict[str, Any], seen: dict[str, Any] | None, name: str,
          overhead_s: float) -> dict[str, Any]:
    if seen is None:  # never said stop: ran to the limit
        return full
    return {**full, "steady": seen["steady"], "ack_pair_mbps": seen["ack_pair_mbps"],
            "duration_s": seen["at_s"] + 0.1 + overhead_s, "stopped": name}


def probe_stages(target: Any) -> dict[str, dict[str, dict[str, Any]]]:
    """One 15 s + 15 s probe pair: each stage's view of it under each of its
    candidates (and "t15", the full stage), as probe records."""
    first, second = Recorder(False, first_stage()), Recorder(True, second_stage())
    pair = run_probes(target, [(1, DEFAULT_MAX_PROBE_S), (10, DEFAULT_MAX_PROBE_S)],
                      enough=[first, second])
    full = []
    for p in pair:
        d = asdict(replace(p, ack_pair_mbps=()))
        d["ack_pair_mbps"] = [round(r, 1) for r in p.ack_pair_mbps]
        full.append(d)
    overhead = (pair[0].setup_s or 0.0, pair[-1].finish_s or 0.0)
    return {stage: {"t15": full[k], **{name: _view(full[k], rec.kept.get(name), name, overhead[k])
                                      for name in rec.rules}}
            for k, (stage, rec) in enumerate((("first", first), ("second", second)))}


def with_plans(rec: dict[str, Any]) -> dict[str, Any]:
    """The record with every plan ("FIRST+SECOND") built from its stages."""
    first, second = rec["stages"]["first"], rec["stages"]["second"]
    plans = {"t15+t15": [first["t15"], second["t15"]]}
    plans.update({f"{a}+{b}": [first[a], second[b]] for a in first for b in second
                  if "t15" not in (a, b)})
    return {**rec, "probes": plans}


def short_cases() -> list[tuple[Any, dict[str, Any]]]:
    """(case, its record of the draw, truth included) for every loss-based
    case of 30 ms or less in SOURCES that has a truth."""
    out = []
    for name in SOURCES:
        stored = {r["key"]: r for r in load(f"docs/results/eval-{name}.json")}
        for case in draw(DRAWS[name]):
            rec = stored.get(case.key)
            if rec and case.cc != "bbr" and case.rtt <= SHORT_RTT_MS:
                out.append((case, rec))
    return out


def plan_names(records: list[dict[str, Any]]) -> list[str]:
    names: list[str] = []
    for rec in records:
        names += [n for n in rec["probes"] if n not in names]
    return names


def scored(rec: dict[str, Any], plan: str) -> dict[str, Any]:
    s = dict(estimators(rec, rec["max_impact"], plan)[OURS])
    s["probing_s"] = sum(p["duration_s"] for p in rec["probes"][plan])
    return s


def rows(records: list[dict[str, Any]]) -> list[str]:
    out = ["| plan (1-stream + 10-stream rule) | cases | over by > 0.05 | >= 95% of best | "
           "thru err median / mean | impact err p90 | probing median / worst s |",
           "|---|---|---|---|---|---|---|"]
    for plan in plan_names(records):
        got = [scored(r, plan) for r in records if plan in r["probes"]]
        errs = [s["thru_err_mean"] for s in got if s["thru_err_mean"] is not None]
        q = [s["quality"] for s in got if s["quality"] is not None]
        imp = [e for s in got for e in s["impact_errs"]]
        t = [s["probing_s"] for s in got]
        over = sum((s["exceeds_by"] or 0.0) > OVER_BY for s in got)
        ip90 = p90(imp)
        out.append(f"| {plan}{' (today)' if plan == TODAY else ''} | {len(got)} | "
                   f"{over}/{len(got)} | {sum(x >= TARGET_QUALITY for x in q)}/{len(q)} | "
                   + (f"{statistics.median(errs):.3f} / {statistics.fmean(errs):.3f}"
                      if errs else "-") + " | "
                   + ("-" if ip90 is None else f"{ip90:.3f}") + " | "
                   f"{statistics.median(t):.1f} / {max(t):.1f} |")
    return out


def per_case(records: list[dict[str, Any]], plans: list[str]) -> list[str]:
    out = ["| case | " + " | ".join(plans) + " |", "|---|" + "---|" * len(plans)]
    for rec in records:
        cells = []
        for plan in plans:
            if plan not in rec["probes"]:
                cells.append("-")
                continue
            s = scored(rec, plan)
            err = "-" if s["thru_err_mean"] is None else f"{s['thru_err_mean']:.2f}"
            cells.append(f"{s['advised']}, {err}, {s['probing_s']:.0f} s")
        out.append(f"| {rec['key']} | " + " | ".join(cells) + " |")
    return out


def todays_limits(records: list[dict[str, Any]]) -> list[str]:
    """Where today's time goes: its probes that ran to the limit, each stage
    with what held it (the 1-stream probe's epochs and goodput error, the
    10-stream probe's capacity estimate at the end)."""
    first, second = [], []
    for rec in records:
        one = probe_from_dict(rec["stages"]["first"]["k4"])
        if one.stopped != "k4":
            s = one.steady
            rse = relative_standard_error(s.noise, window_samples(s)) if s.noise else None
            first.append((s.median_epochs, rse))
        ten = probe_from_dict(rec["stages"]["second"]["k4-cap"])
        if ten.stopped != "k4-cap":
            e = acktrain.estimate_capacity(ten.ack_pair_mbps, ten.steady.goodput_mbps)
            second.append(e.trusted)
    rses = [r for _, r in first if r is not None]
    return [f"Today's rule ran the 1-stream probe to its limit on {len(first)} of "
            f"{len(records)}"
            + (f" (after {min(e for e, _ in first):g}-{max(e for e, _ in first):g} epochs; "
               f"goodput error {min(rses):.3f}-{max(rses):.3f} against 0.05)" if rses else "")
            + f", and the 10-stream probe on {len(second)}, {second.count(False)} of them with "
            "a capacity estimate still untrusted at the end."]


def report(records: list[dict[str, Any]]) -> str:
    shown = [p for p in (TODAY, "t15+t15", "k4+k4", "k4+k4-cap-until4", "k4+k4-cap-until6",
                         "k4+k4-cap-until200rtt", "k2+k4", "t3+t3")
             if any(p in r["probes"] for r in records)]
    return "\n".join([
        f"<!-- {SECTION}:start -->",
        "## Stop rules on the short paths of draws 4-6 (make eval-short-design)", "",
        f"{len(records)} loss-based cases of {SHORT_RTT_MS:g} ms or less; each plan scored on "
        "the same 15 s + 15 s probes as if its rules had ended them when they said so, "
        "against the draw's ground truth (impact limit "
        f"{MAX_IMPACT:g}). Rules: kN, advise/settled.Settled with N epochs; -cap, it also "
        "waits for a trusted capacity estimate (today's 10-stream rule); -cap-untilS, it "
        "waits for that only S s (-untilRrtt: R smoothed RTTs); -rse10, a 10% error bound; "
        "tN, a fixed N s.", "",
        *rows(records), "", *todays_limits(records), "",
        "Per case: advised n, throughput error, probing seconds.", "",
        *per_case(records, shown), f"<!-- {SECTION}:end -->", ""])


def main() -> int:
    ap = arguments(__doc__, f"default: {RESULTS}")
    args = ap.parse_args()
    results = args.results or RESULTS
    records = load_gz(results)
    if not args.report:
        cases = short_cases()  # reads three draws' records: once
        stored = {c.key: rec for c, rec in cases}

        def measure(case: Any) -> dict[str, Any]:
            with case_path(case, "sh") as (tb, reference, target):
                settle(tb, case.cross, reference)
                stages = probe_stages(target)
            keep = {k: stored[case.key].get(k)
                    for k in ("case", "key", "max_impact", "truth", "cross_alone")}
            return {**keep, "stages": stages, "default_plan": TODAY}
        measure_missing(records, [c for c, _ in cases], args.only, measure,
                        lambda rs: save_gz(results, rs))
    publish(report([with_plans(r) for r in records]), args.write, SECTION,
            "Choosing a stop rule for short paths")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

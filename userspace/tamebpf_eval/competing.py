"""The competing flows each probe implies, against the settled truth's
(a table for eval_report.py).

With the bottleneck's TCP goodput C known, a probe of n streams that got T
implies m = n (C / T - 1) competing flows (model/capacity.py), and so does
a ground-truth point. A probe whose streams are still in start-up reads a
share far from their long-run one, and its m with it: the table shows each
probe's m beside whether its steady window was past start-up (estimate/
adaptive.PastStartUp) and how many RTTs it spanned.

It also shows a lead checked on the same probes: competing flows from how
fast the queue fills between losses. Under Reno in congestion avoidance
every flow adds a segment per RTT, so with the link busy the queueing
delay rises by N * MSS * 8 / (C * R) per second for N flows at RTT R; each
rising run of the probes' mean smoothed RTT in the steady window (Steady.
rtt_series; a fall of the RTT ends a run: a loss, ours or the cross
traffic's) gives an N, and the cell shows m = N - n for each run.
"""

from __future__ import annotations

import statistics
from typing import Any

from tamebpf.estimate.adaptive import MIN_WINDOW_RTTS, past_start_up
from tamebpf.estimate.capacity import tcp_goodput_mbps
from tamebpf.model.linalg import least_squares
from tamebpf_eval.score import (
    OURS,
    PERFECT_PROBES,
    capacity_estimate_score,
    estimators,
    probe_from_dict,
    probing_s,
    truth_table,
)


def implied_m(streams: int, mbps: float, capacity: float) -> float | None:
    return streams * (capacity / mbps - 1) if mbps > 0 else None


def _slope(pts: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of y over t (None when every t is the same)."""
    if len({t for t, _ in pts}) < 2:
        return None
    return least_squares([[t, 1.0] for t, _ in pts], [y for _, y in pts])[0]


def queue_fill_m(p: dict[str, Any], capacity: float) -> list[float]:
    """m from each rising run (at least 3 samples) of the RTT in the window."""
    s = p["steady"]
    runs: list[list[tuple[float, float]]] = [[]]
    for t, rtt, _ in s.get("rtt_series") or ():
        if t < s["start_s"] or t > s["end_s"] or not rtt:
            continue
        if runs[-1] and rtt < runs[-1][-1][1] - 0.5:  # ms: a fall ends the run
            runs.append([])
        runs[-1].append((t, rtt))
    out = []
    for run in (r for r in runs if len(r) >= 3):
        k = _slope(run)  # ms per s
        rtt_s = statistics.fmean(y for _, y in run) / 1000
        if k is not None:
            mss = s.get("mss") or 1448
            out.append(k / 1000 * capacity * 1e6 * rtt_s / (mss * 8) - p["streams"])
    return out


def _probe_cell(p: dict[str, Any], capacity: float) -> str:
    s = probe_from_dict(p).steady
    m = implied_m(p["streams"], s.goodput_mbps, capacity)
    rtts = s.window_rtts
    where = "past" if past_start_up(s) else ("slow start" if not s.after_slow_start else "short")
    fill = ", ".join(f"{x:.1f}" for x in queue_fill_m(p, capacity)) or "-"
    return f"{m:.1f} ({where}, {rtts:.0f} RTTs; queue fill: {fill})" \
        if m is not None and rtts else "-"


def competing_table(records: list[dict[str, Any]], limit: float, quality: float,
                    over_by: float) -> list[str]:
    """The table, the per-plan summary and the probe-again lines; `quality`
    and `over_by` are the report's targets (eval_report)."""
    plans = sorted({d for r in records for d in r["probes"]})
    out = ["", "### Competing flows each probe implies", "",
           "m = n (C / T - 1) with C the bottleneck's TCP goodput, for the ground truth's "
           "points and each probe; beside each probe: its steady window past start-up "
           f"(every stream out of slow start and at least {MIN_WINDOW_RTTS:g} RTTs), still "
           "in slow start, or too short, its length in RTTs, and the m each rising run of "
           "its RTT implies (queue fill: the lead above, - where no RTT series was "
           "recorded); and the mean throughput error of the advice from each plan's "
           "probes.", "",
           "| case | truth: m at each n | " + " | ".join(
               f"{d}: 1 stream | {d}: 10 streams | {d}: thru err" for d in plans) + " |",
           "|---|---|" + "---|---|---|" * len(plans)]
    for rec in records:
        probes = rec["probes"][rec["default_plan"]]
        mss = next((p["steady"].get("mss") for p in probes if p["steady"].get("mss")), None)
        capacity = tcp_goodput_mbps(rec["case"]["rate"], mss, False)
        truth = ", ".join(f"{n}: {implied_m(n, v['mbit'] or 0.0, capacity) or 0.0:.1f}"
                          for n, v in truth_table(rec).items())
        cells = []
        for d in plans:
            by_n = {p["streams"]: p for p in rec["probes"].get(d, [])}
            cells += [_probe_cell(by_n[n], capacity) if n in by_n else "-" for n in (1, 10)]
            err = estimators(rec, limit, d)[OURS]["thru_err_mean"] if by_n else None
            cells.append(f"{err:.3f}" if err is not None else "-")
        c = rec["case"]
        out.append(f"| {c['name']} {c['cc']} x{c['cross']} | {truth} | " + " | ".join(cells)
                   + " |")
    return (out + _summary(records, plans, limit)
            + fallback_lines(records, plans, limit, quality, over_by)
            + advice_by_plan(records, plans, limit))


def _advice_cell(s: dict[str, Any]) -> str:
    q = s["quality"]
    err = s["thru_err_mean"]
    return (f"{s['advised']}, {'-' if q is None else f'{q:.2f}'}, "
            f"{'-' if err is None else f'{err:.3f}'}")


def _capacity_cell(c: dict[str, Any]) -> str:
    if c.get("err") is None:
        return "-"
    share = c["pairs"] / c["considered"] if c.get("considered") else 0.0
    return (f"{c['err']:+.1%}" + ("" if c["trusted"] else ", not trusted")
            + f" ({share:.0%} of pairs at the peak)")


def advice_by_plan(records: list[dict[str, Any]], plans: list[str], limit: float
                   ) -> list[str]:
    """Per case and plan: the stream count advised, its quality and the mean
    throughput error, beside the capacity estimate those probes gave; and
    what the model gives from the truth's own goodputs at 1 and 10 streams."""
    if len(plans) < 2:
        return []
    out = ["", "Each plan's advice per case: advised n, quality, thru err mean; then the "
           "capacity estimate from the same probes (error against the link's TCP goodput; "
           "the share of the ACK pairs in its peak). 'Perfect probes': the model on the "
           "truth's own goodputs at 1 and 10 streams.", "",
           "| case | perfect probes | " + " | ".join(f"{d} | {d}: capacity" for d in plans)
           + " |", "|---|---|" + "---|---|" * len(plans)]
    for rec in records:
        default = estimators(rec, limit)
        cells = [_advice_cell(default[PERFECT_PROBES]) if PERFECT_PROBES in default else "-"]
        for d in plans:
            if d in rec["probes"]:
                cells += [_advice_cell(estimators(rec, limit, d)[OURS]),
                          _capacity_cell(capacity_estimate_score(rec, d))]
            else:
                cells += ["-", "-"]
        c = rec["case"]
        out.append(f"| {c['name']} {c['cc']} x{c['cross']} | " + " | ".join(cells) + " |")
    return out


def _past(rec: dict[str, Any]) -> bool:
    """Both of the default plan's probes were past start-up."""
    return all(past_start_up(probe_from_dict(p).steady)
               for p in rec["probes"][rec["default_plan"]] if p["streams"] in (1, 10))


def _summary(records: list[dict[str, Any]], plans: list[str], limit: float) -> list[str]:
    """Mean and median throughput error per plan: over all cases, and split
    by whether the default plan's probes were past start-up; and each plan
    case by case against the default."""
    def errs(d: str, recs: list[dict[str, Any]]) -> list[float]:
        return [e for r in recs if d in r["probes"]
                for e in [estimators(r, limit, d)[OURS]["thru_err_mean"]] if e is not None]

    def cell(xs: list[float]) -> str:
        if not xs:
            return "-"
        return f"{statistics.fmean(xs):.3f} / {statistics.median(xs):.3f} ({len(xs)})"

    groups = [("all cases", records),
              ("default probes past start-up", [r for r in records if _past(r)]),
              ("default probes not past start-up", [r for r in records if not _past(r)])]
    out = ["", "Throughput error per plan, mean / median (cases):", "",
           "| cases | " + " | ".join(plans) + " |", "|---|" + "---|" * len(plans)]
    for label, recs in groups:
        out.append(f"| {label} | " + " | ".join(cell(errs(d, recs)) for d in plans) + " |")
    for d in plans:
        pairs = [(estimators(r, limit, d)[OURS]["thru_err_mean"],
                  estimators(r, limit, r["default_plan"])[OURS]["thru_err_mean"])
                 for r in records if d in r["probes"] and d != r["default_plan"]]
        pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
        if pairs:
            # The medians over these cases alone: a plan that some records
            # lack is compared with the default on the same cases.
            mine, default = [a for a, _ in pairs], [b for _, b in pairs]
            out.append(f"\n{d} against each case's default: lower error in "
                       f"{sum(a < b for a, b in pairs)}, higher in {sum(a > b for a, b in pairs)},"
                       f" the same in {sum(a == b for a, b in pairs)} of {len(pairs)} cases "
                       f"(mean / median {statistics.fmean(mine):.3f} / "
                       f"{statistics.median(mine):.3f}, the default's "
                       f"{statistics.fmean(default):.3f} / {statistics.median(default):.3f}).")
    return out


def fallback(records: list[dict[str, Any]], d: str, limit: float
             ) -> list[tuple[dict[str, Any], float]]:
    """Per case, the advice of a policy that probes again with plan `d`
    only where the default plan's probes ended in start-up (and keeps the
    default's advice elsewhere), and its probing time: the default's probes,
    plus `d`'s where it probed again. Cases without `d` are left out."""
    out = []
    for r in records:
        if d not in r["probes"]:
            continue
        default = r["default_plan"]
        again = not _past(r)
        score = estimators(r, limit, d if again else default)[OURS]
        out.append((score, probing_s(r, default) + (probing_s(r, d) if again else 0.0)))
    return out


def fallback_lines(records: list[dict[str, Any]], plans: list[str], limit: float,
                   quality: float, over_by: float) -> list[str]:
    """One line per longer plan: what probing again with it where the default
    probes ended in start-up would have given (option (a) of issue 15)."""
    out = []
    for d in plans:
        # A run-on plan ('~') extends the default's own probes: not a second set.
        if d in {r["default_plan"] for r in records} or "~" in d:
            continue
        rows = fallback(records, d, limit)
        errs = [s["thru_err_mean"] for s, _ in rows if s["thru_err_mean"] is not None]
        if not errs:
            continue
        walls = [w for _, w in rows]
        n = len(rows)
        good = sum((s["quality"] or 0.0) >= quality for s, _ in rows)
        over = sum((s["exceeds_by"] or 0.0) > over_by for s, _ in rows)
        again = sum(not _past(r) for r in records if d in r["probes"])
        out.append(f"\nThe default, then {d} where its probes ended in start-up ({again} of "
                   f"{n} cases): thru err mean / median {statistics.fmean(errs):.3f} / "
                   f"{statistics.median(errs):.3f}, >= {quality:.0%} of the best in {good} of "
                   f"{n}, over the limit by > {over_by:g} in {over} of {n}; probing (both "
                   f"sets where it probed again) median {statistics.median(walls):.1f} s, "
                   f"worst {max(walls):.1f} s.")
    return out

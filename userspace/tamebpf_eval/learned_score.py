"""Scores and report of issue 45's draw (tamebpf_eval.learned), from its
records alone.

Pure: a record holds what `advise` answered from memory after each
transfer (in the form fresh_draw's advice takes, so by_class scores it
against issue 44's bar), the transfers' own summaries and logs, and the
truth's raw rounds. The rules these numbers decide by:
docs/results/fresh12-decision-rules.md.

- **No server**: whether `advise` answered from what the transfer taught
  (exit 0, `from_memory`, `memory.source == "passive"`) and sent nothing
  (at most commands.STRAY_PACKETS on the sender's link), and the capacity
  it rests on against the bottleneck's TCP goodput.
- **Long paths**: the 5-min run's cap target over time (its start, then
  each `follow_change` in its log) against the truth's spread, the 3
  rounds' best nondisruptive goodput of the 60-s windows, -10% of the
  lowest to +10% of the highest: when it first settles inside for good,
  and whether that is by 3 min.
"""

from __future__ import annotations

import statistics
from typing import Any

from tamebpf.estimate.capacity import tcp_goodput_mbps
from tamebpf.estimate.spread import LONG_RTT_MS
from tamebpf_eval import by_class
from tamebpf_eval.by_class import best_count, plan_scored, rounds_of, some_rounds
from tamebpf_eval.commands import STRAY_PACKETS
from tamebpf_eval.fresh_draw import Draw

# The truth's spread: its rounds' best, -10% of the lowest to +10% of the highest.
SPREAD_MARGIN = 0.10
BY_S = 180.0  # within the spread by 3 min
CAPACITY_NEAR = 0.10  # a learned capacity within 10% of the bottleneck's TCP goodput
LONG_PLAN = "run-5min"  # the long cases' 5-min transfer under `tamebpf run`


def advice_of(asked: dict[str, Any]) -> dict[str, Any]:
    """One `advise --json` from memory (commands.advise_from_memory) as
    fresh_draw records an advice: n, the curve, the ranges, `refused` (why
    it is no answer from what was learned, None when it is); no probes."""
    out: dict[str, Any] = {"exit": asked["exit"], "sent_packets": asked["sent_packets"],
                           "seconds": asked["seconds"], "probes": [], "n": None, "curve": [],
                           "streams_range": None, "impact_range": None, "memory": None}
    a = asked["answer"]
    if a is None:
        out["refused"] = f"exit {asked['exit']}: {asked['error']}"
        return out
    mem = a.get("memory") or {}
    out["memory"] = {k: mem.get(k) for k in ("source", "probes", "age_s", "capacity", "pool",
                                             "transfers", "learned_over_s", "rtt_ms",
                                             "competing_flows", "fit")}
    out["n"] = a["advice"]["num_flows"]
    out["streams_range"] = a["advice"].get("streams_range")
    out["curve"] = [[c["streams"], c["throughput_mbps"], c["impact"]] for c in a["curve"]]
    adv = mem.get("advice") or {}
    if adv.get("num_flows") == out["n"] and adv.get("impact_low") is not None:
        out["impact_range"] = [adv["impact_low"], adv["impact_high"]]
    out["refused"] = None if a.get("from_memory") and mem.get("source") == "passive" else \
        f"not from what transfers taught (from_memory {a.get('from_memory')}, " \
        f"source {mem.get('source')})"
    return out


def silent(a: dict[str, Any]) -> bool:
    return int(a["sent_packets"]) <= STRAY_PACKETS


def capacity_error(rec: dict[str, Any], a: dict[str, Any]) -> float | None:
    """The learned capacity over the bottleneck's TCP goodput, - 1."""
    got = ((a.get("memory") or {}).get("capacity") or {}).get("goodput_mbps")
    if got is None:
        return None
    return float(got) / tcp_goodput_mbps(rec["case"]["rate"], None, False) - 1


def best_goodputs(truth: dict[str, Any], limit: float) -> list[float]:
    """Each round's best nondisruptive goodput: its goodput at its best
    count (the most goodput with impact within the limit; by_class)."""
    rec = {"truth": truth}
    out = []
    for k in range(rounds_of(rec)):
        table = some_rounds(rec, (k,))
        n = best_count(table, limit)
        mbit = None if n is None else table[n]["mbit"]
        if mbit is not None:
            out.append(mbit)
    return out


def spread_of(truth: dict[str, Any], limit: float) -> tuple[float, float] | None:
    best = best_goodputs(truth, limit)
    if not best:
        return None
    return min(best) * (1 - SPREAD_MARGIN), max(best) * (1 + SPREAD_MARGIN)


def timeline(run: dict[str, Any]) -> list[tuple[float, float]]:
    """The cap's target (Mbit/s) from each time on (s after `run` started):
    its start, then each follow_change in the run's log."""
    summary = run.get("summary")
    if not summary or summary.get("cap_start_mbps") is None:
        return []
    out = [(0.0, float(summary["cap_start_mbps"]))]
    changes = sorted((float(e["time"]) - run["started"], float(e["to_mbps"]))
                     for e in run.get("log", ())
                     if e.get("event") == "follow_change" and e.get("to_mbps") is not None)
    return out + changes


def target_at(steps: list[tuple[float, float]], t: float) -> float | None:
    now = None
    for at, v in steps:
        if at > t:
            break
        now = v
    return now


def settled_at(steps: list[tuple[float, float]], low: float, high: float,
               end_s: float) -> float | None:
    """The first time from which the target stays within [low, high] up to
    end_s (None: outside at the end, or no target)."""
    since = None
    for at, v in steps:
        if at > end_s:
            break
        inside = low <= v <= high
        if not inside:
            since = None
        elif since is None:
            since = at
    return since


def time_within(steps: list[tuple[float, float]], low: float, high: float, start_s: float,
                end_s: float) -> float:
    """The share of [start_s, end_s] the target spent within [low, high]."""
    inside = 0.0
    edges = [t for t, _ in steps if start_s < t < end_s]
    for a, b in zip([start_s, *edges], [*edges, end_s], strict=True):
        v = target_at(steps, a)
        if v is not None and low <= v <= high:
            inside += b - a
    return inside / (end_s - start_s) if end_s > start_s else 0.0


def long_score(rec: dict[str, Any]) -> dict[str, Any] | None:
    """The long run's cap against the 60-s truth's spread (None: the case
    has no long run or no long truth)."""
    run = (rec.get("transfers") or {}).get(LONG_PLAN)
    if run is None or not rec.get("truth_long"):
        return None
    end_s = rec["long_s"]
    by_s = rec.get("by_s", BY_S)
    steps = timeline(run)
    spread = spread_of(rec["truth_long"], rec["max_impact"])
    out: dict[str, Any] = {"spread": spread, "best": best_goodputs(rec["truth_long"],
                                                                   rec["max_impact"]),
                           "start": steps[0][1] if steps else None,
                           "at_by": target_at(steps, by_s), "at_end": target_at(steps, end_s),
                           "changes": max(0, len([t for t, _ in steps if t <= end_s]) - 1),
                           "settled_s": None, "within_by": False, "share_after_by": None,
                           "exit": run.get("exit")}
    if spread is None or not steps:
        return out
    low, high = spread
    out["settled_s"] = settled_at(steps, low, high, end_s)
    out["within_by"] = out["settled_s"] is not None and out["settled_s"] <= by_s
    out["share_after_by"] = time_within(steps, low, high, by_s, end_s)
    return out


def no_server_row(records: list[dict[str, Any]], plan: str) -> str | None:
    """One plan over the cases that ran it: answered from memory, and of
    those silent; the learned capacity against the bottleneck's. (An advise
    with no answer tried the port, a packet or two: not counted.)"""
    ran = [(r, r["advice"][plan]) for r in records if plan in r["advice"]]
    if not ran:
        return None
    answered = [(r, a) for r, a in ran if a["refused"] is None]
    quiet = sum(silent(a) for _, a in answered)
    errs = [e for r, a in answered if (e := capacity_error(r, a)) is not None]
    near = sum(abs(e) <= CAPACITY_NEAR for e in errs)
    most = max((a["sent_packets"] for _, a in answered), default=None)
    return (f"| {plan} | {len(answered)}/{len(ran)} | {quiet}/{len(answered)}"
            + ("" if most is None else f" (most {most})") + " | "
            + (f"{len(errs)}: {near} within {CAPACITY_NEAR:.0%}, median error "
               f"{statistics.median(errs):+.1%}" if errs else "-") + " |")


def why_not(rec: dict[str, Any], plan: str) -> str:
    """What the transfer said of why it taught nothing: run's summary and
    what its scout's ACK window gave, or the last of export's ACK-window
    lines."""
    t = (rec.get("transfers") or {}).get(plan) or {}
    log = t.get("log", ())
    s = t.get("summary")
    if s is not None:
        scout = [e["msg"] for e in log if e.get("event") == "scout_no_capacity"]
        # dict.fromkeys: each note once (runs before 15fa063 repeated theirs)
        return "; ".join(x for x in dict.fromkeys(
            [s.get("not_learned"), *s.get("notes", ()), *scout]) if x)
    acks = [e["msg"] for e in log if str(e.get("event", "")).startswith("ack_")]
    return acks[-1] if acks else t.get("error") or ""


# Wide enough for run's whole reason (what it learned, and what each ACK
# window said), which the pages quote.
WHY_WIDTH = 720


def _cell(text: str, width: int = 160) -> str:
    text = text.replace("|", "/").replace("\n", " ")
    return text if len(text) <= width else text[:width - 3] + "..."


def _mbit(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def case_rows(records: list[dict[str, Any]], plans: tuple[str, ...]) -> list[str]:
    out = ["| case | plan | answered from | advised (range) | quality | thru err | over by | "
           "capacity learned vs the link's | packets sent |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        for plan in plans:
            a = r["advice"].get(plan)
            if a is None:
                continue
            head = f"| {r['key']} | {plan} | "
            if a["refused"] is not None:
                said = f"exit {a['exit']}" if a["exit"] else a["refused"]
                out.append(head + _cell(f"nothing ({said}): {why_not(r, plan) or a['refused']}",
                                        WHY_WIDTH)
                           + f" | - | - | - | - | - | {a['sent_packets']} |")
                continue
            s = plan_scored(r, plan)
            mem = a["memory"] or {}
            pool = mem.get("pool") or {}
            cap = (mem.get("capacity") or {})
            err = capacity_error(r, a)
            rng = a["streams_range"]
            out.append(
                head + f"{mem.get('transfers')} transfer(s), {pool.get('windows', 0)} windows | "
                f"{a['n']}" + (f" ({rng[0]}-{rng[1]})" if rng else "") + " | "
                + ("-" if s is None or s["quality"] is None else f"{s['quality']:.2f}") + " | "
                + ("-" if s is None or s["thru_err_mean"] is None else f"{s['thru_err_mean']:.3f}")
                + " | " + ("-" if s is None or s["exceeds_by"] is None
                           else f"{s['exceeds_by']:+.2f}") + " | "
                + ("-" if err is None else
                   f"{cap['goodput_mbps']:.1f} ({_cell(str(cap.get('method')), 40)}), {err:+.1%}")
                + f" | {a['sent_packets']} |")
    return out


def long_rows(records: list[dict[str, Any]]) -> list[str]:
    first = next((r for r in records if long_score(r) is not None), {})
    window, by_s = first.get("truth_long_window_s", 60.0), first.get("by_s", BY_S)
    out = [f"| case | {window:g}-s rounds' best, Mbit/s | spread | cap start | at {by_s:g} s | "
           f"at the end | changes | within for good from | by {by_s:g} s | after {by_s:g} s "
           "within |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        s = long_score(r)
        if s is None:
            continue
        spread = "-" if s["spread"] is None else f"{s['spread'][0]:.1f}-{s['spread'][1]:.1f}"
        out.append(
            f"| {r['key']} | {', '.join(f'{b:.1f}' for b in s['best']) or '-'} | {spread} | "
            f"{_mbit(s['start'])} | {_mbit(s['at_by'])} | {_mbit(s['at_end'])} | "
            f"{s['changes']} | "
            + ("never" if s["settled_s"] is None else f"{s['settled_s']:.0f} s") + " | "
            + ("yes" if s["within_by"] else "no") + " | "
            + ("-" if s["share_after_by"] is None else f"{s['share_after_by']:.0%}") + " |")
    return out


def report(records: list[dict[str, Any]], d: Draw) -> str:
    short = any(r.get("short") for r in records)
    lines = [f"<!-- {d.section}:start -->",
             f"## Fresh draw {d.name}: {d.why} (make eval-{d.name})", ""]
    if short:
        lines += ["**A smoke run (--short): shortened transfers and truth, not for "
                  "reporting.**", ""]
    longs = [s for r in records if (s := long_score(r)) is not None]
    first = records[0] if records else {}
    lines += [
        f"{len(records)} of {d.loss_based} loss-based cases measured, "
        f"{sum(r['case']['rtt'] >= LONG_RTT_MS for r in records)} of them at 80 ms or more "
        f"(of {d.long}); impact limit {first.get('max_impact', 0.3):g}. Each plan from a "
        "fresh path memory: a transfer of " + str(first.get("streams", 8)) + " streams, "
        "then `advise` with no server there. Truth: "
        + (f"{first['truth_warmup_s']:g} s warm-up, {first['truth_window_s']:g}-s window, "
           f"{first['rounds']} rounds" if records else "-")
        + "; on the long cases the same runs to a "
        + (f"{first['truth_long_window_s']:g}-s" if first.get("truth_long_window_s")
           else "60-s") + " window too.", "",
        "| plan | answered from what it learned | of those, sent nothing (at most "
        f"{STRAY_PACKETS} packets) | capacity learned |", "|---|---|---|---|"]
    lines += [row for plan in d.plans if (row := no_server_row(records, plan)) is not None]
    lines += ["", *by_class.report(records, d.plans)]
    long_recs = [{**r, "truth": r["truth_long"]} for r in records if r.get("truth_long")]
    if long_recs:
        lines += ["", f"The long cases against the truth of the "
                  f"{long_recs[0]['truth_long_window_s']:g}-s windows:", "",
                  *by_class.class_rows(long_recs, d.plans)]
    lines += ["", *case_rows(records, d.plans)]
    if longs:
        within = sum(s["within_by"] for s in longs)
        lead = long_recs[0]
        by = lead.get("by_s", BY_S)
        lines += ["", f"The long run ({lead['long_s']:g} s under `tamebpf run`): its "
                  f"cap's target against the spread of the {lead['truth_long_window_s']:g}-s "
                  "truth (each round's best "
                  f"nondisruptive goodput, -{SPREAD_MARGIN:.0%} of the lowest to "
                  f"+{SPREAD_MARGIN:.0%} of the highest). Within for good by {by:g} s in "
                  f"{within} of {len(longs)} (issue 45: >= 5 of 6).", "", *long_rows(records)]
    lines.append(f"<!-- {d.section}:end -->")
    return "\n".join(lines) + "\n"

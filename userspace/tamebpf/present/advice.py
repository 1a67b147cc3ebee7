"""`tamebpf advise` output: the text report and the JSON shape."""

from __future__ import annotations

from typing import Any

from tamebpf.common.units import percent
from tamebpf.common.words import count
from tamebpf.estimate.advice import path_spread
from tamebpf.estimate.record import AdviceRefusal, AdviceWarning, AdviseResult, ProbeResult, Target
from tamebpf.model.confidence import Z_90, ImpactRange
from tamebpf.paths.entry import REMOTE_CC
from tamebpf.present.prediction import prediction_to_json, render_prediction_table


def _measurement(p: ProbeResult) -> dict[str, Any]:
    s = p.steady
    return {
        "streams": p.streams,
        "goodput_mbps": s.goodput_mbps,
        "iperf3_mbps": p.iperf3_mbps,
        "sender_retransmits": p.sender_retransmits,
        "loss_rate": s.loss_rate,
        "srtt_ms": s.srtt_ms,
        "congestion_control": ",".join(s.congestion_control) or None,
        "duration_s": p.duration_s,
        # Of duration_s: connecting until the server ran the test, and
        # ending it (losses at a full queue make these grow, not the traffic).
        "setup_s": p.setup_s,
        "finish_s": p.finish_s,
        "steady_window_s": [s.start_s, s.end_s],
        # Whether every stream had left slow start when the window began, and
        # its length in smoothed RTTs (estimate/adaptive.past_start_up).
        "past_slow_start": s.after_slow_start,
        "steady_window_rtts": s.window_rtts,
        # Why the probe ended (its stop rule's reason, "time limit", or None
        # for a fixed --duration/--quick probe), the streams' congestion
        # epochs since slow start (the median stream's, and each), and the
        # window's trend: second half's goodput less the first's, relative.
        "stopped": p.stopped,
        "epochs": s.median_epochs,
        "stream_epochs": list(s.epochs),
        "trend": s.trend,
        "retransmits": s.retrans,
        "data_segments": s.data_segs,
        "goodput_cv": s.noise,
        "rwnd_limited_fraction": s.rwnd_limited,
        "flows": [{"cookie": f.cookie, "goodput_mbps": f.goodput_mbps,
                   "loss_rate": f.loss_rate, "srtt_ms": f.srtt_ms} for f in s.flows],
    }


def to_json(result: AdviseResult) -> dict[str, Any]:
    out = prediction_to_json(result.prediction)
    out["warnings"] = list(result.prediction.warnings) + warning_texts(result)
    out["measurements"] = [_measurement(p) for p in result.probes]
    free = result.throughput_prediction or result.prediction
    anchored = result.used == "capacity"
    out["estimators"] = {
        "used": result.used,
        "throughput": {k: v for k, v in prediction_to_json(free).items()
                       if k in ("params", "advice")},
        "capacity": {k: v for k, v in out.items() if k in ("params", "advice")}
        if anchored else None,
        "loss_rtt": None if result.loss_prediction is None else {
            k: v for k, v in prediction_to_json(result.loss_prediction).items()
            if k in ("params", "advice", "warnings", "calibration")},
        "loss_rtt_error": result.loss_error,
    }
    c = result.capacity
    out["capacity"] = None if c is None else {
        "link_mbps": c.link_mbps, "goodput_mbps": c.goodput_mbps,
        "competing_flows": c.competing_flows, "used": anchored, "source": c.source}
    e = result.capacity_estimate
    out["capacity_estimate"] = None if e is None else {
        "goodput_mbps": e.goodput_mbps, "low_mbps": e.low_mbps, "high_mbps": e.high_mbps,
        "level": 0.90, "method": e.method, "ack_pairs": e.pairs, "ack_pairs_considered":
        e.considered, "trusted": e.trusted, "reason": e.reason}
    out["confidence"] = _confidence_json(result)
    out["refused"] = None if result.refused is None else refusal_text(result.refused)
    out["congestion"] = result.congestion
    out["direction"] = result.target.direction
    out["share"] = None if result.share is None else _share_json(result)
    if out.get("advice") is not None and result.streams_range is not None:
        out["advice"]["streams_range"] = list(result.streams_range)
    if result.refused:
        # No second answer: the fit's numbers stay under "estimators" only.
        out["advice"] = None
        out["curve"] = []
    out["target"] = _target_json(result.target)
    out["from_memory"] = False  # probed now (present/paths.recalled_json: from memory)
    return out


def _share_json(result: AdviseResult) -> dict[str, Any]:
    """The capacity-share advice (BBR): per stream count our goodput, the
    other traffic's, the impact against one stream with its range, and
    against no transfer."""
    share = result.share
    assert share is not None
    return {
        "capacity_mbps": share.capacity,
        "third_probe": share.next_probe,
        "curve": [{"streams": p.streams, "goodput_mbps": p.goodput, "cross_mbps": p.cross,
                   "impact": p.impact, "impact_low": p.impact_low,
                   "impact_high": p.impact_high, "impact_vs_none": p.impact_vs_none,
                   "measured": p.measured} for p in share.curve],
    }


def _target_json(t: Target) -> dict[str, Any]:
    return {"host": t.host, "port": t.port, "netns": t.netns, "congestion": t.congestion,
            "direction": t.direction}


def _advised_range(result: AdviseResult) -> ImpactRange | None:
    n = result.prediction.advice.num_flows
    return next((r for r in result.confidence if r.streams == n), None)


def _straddling(result: AdviseResult) -> list[int]:
    limit = result.prediction.settings.max_impact
    return [r.streams for r in result.confidence if r.straddles(limit)]


def _confidence_json(result: AdviseResult) -> dict[str, Any] | None:
    if not result.confidence:
        return None
    adv = _advised_range(result)
    return {
        # level and z: the delta method's part; the round-to-round spread
        # (estimate/spread.py) then widens it (estimate/advice.impact_confidence).
        "level": 0.90, "z": Z_90, "spread": path_spread(result.probes),
        "source": "probe goodput noise (delta method), widened by the path's round-to-round "
                  "spread",
        "advised": None if adv is None else {"streams": adv.streams, "impact": adv.impact,
                                             "low": adv.low, "high": adv.high},
        "straddling_limit": _straddling(result),
        "impact_ranges": [{"streams": r.streams, "low": r.low, "high": r.high}
                          for r in result.confidence],
    }


def _opt(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def _estimate_lines(result: AdviseResult) -> list[str]:
    e = result.capacity_estimate
    pairs = "data segment" if result.target.direction == "receive" else "ACK"
    if e is None:
        return [f"capacity estimate: none (no {pairs}s were logged)"]
    if e.goodput_mbps is None or e.low_mbps is None or e.high_mbps is None:
        return [f"capacity estimate: none ({e.reason})"]
    line = (f"capacity estimate ({e.method}): {e.goodput_mbps:.2f} Mbit/s of TCP goodput, "
            f"90% {e.low_mbps:.2f}-{e.high_mbps:.2f}, from {e.pairs} of "
            f"{e.considered} {pairs} pairs")
    if not e.trusted:
        line += f"; not trusted: {e.reason}"
    elif result.capacity is not None and result.capacity.link_mbps is not None:
        line += " (check)"
    return [line]


def range_text(streams_range: tuple[int, int] | None) -> str:
    """' (3-6 on this path's variation)' beside the advised count."""
    if streams_range is None:
        return ""
    low, high = streams_range
    return f" ({low}-{high} on this path's variation)" if low != high else \
        " (no other count on this path's variation)"


def render_refusal(reason: str) -> str:
    """The answer when there is no advice."""
    return f"ADVICE: none: {reason}\n"


def _stopped(p: ProbeResult) -> str:
    if p.stopped is None:
        return "fixed"
    return p.stopped


def render(result: AdviseResult) -> str:
    t = result.target
    what = "advice for downloads from" if t.direction == "receive" else "advice for"
    lines = [f"{what} {t.host}:{t.port}"
             + (f" (from netns {t.netns})" if t.netns else ""), "",
             "probe  streams  kernel Mbit/s   loss    srtt ms  cc     seconds  epochs  trend  "
             "ended",
             ]
    for i, p in enumerate(result.probes, 1):
        s = p.steady
        lines.append(
            f"{i:>5}  {p.streams:>7}  {s.goodput_mbps:>13.2f}"
            f"  {_opt(None if s.loss_rate is None else percent(s.loss_rate), '.3f'):>6}%"
            f"  {_opt(s.srtt_ms, '8.2f'):>8}  {','.join(s.congestion_control) or '-':<5}"
            f"  {p.duration_s:>7.1f}  {s.median_epochs:>6g}"
            f"  {_opt(None if s.trend is None else percent(s.trend), '+5.0f'):>4}%"
            f"  {_stopped(p)}")
    # iperf3's server counts one test, and the probes are stages of one test:
    # its figure averages both, slow start included, so it is not a column
    # beside the kernel's per-probe steady goodput (it read half of it).
    first = 1
    for i, p in enumerate(result.probes, 1):
        if p.iperf3_mbps is None:
            continue
        which = f"probe {i}" if first == i else f"probes {first}-{i}"
        lines.append(f"iperf3's own count over its test ({which}, start-up included): "
                     f"{p.iperf3_mbps:.2f} Mbit/s")
        first = i + 1
    if len(result.probes) == 1 and result.used == "capacity":
        given = result.capacity is not None and result.capacity.link_mbps is not None
        lines.append(f"one probe: with the capacity ({'given' if given else 'estimated, trusted'})"
                     " it fixes the fit; a second probe runs only without one")
    if result.congestion and t.direction == "receive":
        cc = result.congestion.split(" ", 1)[0]
        lines.append("advice for downloads, the server sending with "
                     + ("its own default congestion control" if cc == REMOTE_CC
                        else result.congestion))
    elif result.congestion:
        lines.append(f"advice for senders running {result.congestion}")
    if result.refused:
        return "\n".join(lines) + "\n\n" + render_refusal(refusal_text(result.refused))
    lines += ["", render_prediction_table(result.prediction).rstrip("\n"), ""]
    a = result.prediction.advice
    if result.share is not None:
        lines += _share_lines(result)
    elif result.loss_prediction is not None:
        b = result.loss_prediction.advice
        lines.append(f"loss-RTT estimator (check): {count(b.num_flows, 'stream')}, "
                     f"{b.max_nondisruptive_thru:.2f} Mbit/s, impact {b.cross_traffic_impact:.1%}")
    else:
        lines.append(f"loss-RTT estimator (check): none ({result.loss_error})")
    c = result.capacity
    if result.used == "capacity" and c is not None and result.throughput_prediction:
        f = result.throughput_prediction.advice
        lines.append("throughput fit without the capacity (check): "
                     f"{count(f.num_flows, 'stream')}, "
                     f"{f.max_nondisruptive_thru:.2f} Mbit/s, impact {f.cross_traffic_impact:.1%}")
        where = (f"{c.link_mbps:g} Mbit/s link (--capacity) = {c.goodput_mbps:.2f} Mbit/s of "
                 "TCP goodput" if c.link_mbps is not None
                 else f"{c.goodput_mbps:.2f} Mbit/s of TCP goodput (estimated)")
        lines.append(f"capacity: {where}; the probes put {c.competing_flows:.1f} "
                     "competing flows on it")
    lines += _estimate_lines(result)
    how = {"capacity": "capacity fit", "share": "capacity share, BBR"}.get(
        result.used, "throughput fit")
    adv = _advised_range(result)
    if adv is not None:
        straddle = _straddling(result)
        limit = result.prediction.settings.max_impact
        lines.append(
            f"confidence: impact at {count(adv.streams, 'stream')} {adv.impact:.1%}, "
            + f"range {adv.low:.1%}-{adv.high:.1%} "
            + ("between the probed counts" if result.share is not None
               else "from the probes' noise")
            + " and this path's variation; "
            + (f"stream counts whose range holds the {limit:.0%} limit: "
               f"{', '.join(map(str, straddle))}" if straddle
               else f"no stream count's range holds the {limit:.0%} limit"))
    lines.append(f"ADVICE: {count(a.num_flows, 'stream')}{range_text(result.streams_range)}, "
                 f"{a.max_nondisruptive_thru:.2f} Mbit/s, "
                 f"impact on cross traffic {a.cross_traffic_impact:.1%} ({how})")
    for w in warning_texts(result):
        lines.append(f"warning: {w}")
    return "\n".join(lines) + "\n"


def _share_lines(result: AdviseResult) -> list[str]:
    """What the BBR advice rests on: the capacity, what the other traffic
    kept at each probed count, and the impact against no transfer."""
    share = result.share
    assert share is not None
    lines = [f"capacity: {share.capacity:.2f} Mbit/s of TCP goodput; the other traffic kept "
             "the rest while the probes ran (BBR does not follow the loss law, so the "
             "advice comes from that share)"]
    for p in share.curve:
        if p.measured:
            lines.append(f"  at {count(p.streams, 'stream')}: ours {p.goodput:.2f}, theirs "
                         f"{p.cross:.2f} Mbit/s; impact {p.impact:.1%} against 1 stream, "
                         f"{p.impact_vs_none:.1%} against no transfer")
    return lines


def refusal_text(r: AdviceRefusal) -> str:
    """Why there is no advice (AdviseResult.refused), in words."""
    if r.code == "bbr_no_capacity":
        why = "none" if r["estimated_mbps"] is None else \
            f"{r['estimated_mbps']:.2f} Mbit/s, not trusted: {r['reason']}"
        return ("the probes ran BBR, whose advice rests on the bottleneck's capacity (what the "
                "other traffic keeps is the capacity less what our streams got), and the "
                f"probes' ACK spacing gave no trusted capacity estimate ({why}); give --capacity "
                "RATE if you know the bottleneck's rate, or probe with --congestion cubic")
    if r.code == "bbr_share_failed":
        return f"the probes ran BBR and the share advice failed: {r['error']}"
    raise ValueError(f"unknown advice refusal {r.code!r}")


def warning_texts(result: AdviseResult) -> list[str]:
    """The advice's own warnings (AdviseResult.warnings) in words."""
    return [warning_text(w) for w in result.warnings]


def warning_text(w: AdviceWarning) -> str:
    """One warning of the advisor (estimate/advice.py) in words."""
    c = w.code
    if c == "capacity_disagrees":
        return (f"--capacity {w['link_mbps']:g} Mbit/s carries {w['goodput_mbps']:.2f} Mbit/s "
                f"of TCP goodput, but the probes' ACK spacing shows "
                f"{w['estimated_mbps']:.2f}: is the bottleneck elsewhere, or the rate given "
                "wrong?")
    if c == "capacity_not_trusted":
        return (f"the capacity estimate is not trusted: {w['reason']}; the advice comes from "
                "the throughput fit alone (give --capacity if you know the bottleneck's rate)")
    if c == "capacity_not_used":
        given = w["link_mbps"] is not None
        what = (f"--capacity {w['link_mbps']:g} Mbit/s ({w['goodput_mbps']:.2f} Mbit/s of TCP "
                "goodput)" if given
                else f"the estimated capacity ({w['goodput_mbps']:.2f} Mbit/s of TCP goodput)")
        return (f"{what} not used: {w['error']}; the advice comes from the throughput fit alone"
                + (". Give the bottleneck's real rate, or leave --capacity out" if given
                   else ""))
    if c == "estimators_disagree":
        used = w["used"]
        # Point at the other warnings only when there are some: a user told
        # to "see" warnings that are not there has nowhere to go.
        why = ("; an assumption of the model does not hold on this path (see the other "
               "warnings)" if w["others"] else "")
        return (f"the estimators disagree: the {used} fit advises "
                f"{count(w['streams'], 'stream')} (impact {w['impact']:.1%}), the loss-RTT "
                f"fit {w['loss_rtt_streams']} (it puts the impact at "
                f"{count(w['streams'], 'stream')} at {w['loss_rtt_impact']:.1%}); the advice "
                f"follows the {used} fit, whose advice is the better of the two on the "
                "testbed" + why)
    if c == "no_retransmissions":
        return ("no retransmissions in any probe: the path showed no congestion up to "
                f"{w['streams']} streams, so the loss-RTT fit has nothing to fit and the "
                "impact estimate rests on throughput alone")
    if c == "start_up":
        rtts = w["window_rtts"]
        where = ("still in slow start" if not w["after_slow_start"] else
                 "past slow start but with no RTT measured" if rtts is None else
                 f"only {rtts:.0f} RTTs past slow start")
        then = {"settle": "; the default probes (without --quick or --duration) run until "
                          "settled",
                "longer": "; --max-probe-time gives the probes longer"}.get(w["then"], "")
        return (f"the {w['streams']}-stream probe ended {where}: its share of the path was "
                "its start-up share, which on long-RTT paths was far from the long-run one "
                "(docs/accuracy.md); the advice may be far off" + then)
    if c == "time_limit":
        return (f"the {w['streams']}-stream probe ran to its time limit with "
                f"{w['epochs']:g} congestion epochs counted since slow start: its share may "
                "still have been moving (--max-probe-time gives it longer)")
    if c == "rwnd_limited":
        return (f"the {w['streams']}-stream probe was limited by the receiver's window "
                f"{w['fraction']:.0%} of the time, not by the network: raise the receiver's "
                "buffers (net.ipv4.tcp_rmem)")
    if c == "noisy":
        return (f"the {w['streams']}-stream probe was noisy (goodput varied by "
                f"{w['cv']:.0%} between samples): try a longer --max-probe-time")
    if c == "third_probe_unused":
        return (f"a third probe at {w['streams']} streams could not be used: "
                f"{refusal_text(w['reason'])}")
    raise ValueError(f"unknown advice warning {c!r}")

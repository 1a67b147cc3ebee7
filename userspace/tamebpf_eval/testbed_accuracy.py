"""The testbed's accuracy, measured and written into docs/testbed.md.

  make eval PRESET=testbed-accuracy      (all four sections, ~16 min)
  python -m tamebpf_eval.testbed_accuracy --only rate --rates 100 --runs 3 --json r.json.gz
  make eval PRESET=testbed-accuracy EVAL_ARGS='--only back'     (the back link, ~4 min)

Rate: 1 and 8 CUBIC flows at each rate, `--runs` runs of 8 s (2 s omitted)
each, median against R x 1448/1514, with the link's CPU and the host's steal
time per run. RTT: idle ping (50 at 20 ms) of the sender and the cross
traffic. Queue: ping behind a UDP overload, against a full queue's delay.
Back: the same from the receiver, in one section: downloads (iperf3 -R)
against R_back x 1448/1514, the receiver's pings to the sender and the
cross host, and its ping behind its own overload toward the sender.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from tamebpf_eval.docsection import markers, write_section
from tamebpf_eval.records import write_json
from tamebpf_testbed import accuracy


def _floats(s: str) -> list[float]:
    return [float(x) for x in s.split(",") if x]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def rate_table(rows: list[dict[str, Any]], runs: int) -> str:
    out = [f"| R (Mbit/s) | queue (frames) | R x 1448/1514 | flows | median of {runs} | error "
           "| runs (Mbit/s) | link CPU (core) | steal | late mean / max (ms) |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        mbits = " ".join(f"{x['mbit']:.2f}" for x in r["runs"])
        cpu = max(x["link_cpu"] for x in r["runs"])
        steal = " ".join(f"{100 * x['steal']:.0f}" for x in r["runs"])
        out.append(f"| {r['rate_mbit']:g} | {r['queue_pkts']} | {r['expected_mbit']:.2f} "
                   f"| {r['flows']} "
                   f"| {r['median_mbit']:.2f} | {100 * r['error']:+.1f}% | {mbits} "
                   f"| {cpu:.2f} | {steal} % | {r['late_mean_us'] / 1e3:.2f} / "
                   f"{r['late_max_us'] / 1e3:.1f} |")
    return "\n".join(out)


def rtt_table(rows: list[dict[str, Any]]) -> str:
    out = ["| configured RTT (ms) | sender IPv4 | sender IPv6 | cross (RTT/2) IPv4 | cross IPv6 |",
           "|---|---|---|---|---|"]
    for r in rows:
        cells = [f"{r[k]['median_ms']:.3f} / {r[k]['p95_ms']:.3f} / {r[k]['max_ms']:.3f}"
                 for k in ("sender_v4", "sender_v6", "cross_v4", "cross_v6")]
        out.append(f"| {r['rtt_ms']:g} | " + " | ".join(cells) + " |")
    return "\n".join(out)


# The receiver's pings in the table (the cross host's, at half the RTT, are
# in the JSON record).
RTT_BACK_ROWS = (("sender_small_v4", "to sender, 56 B, IPv4"),
                 ("sender_v4", "to sender, 1000 B, IPv4"),
                 ("sender_v6", "to sender, 1000 B, IPv6"))


def back_table(back: dict[str, list[dict[str, Any]]], runs: int) -> str:
    """The back link's three measurements in one table, each beside its target."""
    out = ["| measured | R / R_back (Mbit/s) | set-up | expected | median | error | detail |",
           "|---|---|---|---|---|---|---|"]
    for r in back["rate"]:
        mbits = " ".join(f"{x['mbit']:.2f}" for x in r["runs"])
        out.append(f"| download, {r['flows']} CUBIC | {r['rate_mbit']:g} / "
                   f"{r['rate_back_mbit']:g} | RTT 40 ms, {r['queue_pkts']} frames "
                   f"| {r['expected_mbit']:.2f} Mbit/s | {r['median_mbit']:.2f} "
                   f"| {100 * r['error']:+.1f}% | {runs} runs: {mbits}; back link CPU "
                   f"{max(x['link_cpu'] for x in r['runs']):.2f}; steal "
                   f"{100 * max(x['steal'] for x in r['runs']):.0f}%; late "
                   f"{r['late_mean_us'] / 1e3:.2f} / {r['late_max_us'] / 1e3:.1f} ms |")
    for r in back["rtt"]:
        for key, what in RTT_BACK_ROWS:
            c = r[key]
            out.append(f"| idle RTT {what} | {r['rate_mbit']:g} / {r['rate_mbit']:g} "
                       f"| RTT {r['rtt_ms']:g} ms | {c['want_ms']:.2f} ms "
                       f"| {c['median_ms']:.2f} | {c['median_ms'] - c['want_ms']:+.2f} ms "
                       f"| p95 / max {c['p95_ms']:.2f} / {c['max_ms']:.2f} |")
    for r in back["queue"]:
        if r["aqm"] == "red":
            lo, hi = r["red_band_ms"]
            want, err = f"{lo:.1f}-{hi:.1f} ms (max_th-2 max_th)", "-"
        else:
            want, err = f"{r['want_ms']:.1f} ms (full)", f"{100 * r['error']:+.1f}%"
        out.append(f"| ping behind an overload | {r['forward_mbit']:g} / {r['rate_mbit']:g} "
                   f"| RTT {r['rtt_ms']:g} ms, {r['queue_pkts']} packets, {r['aqm']} "
                   f"| {want} | {r['median_ms']:.1f} | {err} | {r['pings_through']} of 60 "
                   f"through; tail / RED drops {r['tail_drops']:.0f} / {r['red_drops']:.0f} |")
    return "\n".join(out)


def queue_table(rows: list[dict[str, Any]]) -> str:
    out = ["| R (Mbit/s) | queue (packets) | AQM | RTT (ms) | expected (ms) | median (ms) "
           "| error | pings through of 60 | tail / RED drops |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["aqm"] == "red":
            lo, hi = r["red_band_ms"]
            want, err = f"{lo:.1f}-{hi:.1f} (max_th-2 max_th)", "-"
        else:
            want, err = f"{r['want_ms']:.1f} (full)", f"{100 * r['error']:+.1f}%"
        out.append(f"| {r['rate_mbit']:g} | {r['queue_pkts']} | {r['aqm']} | {r['rtt_ms']:g} "
                   f"| {want} | {r['median_ms']:.1f} | {err} | {r['pings_through']} "
                   f"| {r['tail_drops']:.0f} / {r['red_drops']:.0f} |")
    return "\n".join(out)


def section(name: str, body: str, command: str) -> str:
    start, end = markers(f"testbed-{name}")
    when = time.strftime("%Y-%m-%d")
    return (f"{start}\n`{command}` ({when}, load average at the end "
            f"{os.getloadavg()[0]:.2f}):\n\n{body}\n{end}\n")


PARTS = ("rate", "rtt", "queue", "back")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", choices=PARTS, action="append")
    p.add_argument("--rates", type=_floats, default=_floats("10,50,100,150,200"))
    p.add_argument("--flows", type=lambda s: [int(x) for x in s.split(",")], default=[1, 8])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--rtts", type=_floats, default=_floats("2,10,20,58,118,200"))
    p.add_argument("--queues", default="10:50,50:100,100:200,150:400,10:100:red",
                   help="RATE:PACKETS[:red] for the ping behind an overload")
    p.add_argument("--back-rates", default="10,50,100,20:100",
                   help="R or R:R_BACK, the testbeds of the download goodput")
    p.add_argument("--back-flows", type=lambda s: [int(x) for x in s.split(",")], default=[1])
    p.add_argument("--back-rtts", type=_floats, default=_floats("20"))
    p.add_argument("--back-queues", default="10:50,100:200,10:100:red",
                   help="R_BACK:PACKETS[:red] for the receiver's ping behind its overload")
    p.add_argument("--write", help="Markdown file whose sections to replace")
    p.add_argument("--json", help="also write the raw results here, gzipped (JSON.gz unless "
                   "JSON ends .gz)")
    a = p.parse_args()
    parts = a.only or list(PARTS)
    raw: dict[str, Any] = {}
    text = {}
    command = "make testbed-accuracy"
    if "rate" in parts:
        rows = []
        for rate in a.rates:
            for flows in a.flows:
                rows.append(accuracy.goodput_runs(rate, flows, a.runs))
                log(f"rate {rate:g} x{flows}: median {rows[-1]['median_mbit']} "
                    f"({100 * rows[-1]['error']:+.1f}%)")
        raw["rate"], text["rate"] = rows, rate_table(rows, a.runs)
    if "rtt" in parts:
        rows = []
        for rtt in a.rtts:
            rows.append(accuracy.idle_rtt(rtt))
            log(f"rtt {rtt:g}: {rows[-1]['sender_v4']['median_ms']} ms")
        raw["rtt"], text["rtt"] = rows, rtt_table(rows)
    if "queue" in parts:
        rows = []
        for pair in a.queues.split(","):
            rate, queue, *aqm = pair.split(":")
            rows.append(accuracy.full_queue_rtt(float(rate), int(queue), *aqm))
            log(f"queue {pair}: {rows[-1]['median_ms']} ms against {rows[-1]['want_ms']}")
        raw["queue"], text["queue"] = rows, queue_table(rows)
    if "back" in parts:
        back: dict[str, list[dict[str, Any]]] = {"rate": [], "rtt": [], "queue": []}
        for pair in a.back_rates.split(","):
            rate, *rate_back = (float(x) for x in pair.split(":"))
            for flows in a.back_flows:
                back["rate"].append(accuracy.goodput_runs(
                    rate, flows, a.runs, rate_back=rate_back[0] if rate_back else None,
                    back=True))
                log(f"download {pair} x{flows}: median {back['rate'][-1]['median_mbit']} "
                    f"({100 * back['rate'][-1]['error']:+.1f}%)")
        for rtt in a.back_rtts:
            back["rtt"].append(accuracy.idle_rtt_back(rtt))
            log(f"rtt back {rtt:g}: {back['rtt'][-1]['sender_v4']['median_ms']} ms")
        for pair in a.back_queues.split(","):
            rate, queue, *aqm = pair.split(":")
            back["queue"].append(accuracy.full_queue_rtt(
                float(rate), int(queue), aqm[0] if aqm else "droptail", back=True))
            log(f"back queue {pair}: {back['queue'][-1]['median_ms']} ms against "
                f"{back['queue'][-1]['want_ms']}")
        raw["back"] = back
        text["back"] = back_table(back, a.runs)
    for name, body in text.items():
        print(body + "\n")
        if a.write:
            write_section(a.write, f"testbed-{name}", section(name, body, command),
                          "The testbed")
    if a.json:
        write_json(a.json, raw)
    return 0


if __name__ == "__main__":
    sys.exit(main())

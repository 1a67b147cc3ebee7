"""The probe-limit replay (tamebpf_eval/probe_limit.py) on synthetic
records: 10-stream probes grouped by RTT, by how they ended and by whether
their own ACK pairs give a trusted capacity."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tamebpf_eval.probe_limit import report


def probe(streams: int, stopped: str | None, peak: int, spread: int) -> dict[str, Any]:
    """`peak` pairs at a 95 Mbit/s link rate among `spread` spaced lower."""
    rates = [95.0 * (0.99 + 0.02 * i / peak) for i in range(peak)] + \
        [40.0 * 2 ** (i / spread) for i in range(spread)]
    steady = {"start_s": 0.0, "end_s": 1.0, "goodput_mbps": 30.0, "loss_rate": 0.01,
              "retrans": 1, "data_segs": 100, "srtt_ms": 20.0, "noise": 0.0,
              "rwnd_limited": 0.0, "flows": [], "congestion_control": ["cubic"],
              "epochs": [6] * streams}
    return {"streams": streams, "duration_s": 15.2, "steady": steady, "iperf3_mbps": None,
            "ack_pair_mbps": rates, "stopped": stopped}


def record(rtt: float, cc: str, *probes: dict[str, Any]) -> dict[str, Any]:
    return {"key": f"k{rtt}", "case": {"rtt": rtt, "cc": cc},
            "advice": {"default": {"probes": list(probes)}, "quick": {"probes": list(probes)}}}


def test_probes_are_grouped_by_path_ending_and_trust(tmp_path: Path) -> None:
    recs = [record(20.0, "cubic", probe(1, "settled", 10, 10),
                   probe(10, "time limit", 100, 900)),        # share 0.10: not trusted
            record(20.0, "reno", probe(10, "settled", 500, 500)),  # share 0.5: trusted
            record(80.0, "cubic", probe(10, "time limit", 400, 400)),
            record(80.0, "bbr", probe(10, "time limit", 10, 900)),  # BBR: not read
            record(80.0, "cubic", probe(10, None, 10, 900))]      # fixed: not read
    (tmp_path / "eval-fresh5.json").write_text(json.dumps({"records": recs}))
    text = report(str(tmp_path))
    rows = [ln for ln in text.splitlines() if ln.startswith("| RTT")]
    assert rows == [
        "| RTT <= 30 ms | ended early | trusted | 1 | 0.50-0.50 | 6-6 |",
        "| RTT <= 30 ms | ran to the limit | not trusted | 1 | 0.10-0.10 | 6-6 |",
        "| RTT > 30 ms | ran to the limit | trusted | 1 | 0.50-0.50 | 6-6 |"], text

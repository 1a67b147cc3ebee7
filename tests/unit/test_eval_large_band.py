"""Fresh draw 4's rule 3 replay (tamebpf_eval/large_band.py) on synthetic
records: which estimates only the large-band clause trusted, and the
verdict the rule gives."""

from __future__ import annotations

import json
from pathlib import Path

from tamebpf.advise.estimate import acktrain
from tamebpf_eval.large_band import report


def record(key: str, peak_mbps: float, peak: int, spread: int) -> dict[str, object]:
    """A case of a 100 Mbit/s link whose probes' pairs hold `peak` pairs
    at peak_mbps among `spread` pairs spaced by cross traffic."""
    rates = [peak_mbps * (0.98 + 0.04 * i / peak) for i in range(peak)] + \
        [30.0 * 3 ** (i / spread) for i in range(spread)]
    probe = {"ack_pair_mbps": rates, "steady": {"goodput_mbps": 20.0}}
    return {"key": key, "case": {"rate": 100.0},
            "advice": {"default": {"probes": [probe]}}}


def test_two_cases_off_remove_the_clause(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    recs = [record("a", 95.0, 500, 8000), record("b", 70.0, 500, 8000),
            record("c", 60.0, 500, 8000), record("d", 95.0, 100, 150)]
    path.write_text(json.dumps({"records": recs}))
    text = report(str(path))
    assert "| a | default |" in text and "| b | default |" in text
    assert "| d |" not in text  # the share alone trusts it
    assert "more than 10% off either way: 2" in text and "**removed**" in text
    assert acktrain.LARGE_BAND is None  # the replay leaves the advisor as it was


def test_one_case_low_keeps_it(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"records": [record("a", 95.0, 500, 8000),
                                            record("b", 70.0, 500, 8000)]}))
    assert "**kept**" in report(str(path))

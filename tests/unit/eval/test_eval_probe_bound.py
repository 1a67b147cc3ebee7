"""Where the long paths' throughput error comes from (tamebpf_eval/
probe_bound.py): its table on cases whose answer is known, and
docs/results/probe-bound.md against what the stored draws give today."""

from __future__ import annotations

from pathlib import Path

from tamebpf_eval import probe_bound

RESULTS = Path(__file__).resolve().parents[3] / "docs" / "results"
PAGE = RESULTS / "probe-bound.md"


def _case(long: bool, probe_err: float, time_limit: bool = False) -> dict[str, object]:
    return {"long": long, "probe_err": probe_err, "round_errs": [0.1, 0.2],
            "time_limit": time_limit, "ours": 0.2, "perfect": 0.05, "one_probe": None}


def test_each_class_gets_its_medians() -> None:
    text = probe_bound.render([_case(True, -0.3, True), _case(True, -0.1), _case(True, 0.4),
                               _case(False, 0.05)])
    long_row = next(line for line in text.splitlines() if line.startswith("| >= 80 ms"))
    # abs errors 0.3, 0.1, 0.4: median 0.3; signed -0.3, -0.1, 0.4: -0.1.
    assert long_row.startswith("| >= 80 ms | 3 | 0.300 (-0.100) | 0.150 | 1 of 3 | 0.200 | 0: - ")
    short_row = next(line for line in text.splitlines() if line.startswith("| < 80 ms"))
    assert "| 1 | 0.050 (+0.050) |" in short_row


def test_the_page_is_what_the_stored_draws_give() -> None:
    text = PAGE.read_text()
    start = text.index(f"<!-- {probe_bound.SECTION}:start -->")
    assert text[start:] == probe_bound.report(str(RESULTS)), "rerun: make eval PRESET=probe-bound"

"""Capacities far above the link (tamebpf_eval/far_capacity.py): its
window, the estimator as it was before 686b0bd on pairs whose answer is
known, and docs/results/far-capacity.md against the stored record."""

from __future__ import annotations

from pathlib import Path

from tamebpf.records import AckLog
from tamebpf_eval import far_capacity

RESULTS = Path(__file__).resolve().parents[3] / "docs" / "results"
PAGE = RESULTS / "far-capacity.md"
MSS = 1448
LINK = 143.5


def test_the_window_is_the_first_5_s_of_every_connection() -> None:
    gap_ns = int(2 * MSS * 8e3 / LINK)  # 2 segments at the link's rate
    a = [(i * gap_ns, 2 * MSS * i) for i in range(10)] + [(6_000_000_000, 2 * MSS * 10)]
    b = [(1_000_000 + i * gap_ns, 2 * MSS * i) for i in range(5)]
    rates, goodput = far_capacity.first_window(AckLog({1: a, 2: b}, 0), MSS)
    assert len(rates) == 9 + 4  # the ACK at 6 s is out
    assert all(abs(r / LINK - 1) < 0.01 for r in rates)
    assert abs(goodput - 13 * 2 * MSS * 8e-6 / 5.0) < 1e-9


def test_the_old_climb_takes_a_band_above_only_with_half_the_pairs() -> None:
    own = 30.0
    small = [LINK] * 200 + [7 * LINK] * 90  # bunched ACKs, under half the link band
    old = far_capacity.climb_before_686b0bd(small, own)
    assert old.trusted and old.goodput_mbps is not None
    assert abs(old.goodput_mbps / LINK - 1) < 0.02
    large = [LINK] * 200 + [7 * LINK] * 110
    old = far_capacity.climb_before_686b0bd(large, own)
    assert old.goodput_mbps is not None and abs(old.goodput_mbps / (7 * LINK) - 1) < 0.02
    dense = far_capacity.densest(large, own)
    assert dense.goodput_mbps is not None and abs(dense.goodput_mbps / LINK - 1) < 0.02
    shared = far_capacity.densest([40.0] * 100, 36.0)  # its own rate: a share
    assert not shared.trusted


def _section(text: str, name: str) -> str:
    start = text.index(f"<!-- {name}:start -->")
    end_marker = f"<!-- {name}:end -->"
    return text[start:text.index(end_marker) + len(end_marker)] + "\n"


def test_the_page_is_what_the_stored_record_gives() -> None:
    text = PAGE.read_text()
    records = far_capacity.load(str(RESULTS / "far-capacity.json.gz"))
    assert records, "no record: make eval PRESET=far-capacity"
    assert _section(text, far_capacity.SECTION) == far_capacity.report(records), \
        "rerun: make eval PRESET=far-capacity"


def test_the_page_scores_every_stored_record() -> None:
    text = PAGE.read_text()
    for name, _ in far_capacity.STORED_ALL:
        assert (RESULTS / name).exists(), name
    assert _section(text, far_capacity.STORED_SECTION) == \
        far_capacity.stored_report(str(RESULTS)), "rerun: make eval PRESET=far-capacity"


def test_a_bands_share_is_of_the_pairs_at_or_above_the_streams_own_goodput() -> None:
    rates = [LINK] * 60 + [LINK / 2] * 40 + [5.0] * 100  # the 100 lie below own
    e = far_capacity.estimate_capacity(rates, 30.0)
    assert e.pairs == 60
    assert abs(far_capacity.share_of_all(e, rates, 30.0) - 60 / 100) < 1e-9

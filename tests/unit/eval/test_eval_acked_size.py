"""Bunched ACKs by what each acknowledges (tamebpf_eval/acked_size.py):
the window's pairs and their sizes, the one-segment split, the candidate
on bands whose answer is known, and docs/results/acked-size.md against
the stored record."""

from __future__ import annotations

from pathlib import Path

import pytest

from tamebpf.records import AckLog
from tamebpf_eval import acked_size

RESULTS = Path(__file__).resolve().parents[3] / "docs" / "results"
PAGE = RESULTS / "acked-size.md"
MSS = 1448
LINK = 143.5


def test_the_window_gives_each_pair_with_what_it_acknowledges() -> None:
    one = int(MSS * 8e3 / LINK)  # ns for one segment at the link's rate
    acks = [(0, 0), (one, MSS), (3 * one, 3 * MSS), (6_000_000_000, 5 * MSS)]
    rates, segments, goodput = acked_size.window_pairs(AckLog({1: acks}, 0), MSS)
    assert segments == [1, 2]
    assert all(r == pytest.approx(LINK, rel=0.01) for r in rates)
    assert goodput == pytest.approx(3 * MSS * 8e-6 / 5.0)


def test_a_band_the_link_spaced_is_kept_and_a_bunched_one_refused() -> None:
    own = 20.0
    link_band = [LINK] * 300 + [LINK] * 100  # two-segment and one-segment pairs alike
    e = acked_size.candidate(link_band, [2] * 300 + [1] * 100, own)
    assert e.trusted and e.goodput_mbps == pytest.approx(LINK, rel=0.02)
    bunched = 7.5 * LINK  # one service time apart: one segment reads half the rate
    rates = [bunched] * 300 + [bunched / 2] * 100 + [LINK / 3] * 50
    segments = [2] * 300 + [1] * 100 + [2] * 50
    assert acked_size.one_segment_split(rates, segments, bunched) == (0, 100)
    assert acked_size.capacity_above_own(rates, own).trusted  # what today's trusts
    e = acked_size.candidate(rates, segments, own)
    assert not e.trusted and e.reason and "half its rate" in e.reason


def test_the_page_is_what_the_stored_record_gives() -> None:
    records = acked_size.load(str(RESULTS / "acked-size.json.gz"))
    assert records, "no record: make eval PRESET=acked-size"
    text = PAGE.read_text()
    start = text.index(f"<!-- {acked_size.SECTION}:start -->")
    end_marker = f"<!-- {acked_size.SECTION}:end -->"
    end = text.index(end_marker) + len(end_marker)
    assert text[start:end] + "\n" == acked_size.report(records), \
        "rerun: make eval PRESET=acked-size"


def test_the_far_section_is_what_its_record_gives() -> None:
    records = acked_size.load(str(RESULTS / "acked-size-far.json.gz"))
    assert records, "no record: make eval PRESET=acked-size-far"
    text = PAGE.read_text()
    start = text.index(f"<!-- {acked_size.FAR_SECTION}:start -->")
    want = acked_size.report(records, acked_size.FAR_SECTION, acked_size.FAR_TITLE)
    assert text[start:] == want, "rerun: make eval PRESET=acked-size-far"

"""Back-to-back ACK pairs (tamebpf_eval/back_to_back.py): which pairs are
of segments that left in one go, the window's rates, and
docs/results/back-to-back.md against the stored record."""

from __future__ import annotations

from pathlib import Path

import pytest

from tamebpf.records import AckLog
from tamebpf_eval import back_to_back

RESULTS = Path(__file__).resolve().parents[3] / "docs" / "results"
PAGE = RESULTS / "back-to-back.md"
MSS = 1448


def test_a_pair_counts_only_when_no_send_mark_splits_its_segments() -> None:
    """Two bursts of 4 segments, the second sent as the ACK of the first 2
    came (a mark at 4): the ACKs up to 2 and 4 pair (one burst); 4 and 6
    do not (segments 5-6 left after that mark, segment 4 before it); 6 and
    8 do (both in the second burst)."""
    acks = [(0, 2 * MSS), (10, 4 * MSS), (20, 6 * MSS), (30, 8 * MSS)]
    # snd_nxt as each ACK arrived: the first burst (0-4) was out, the ACK
    # of 2 released segments 4-8, nothing more.
    sent = [4 * MSS, 8 * MSS, 8 * MSS, 8 * MSS]
    assert back_to_back.back_to_back(acks, sent, MSS) == [True, False, True]


def test_sequence_numbers_wrap() -> None:
    base = 2**32 - 3 * MSS
    acks = [(0, base), (10, (base + 2 * MSS) % 2**32), (20, (base + 4 * MSS) % 2**32)]
    sent = [(base + 4 * MSS) % 2**32] * 3
    assert back_to_back.back_to_back(acks, sent, MSS) == [True, True]
    split = [(base + 2 * MSS) % 2**32] * 3  # the second pair's segments left later
    assert back_to_back.back_to_back(acks, split, MSS) == [True, False]


def test_the_window_keeps_its_first_5_s_and_tells_the_pairs_apart() -> None:
    gap = int(2 * MSS * 8e3 / 100.0)  # ns between ACKs of 2 segments at 100 Mbit/s
    acks = [(i * gap, 2 * MSS * i) for i in range(8)] + [(6_000_000_000, 16 * MSS)]
    sent = [8 * MSS] * 4 + [16 * MSS] * 5  # two bursts of 8 segments
    every, paired, goodput = back_to_back.window_rates(AckLog({1: acks}, 0), {1: sent}, MSS)
    assert len(every) == 7 and all(r == pytest.approx(100.0, rel=0.01) for r in every)
    assert len(paired) == 6  # the pair that crosses from one burst to the next is out
    assert goodput == pytest.approx(14 * MSS * 8e-6 / 5.0)
    # A log without the marks gives no back-to-back pairs, not a wrong count.
    assert back_to_back.window_rates(AckLog({1: acks}, 0), {}, MSS)[1] == []


def test_the_page_is_what_the_stored_record_gives() -> None:
    records = back_to_back.load(str(RESULTS / "back-to-back.json.gz"))
    assert records, "no record: make eval PRESET=back-to-back"
    text = PAGE.read_text()
    start = text.index(f"<!-- {back_to_back.SECTION}:start -->")
    assert text[start:] == back_to_back.report(records), "rerun: make eval PRESET=back-to-back"

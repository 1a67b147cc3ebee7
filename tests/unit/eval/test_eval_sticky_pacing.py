"""Pacing that stays on (tamebpf_eval/sticky_pacing.py): the window it
scores, its scoring on streams whose answer is known, and
docs/results/sticky-pacing.md against the stored record."""

from __future__ import annotations

from pathlib import Path

from tamebpf.records import AckLog
from tamebpf_eval import sticky_pacing

RESULTS = Path(__file__).resolve().parents[3] / "docs" / "results"
PAGE = RESULTS / "sticky-pacing.md"
MSS = 1448
LINK = 57.4  # Mbit/s of TCP goodput on a 60 Mbit/s link


def _acks(gaps_s: list[float], start_ns: int = 0) -> list[tuple[int, int]]:
    """ACKs of 2 segments each, the given seconds apart."""
    t, seq, out = start_ns, 1000, [(start_ns, 1000)]
    for g in gaps_s:
        t += int(g * 1e9)
        seq += 2 * MSS
        out.append((t, seq))
    return out


def test_the_windows_split_at_5_s_and_read_the_busiest_connection() -> None:
    fast = 2 * MSS * 8e-6 / LINK  # seconds between ACKs at the link's rate
    first = [fast] * 100  # in the first 5 s
    later = [5.0] + [fast / 2] * 50  # then the rest, twice as fast
    control = _acks([0.5, 0.5])
    (r1, g1), (r2, g2) = sticky_pacing._windows(
        AckLog({1: _acks(first + later), 2: control}, 0), MSS)
    assert len(r1) == 100 and len(r2) == 50
    assert all(abs(r / LINK - 1) < 0.01 for r in r1)
    assert all(abs(r / (2 * LINK) - 1) < 0.01 for r in r2)
    assert abs(g1 / LINK - 1) < 0.01 and abs(g2 / (2 * LINK) - 1) < 0.01


def test_a_stream_whose_pairs_read_its_own_rate_is_not_trusted() -> None:
    own = 3.0
    paced = {"goodput_mbps": own,
             "ack_pair_mbps": [own * 1.2] * 200 + [LINK] * 5}
    ok, ratio, at_link = sticky_pacing._scored(paced, LINK)
    assert not ok
    assert ratio is not None and abs(ratio - 1.2) < 1e-9
    assert abs(at_link - 5 / 205) < 1e-9
    bursts = {"goodput_mbps": own,
              "ack_pair_mbps": [LINK] * 120 + [LINK / 2] * 60 + [own] * 40}
    ok, _, at_link = sticky_pacing._scored(bursts, LINK)
    assert ok
    assert abs(at_link - 120 / 220) < 1e-9


def test_the_page_is_what_the_stored_record_gives() -> None:
    text = PAGE.read_text()
    start = text.index(f"<!-- {sticky_pacing.SECTION}:start -->")
    records = sticky_pacing.load(str(RESULTS / "sticky-pacing.json.gz"))
    assert records, "no record: make eval PRESET=sticky-pacing"
    assert text[start:] == sticky_pacing.report(records), "rerun: make eval PRESET=sticky-pacing"

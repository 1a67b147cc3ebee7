"""run's start cap on crowded paths (tamebpf_eval/paced_start.py): the
cases it picks, the share of pairs it counts at the link's rate, and
docs/results/paced-start.md against the stored record."""

from __future__ import annotations

from pathlib import Path

import pytest

from tamebpf_eval import paced_start

ROOT = Path(__file__).resolve().parents[3]
RESULTS = ROOT / "docs" / "results"
PAGE = RESULTS / "paced-start.md"


def test_the_cases_are_those_where_run_learned_nothing() -> None:
    keys = [c.key for c in paced_start.cases(str(ROOT))]
    assert [k.split("-")[1] for k in keys] == ["01", "06", "07", "09", "10"]


def test_the_link_share_counts_pairs_above_the_streams_own_goodput() -> None:
    link, own = 57.4, 10.0
    rates = [link] * 30 + [link * 1.07] * 10 + [link / 2] * 40 + [own * 0.5] * 100
    # the 100 below FLOOR x own do not count; within 8% of the link: 40 of 80
    assert paced_start.link_share(rates, own, link) == pytest.approx(0.5)
    assert paced_start.link_share([], own, link) == 0.0
    assert paced_start.link_share([link * 1.2] * 5, own, link) == 0.0
    assert paced_start.link_share(rates, own, link, over=True) == 0.0  # 1.07x is in the band
    assert paced_start.link_share([link * 1.2] * 5 + [link] * 5, own, link, over=True) == 0.5


def test_a_window_is_scored_with_todays_estimator() -> None:
    link = 57.4
    clear = {"ack_pair_mbps": [link] * 200 + [link / 2] * 50, "goodput_mbps": 10.0}
    cell, share = paced_start.scored(clear, link)
    assert cell == "1.00x" and share == pytest.approx(0.8)
    own_rate = {"ack_pair_mbps": [11.0] * 200, "goodput_mbps": 10.0}  # its share, not the link
    cell, share = paced_start.scored(own_rate, link)
    assert cell.endswith("(not trusted)") and share == 0.0


def test_the_page_is_what_the_stored_records_give() -> None:
    records = paced_start.load(str(RESULTS / "paced-start.json.gz"))
    assert records, "no record: make eval PRESET=paced-start"
    text = PAGE.read_text()
    for section, want in ((paced_start.SECTION, paced_start.report(records)),
                          (paced_start.CANDIDATE_SECTION,
                           paced_start.candidate_report(str(RESULTS)))):
        start = text.index(f"<!-- {section}:start -->")
        end = text.index(f"<!-- {section}:end -->") + len(f"<!-- {section}:end -->")
        assert text[start:end] + "\n" == want, "rerun: make eval PRESET=paced-start"


def test_the_candidate_trusts_a_band_on_its_share_of_the_pairs_below() -> None:
    """A link band of 60 pairs with 240 ACKs bunched above it (spread over
    1.3-10x the link, no band of them large enough) and 60 pairs below: 20%
    of all (today's first look wants 25%), 50% of those up to it."""
    link, own = 57.4, 10.0
    bunched = [link * 1.3 * (10 / 1.3) ** (i / 240) for i in range(240)]
    rates = [link] * 60 + bunched + [link / 3] * 60
    assert not paced_start.below_candidate(rates, own, None).trusted
    e = paced_start.below_candidate(rates, own, 0.5)
    assert e.trusted and e.goodput_mbps == pytest.approx(link, rel=0.02)
    # Its flaw: a sub-peak with nothing below it is all of its own pairs.
    low = paced_start.below_candidate(rates, own, 0.55)
    assert low.trusted and low.goodput_mbps == pytest.approx(link / 3, rel=0.02)

"""Agreement of several reads of a crowded path (tamebpf_eval/
pooled_windows.py): each connection's window, the two candidates on
bands whose answer is known, what path memory keeps today, and
docs/results/pooled-windows.md against the stored records."""

from __future__ import annotations

from pathlib import Path

import pytest

from tamebpf.records import AckLog
from tamebpf_eval import pooled_windows as pw

RESULTS = Path(__file__).resolve().parents[3] / "docs" / "results"
PAGE = RESULTS / "pooled-windows.md"
MSS = 1448
LINK = 57.4
OWN = 12.0


def _spread(n: int) -> list[float]:
    """n pairs spread evenly over 1.3-10x the link: no band of them."""
    return [LINK * 1.3 * (10 / 1.3) ** (i / n) for i in range(n)]


def test_each_connection_keeps_its_own_pairs_of_the_first_seconds() -> None:
    one = int(MSS * 8e3 / LINK)  # ns for one segment at the link's rate
    a = [(0, 0), (one, MSS), (2 * one, 2 * MSS), (6_000_000_000, 3 * MSS)]
    b = [(10, 0), (10 + 2 * one, MSS)]
    per, goodput = pw.connection_windows(AckLog({1: a, 2: b}, 0), MSS)
    assert len(per) == 2 and len(per[0]) == 2 and len(per[1]) == 1
    assert per[0][0] == pytest.approx(LINK, rel=0.01)
    assert per[1][0] == pytest.approx(LINK / 2, rel=0.01)
    assert goodput == pytest.approx(3 * MSS * 8e-6 / pw.WINDOW_S)  # the late ACK is not in it
    assert pw.connection_windows(AckLog({}, 0), MSS) == ([], 0.0)


def test_streams_agree_on_the_link_where_the_whole_window_is_not_trusted() -> None:
    """Each of 8 connections: 25 pairs at the link and 125 spread above it
    (17% of its pairs): the whole window's band holds too small a share
    for today's estimator; the connections' bands agree on the link."""
    conns = [[LINK] * 25 + _spread(125) for _ in range(8)]
    window = {"conn_pair_mbps": conns, "goodput_mbps": OWN}
    assert not pw.today(window).trusted
    c = pw.streams_agree(conns, OWN)
    assert c == pytest.approx(LINK, rel=0.03)
    # Half of them at a far band: no agreement.
    split = conns[:4] + [[LINK * 7.5] * 25 + _spread(125) for _ in range(4)]
    assert pw.streams_agree(split, OWN) is None
    # Too few connections with a band of STREAMS_MIN_PAIRS.
    assert pw.streams_agree(conns[:pw.STREAMS_AT_LEAST - 1], OWN) is None


def test_windows_agree_takes_the_median_of_bands_that_agree() -> None:
    def window(band: float) -> dict[str, object]:
        return {"conn_pair_mbps": [[band] * 30 + _spread(150)], "goodput_mbps": OWN}

    assert pw.windows_agree([window(LINK), window(LINK * 1.04), window(LINK * 7.5)]) == \
        pytest.approx(LINK * 1.04, rel=0.03)
    assert pw.windows_agree([window(LINK), window(LINK * 2), window(LINK * 7.5)]) is None


def test_todays_pool_keeps_the_newest_trusted_window() -> None:
    trusted = {"conn_pair_mbps": [[LINK] * 200 + [LINK / 2] * 50], "goodput_mbps": OWN}
    faint = {"conn_pair_mbps": [[LINK * 2] * 25 + _spread(150)], "goodput_mbps": OWN}
    assert pw.today_pool([trusted, faint, faint]) == pytest.approx(LINK, rel=0.03)
    assert pw.today_pool([faint, faint]) is None
    assert [len(p) for p in pw.pools([trusted] * 7)] == [pw.POOL, pw.POOL]


def test_the_tally_counts_right_far_and_off_against_the_link() -> None:
    t = pw.Tally()
    cells = [t.add(c, LINK) for c in (LINK * 1.05, LINK * 7.5, LINK * 0.8, None)]
    assert cells == ["1.05x", "7.50x", "0.80x", "-"]
    assert t.cells() == ["1 of 4", "2 (1 far)", "1"]


@pytest.mark.parametrize("run", list(pw.RUNS))
def test_the_page_is_what_the_stored_records_give(run: str) -> None:
    name, section, title, _ = pw.RUNS[run]
    records = pw.load(str(RESULTS / f"{name}.json.gz"))
    assert records, f"no record: make eval PRESET={name}"
    text = PAGE.read_text()
    start = text.index(f"<!-- {section}:start -->")
    end = text.index(f"<!-- {section}:end -->") + len(f"<!-- {section}:end -->")
    assert text[start:end] + "\n" == pw.report(records, section, title), \
        f"rerun: make eval PRESET={name} EVAL_ARGS=--report"


def test_the_reach_check_refuses_a_band_far_above_what_was_acknowledged() -> None:
    window = {"conn_pair_mbps": [[LINK] * 200 + [LINK / 2] * 50], "goodput_mbps": OWN,
              "peak_mbps": {str(round(pw.REACH_WIDTH_MS)): LINK / 3}}
    assert pw.reach_checked(window).trusted  # 3x its peak
    window["peak_mbps"] = {str(round(pw.REACH_WIDTH_MS)): LINK / (pw.REACH + 1)}
    e = pw.reach_checked(window)
    assert not e.trusted and e.goodput_mbps == pytest.approx(LINK, rel=0.03)

"""A transfer's later seconds on crowded paths (tamebpf_eval/
later_windows.py): the log cut into windows, the product's trust on one,
the windows' agreement, and docs/results/later-windows.md against the
stored record."""

from __future__ import annotations

from pathlib import Path

import pytest

from tamebpf.records import AckLog
from tamebpf_eval import later_windows as lw

RESULTS = Path(__file__).resolve().parents[3] / "docs" / "results"
MSS = 1448
LINK = 57.4
OWN = 12.0


def test_the_log_is_cut_into_windows_from_its_first_ack() -> None:
    one = int(MSS * 8e3 / LINK)
    s = 1_000_000_000
    acks = [(s + i * one, i * MSS) for i in range(3)] + \
        [(s + 6 * s + i * one, (10 + i) * MSS) for i in range(4)]
    ws = lw.windows(AckLog({1: acks}, 0), MSS)
    assert len(ws) == int(lw.SECONDS // lw.WINDOW_S)
    assert len(ws[0]["ack_pair_mbps"]) == 2 and len(ws[1]["ack_pair_mbps"]) == 3
    assert ws[0]["ack_pair_mbps"][0] == pytest.approx(LINK, rel=0.01)
    assert ws[0]["goodput_mbps"] == pytest.approx(2 * MSS * 8e-6 / lw.WINDOW_S, abs=1e-3)
    assert all(not w["ack_pair_mbps"] for w in ws[2:])
    assert lw.windows(AckLog({}, 0), MSS) == []


def _window(band: float, peak: float) -> dict[str, object]:
    spread = [LINK * 1.3 * (10 / 1.3) ** (i / 150) for i in range(150)]
    return {"ack_pair_mbps": [band] * 200 + [band / 2] * 50 + spread[:10],
            "goodput_mbps": OWN, "peak_mbps": peak}


def test_the_product_trusts_a_link_band_and_refuses_one_beyond_its_reach() -> None:
    assert lw.product(_window(LINK, LINK)) == pytest.approx(LINK, rel=0.03)
    assert lw.product(_window(LINK * 8, LINK)) is None  # 8x its 50-ms peak


def test_windows_agree_when_half_of_them_read_one_band() -> None:
    none = {"ack_pair_mbps": [OWN / 2] * 50, "goodput_mbps": OWN, "peak_mbps": LINK}
    other = _window(LINK * 3, LINK)
    assert lw.agreed([_window(LINK, LINK)] * 4 + [none] * 4) == pytest.approx(LINK, rel=0.03)
    assert lw.agreed([_window(LINK, LINK)] * 3 + [none] * 5) is None  # 3 of 8
    assert lw.agreed([_window(LINK, LINK)] * 3 + [other] * 5) == pytest.approx(LINK * 3,
                                                                               rel=0.03)
    assert lw.agreed([]) is None


def test_the_page_is_what_the_stored_record_gives() -> None:
    records = lw.load(str(RESULTS / "later-windows.json.gz"))
    assert records, "no record: make eval PRESET=later-windows"
    text = (RESULTS / "later-windows.md").read_text()
    start = text.index(f"<!-- {lw.SECTION}:start -->")
    end = text.index(f"<!-- {lw.SECTION}:end -->") + len(f"<!-- {lw.SECTION}:end -->")
    assert text[start:end] + "\n" == lw.report(records), \
        "rerun: make eval PRESET=later-windows EVAL_ARGS=--report"

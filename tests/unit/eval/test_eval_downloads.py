"""A draw of downloads beside uploads (tamebpf_eval.fresh_draw, by_class):
what is drawn, that every draw's seed and cases are its own, where a
download's goodput is read, and how the two directions are scored.

The assertions on the drawn cases compare counts, not cases: a draw's
cases are not looked at before it runs."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tamebpf.estimate.spread import LONG_RTT_MS
from tamebpf_eval import by_class, fresh_draw, learned
from tamebpf_eval.fresh_draw import (
    DRAWS,
    RATES,
    SMOKE,
    Draw,
    direction,
    draw,
    in_directions,
    report,
)
from tamebpf_testbed import iperf

RESULTS = Path(__file__).resolve().parents[3] / "docs" / "results"
ALL_DRAWS = [*fresh_draw.DRAWS.values(), *learned.DRAWS.values()]
# A draw of both directions for the scoring's tests, of no cases measured.
BOTH = Draw("both", 1, "downloads beside uploads", ("default",), rounds=3, loss_based=12,
            bbr_cubic=0, bbr_bbr=0, long=6, faster_forward=4,
            directions=("download", "upload"), bar=by_class.RANGE_BAR)
TWO_WAYS = [BOTH, *(d for d in DRAWS.values() if d.directions != ("upload",))]


@pytest.mark.parametrize("d", TWO_WAYS, ids=lambda d: d.name)
def test_each_path_is_a_download_then_its_upload(d: Draw) -> None:
    cases = draw(d)
    same = cases == draw(d)
    assert same, "the same seed draws the same cases"
    downs, ups = cases[0::2], cases[1::2]
    n_down, n_up = len(downs), len(ups)
    assert n_down == n_up == d.loss_based >= 12
    ways = {c.direction for c in downs}, {c.direction for c in ups}
    assert ways == ({"download"}, {"upload"})
    twins = all(c.name.endswith("-down") and u.name == c.name[:-len("-down")] + "-up"
                and replace(c, name=u.name, direction="upload") == u
                for c, u in zip(downs, ups, strict=True))
    assert twins, "an upload case is its download's path, the other way"
    assert all(c.reverse for c in downs) and not any(c.reverse for c in ups)


@pytest.mark.parametrize("d", TWO_WAYS, ids=lambda d: d.name)
def test_half_the_downloads_are_long_and_their_back_link_is_the_bottleneck(d: Draw) -> None:
    downs = [c for c in draw(d) if c.direction == "download"]
    long = sum(c.rtt >= LONG_RTT_MS for c in downs)
    assert long == d.long >= len(downs) / 2
    loss_based = all(c.cc in ("cubic", "reno") and c.cross_cc == c.cc for c in downs)
    assert loss_based, "CUBIC or Reno senders, the cross traffic's as ours"
    faster = [c for c in downs if c.rate_back is not None]
    n_faster = len(faster)
    assert n_faster == d.faster_forward > 0
    assert all(c.rate_back is not None and c.rate_back < c.rate for c in faster)
    in_range = all((c.rate_back or c.rate) in RATES and c.rate in RATES and c.rate <= 200
                   and c.queue >= 2 and 1 <= c.cross <= 30 for c in downs)
    assert in_range, "rates of 20-200 Mbit/s on both links, a queue, 1-30 cross flows"
    other_rtt = sum(c.cross_rtt is not None for c in downs)
    assert other_rtt == d.loss_based // 3
    sized = all(c.queue == max(2, round(_bdp(c.name) * (c.rate_back or c.rate) * 1e6 * c.rtt
                                        / 1000 / 8 / 1514)) for c in downs)
    assert sized, "the queue is its share of the back link's BDP"


def _bdp(name: str) -> float:
    m = re.search(r"-([\d.]+)bdp-", name)
    assert m is not None
    return float(m[1])


def test_every_draw_has_a_seed_and_cases_of_its_own() -> None:
    seeds = [d.seed for d in ALL_DRAWS]
    assert len(set(seeds)) == len(seeds)
    keys = [c.key for d in ALL_DRAWS for c in draw(d)]
    assert len(set(keys)) == len(keys), "no key in two draws, nor twice in one"
    smoke = {c.key for c in in_directions(BOTH, SMOKE)}
    assert len(smoke) == 2 and not smoke & set(keys), "the smoke path is no draw's"
    # A seed is named only on its own draw's pages: none came from an
    # earlier draw's rules or records.
    pages = {p: p.read_text() for p in RESULTS.rglob("*.md")}
    for d in ALL_DRAWS:
        named = {p.name for p, text in pages.items() if re.search(rf"\b{d.seed}\b", text)}
        assert named and all(d.name in n for n in named), f"{d.name}'s seed named in {named}"


class _Testbed:
    """What sent_bytes asks of a testbed: ss in a role's namespace."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    def exec(self, role: str, argv: list[str], **_: Any) -> str:
        self.asked.append((role, argv[-1]))
        return "cubic bytes_acked:1000 segs_out:9\n cubic bytes_acked:448 segs_out:3\n"


def test_a_downloads_goodput_is_read_at_the_server_that_sends_it() -> None:
    tb = _Testbed()
    assert iperf.sent_bytes(tb, "cross", iperf.PORT_CROSS, reverse=True)[0] == 1448  # type: ignore[arg-type]
    iperf.sent_bytes(tb, "sender", iperf.PORT_MAIN, reverse=True)  # type: ignore[arg-type]
    iperf.sent_bytes(tb, "cross", iperf.PORT_CROSS)  # type: ignore[arg-type]
    assert tb.asked == [("receiver", f"sport = :{iperf.PORT_CROSS}"),
                        ("receiver", f"sport = :{iperf.PORT_MAIN}"),
                        ("cross", f"dport = :{iperf.PORT_CROSS}")]
    argv = iperf.client_argv("198.18.3.2", iperf.PORT_CROSS, 3, 3600, "reno", reverse=True)
    assert "-R" in argv and argv[argv.index("-C") + 1] == "reno"


def a_record(way: str, rtt: float, advised: int) -> dict[str, Any]:
    """A loss-based case in direction `way` with 3 truth rounds at 1, 4, 16
    streams: 4 is the best within the limit (impact 0.25), 16 is over."""
    truth = {"1": {"mbit": [10.0, 10.5, 9.5], "cross_with": [80.0, 81.0, 79.0]},
             "4": {"mbit": [30.0, 31.0, 29.0], "cross_with": [60.0, 61.0, 59.0]},
             "16": {"mbit": [60.0, 58.0, 62.0], "cross_with": [30.0, 31.0, 29.0]}}
    curve = [[n, 10.0 * n ** 0.8, 0.25 * (n - 1) / 3] for n in range(1, 33)]
    advice = {"n": advised, "refused": None, "curve": curve, "streams_range": [3, 6],
              "impact_range": [0.2, 0.3],
              "probes": [{"streams": 1, "duration_s": 6.0, "stopped": "settled"},
                         {"streams": 10, "duration_s": 9.0, "stopped": "time limit"}]}
    return {"key": f"k-{way}-{rtt:g}-{advised}", "rounds": 3, "truth_warmup_s": 20.0,
            "truth_window_s": 15.0, "max_impact": 0.3, "advice": {"default": advice},
            "case": {"rtt": rtt, "cc": "cubic", "direction": way}, "truth": truth}


def test_each_direction_is_scored_on_its_own_cases_by_the_draws_bar() -> None:
    records = [a_record("download", 20.0, 4), a_record("download", 20.0, 16),
               a_record("upload", 20.0, 4), a_record("download", 120.0, 4)]
    text = report(records, BOTH)
    assert "4 of 24 cases measured" in text
    rows = {ln.split(" | ")[0]: ln for ln in text.splitlines()
            if ln.startswith("| loss-based, ")}
    assert "| 1/3 |" in rows["| loss-based, downloads"]  # 16 streams: over by 0.33
    assert "| 0/1 |" in rows["| loss-based, uploads"]
    assert "(downloads); default: 1-stream 0 of 1, 10-stream 1 of 1 (uploads)." in text
    downloads, uploads = text.split("**Downloads** (the download cases):")[1] \
        .split("**Uploads** (the upload cases):")
    assert "| < 80 ms (2 cases) | ceiling" in downloads
    assert "| >= 80 ms (1 cases) | ceiling" in downloads
    assert "| < 80 ms (1 cases) | ceiling" in uploads and ">= 80 ms" not in uploads
    assert "| the targets |" in downloads and "count range holding a round's best" in downloads
    assert direction({"case": {"rtt": 20.0, "cc": "cubic"}}) == "upload"  # before directions


def test_the_draws_bar_allows_the_ceilings_count_plus_one_and_a_count_range() -> None:
    bar = by_class.RANGE_BAR
    ceiling = {"n": 18, "good": 0.7, "over": 3 / 18, "err": 0.0, "p90": 0.0}
    at_bar = {"n": 6, "good": 0.6, "over": 2 / 6, "err": 9.0, "p90": 9.0}
    assert by_class.meets(at_bar, ceiling, 6, bar, range_held=0.80) == []
    worse = {"n": 6, "good": 0.59, "over": 3 / 6, "err": 9.0, "p90": 9.0}
    assert by_class.meets(worse, ceiling, 6, bar, range_held=0.79) == [
        ">= 95% of best", "over by > 0.05", "count range"]
    assert by_class.meets(at_bar, ceiling, 6, bar) == ["count range"]  # no range: a miss

"""A transfer's capacity from its ACK spacing (estimate/acktrain.py's
capacity_above_own): its pairs peak at the link's rate and at the lower
rates that other traffic's packets between its segments give (CLIMB); the
estimate is the highest trusted band, and a band near the transfer's own
goodput is its share, not the link's."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tamebpf.estimate.acktrain import (
    CLIMB_PAIRS,
    SHARE_MARGIN,
    capacity_above_own,
    estimate_capacity,
    highest_band,
)

# Real windows: the pair rates (at or above each window's own goodput) of
# the runs' first seconds and their scouts in tests/integration/
# test_scout_acks.py's shared-path test and test_run.py's held run, 8 runs
# of each before 686b0bd and 8 after (docs/results/history/ack-windows.md).
WINDOWS = Path(__file__).parents[3] / "docs" / "results" / "ack-windows.json.gz"


def shared_pairs(capacity: float, counts: dict[int, int], seed: int,
                 compressed: int = 0) -> list[float]:
    """Pair rates of a transfer on a link of `capacity` Mbit/s: counts[j]
    pairs had j packets of other traffic between their two segments (each
    ACK covers two segments: C / (1 + j/2)), +-3% timer jitter; `compressed`
    pairs bunched on the way back, spread over 1.3-10 x the link's rate."""
    rng = random.Random(seed)
    out = [capacity / (1 + j / 2) * rng.uniform(0.97, 1.03)
           for j, n in counts.items() for _ in range(n)]
    out += [capacity * 1.3 * (10 / 1.3) ** rng.random() for _ in range(compressed)]
    rng.shuffle(out)
    return out


def test_a_larger_peak_below_the_link_is_climbed_past() -> None:
    """The scout's window beside 2 CUBIC flows: more pairs at C/3 (four of
    their packets between two of ours) than at C; the densest band alone
    reads C/3, the transfer's estimate the link."""
    rates = shared_pairs(19.13, {0: 110, 2: 60, 4: 180}, seed=3, compressed=15)
    densest = estimate_capacity(rates, 4.0)
    assert densest.goodput_mbps == pytest.approx(19.13 / 3, rel=0.03)  # what the climb mends
    e = capacity_above_own(rates, 4.0)
    assert e.trusted, e.reason
    assert e.goodput_mbps == pytest.approx(19.13, rel=0.03)


def test_no_trusted_band_above_leaves_the_densest() -> None:
    """Too few pairs at the link's rate to trust: the estimate stays the
    densest band, and it is not trusted near the transfer's own goodput."""
    rates = shared_pairs(19.13, {0: 12, 4: 180}, seed=4)
    e = capacity_above_own(rates, 5.9)
    assert e.goodput_mbps == pytest.approx(19.13 / 3, rel=0.03)
    assert e.goodput_mbps < SHARE_MARGIN * 5.9
    assert not e.trusted and e.reason and "share" in e.reason


def test_a_small_band_above_the_link_is_not_climbed_to() -> None:
    """export's windows on fresh draw 9's first case: the link's band holds
    over a thousand pairs and a tight band of ACKs bunched on the way back
    sits at 1.37 x it with a few dozen, all the pairs above it: trusted on
    its own, but too small beside the band it would replace."""
    rng = random.Random(6)
    rates = shared_pairs(96.0, {0: 1200, 1: 150, 2: 150}, seed=6)
    rates += [131.0 * rng.uniform(0.98, 1.02) for _ in range(40)]
    assert estimate_capacity(rates, 130.0 * 0.99).trusted  # what the climb once took
    # (There the 8 streams got 85-88 Mbit/s, within SHARE_MARGIN of the link:
    # untrusted either way. A transfer with a smaller share is trusted.)
    e = capacity_above_own(rates, 60.0)
    assert e.trusted, e.reason
    assert e.goodput_mbps == pytest.approx(96.0, rel=0.03)


def test_pairs_bunched_on_the_way_back_do_not_raise_it() -> None:
    """ACK compression spreads its pairs over a wide range above the link:
    no band of them is trusted, so the estimate stays at the link."""
    rates = shared_pairs(50.0, {0: 300, 1: 100, 2: 100}, seed=5, compressed=300)
    e = capacity_above_own(rates, 10.0)
    assert e.trusted, e.reason
    assert e.goodput_mbps == pytest.approx(50.0, rel=0.03)


@settings(max_examples=60, deadline=None)
@given(capacity=st.floats(10.0, 400.0), j=st.integers(1, 12),
       at_link=st.integers(40, 300), below=st.integers(0, 900),
       compressed=st.integers(0, 60), seed=st.integers(0, 10_000))
def test_the_transfers_estimate_is_the_link_or_untrusted(
        capacity: float, j: int, at_link: int, below: int, compressed: int,
        seed: int) -> None:
    """Whatever peak below the link holds more pairs, a trusted estimate is
    the link's rate, within 3%; and with at least a quarter of the pairs
    above the sub-peak at the link's rate, and at least CLIMB_PAIRS of the
    sub-peak's, it is trusted."""
    rates = shared_pairs(capacity, {0: at_link, j: below}, seed, compressed)
    e = capacity_above_own(rates, capacity / (1 + j / 2) * 0.9)
    if e.trusted:
        assert e.goodput_mbps == pytest.approx(capacity, rel=0.03)
    if at_link >= 0.25 * (at_link + compressed) + 1 and at_link >= CLIMB_PAIRS * below + 1:
        assert e.trusted, (e, at_link, below, compressed)


def test_a_band_hidden_by_its_sub_peaks_is_trusted() -> None:
    """The link's band is the densest, but the sub-peaks below it (each
    smaller) hold most of the pairs: judged among the pairs from CLIMB
    below it up, it is clear; a band with a smear around it is not."""
    rates = shared_pairs(19.13, {0: 30, 1: 25, 2: 25, 3: 25, 4: 25}, seed=7, compressed=10)
    assert not estimate_capacity(rates, 4.0).trusted  # 30 of 140
    e = highest_band(rates, 4.0)
    assert e.trusted, e.reason
    assert e.goodput_mbps == pytest.approx(19.13, rel=0.03)
    smeared = shared_pairs(19.13, {0: 30, 1: 25, 2: 25, 3: 25, 4: 25}, seed=7, compressed=90)
    assert not highest_band(smeared, 4.0).trusted


@pytest.mark.parametrize("which", ["design", "check"])
def test_the_testbeds_windows_trust_the_link_only(which: str) -> None:
    """Every trusted estimate of the stored windows is the link's rate
    (within 10%); and the climb past untrusted bands and the second look at
    a band's share trust most of them (the densest band alone, about half:
    docs/results/history/ack-windows.md), on the windows the change was made on and
    on those measured after it."""
    with gzip.open(WINDOWS, "rt") as f:
        stored = json.load(f)
    link = stored["link_goodput_mbps"]
    got = [highest_band(w["pair_mbps"], w["floor_mbps"])
           for w in stored["windows"] if w["set"] == which]
    assert len(got) >= 20
    trusted = [e for e in got if e.trusted]
    assert all(abs(e.goodput_mbps / link - 1) <= 0.10 for e in trusted if e.goodput_mbps), \
        [round(e.goodput_mbps or 0, 2) for e in trusted]
    assert len(trusted) >= 0.75 * len(got), [e.reason for e in got if not e.trusted]


def test_a_band_at_the_top_needs_a_share_of_all_the_pairs() -> None:
    """ACKs bunched on the way back, released together near 1 Gbit/s: a
    tight band at the top of the pair rates, few pairs just below it, so
    among the pairs from CLIMB below it up it looks clear, though it holds
    7% of the window; the rest spread from the streams' slow start up
    (fresh draw 12's 120-ms paths beside 3 CUBIC flows: far-capacity.md)."""
    rng = random.Random(8)
    rates = [15.0 * (700 / 15.0) ** rng.random() for _ in range(1400)]
    rates += [1040.0 * rng.uniform(0.97, 1.03) for _ in range(110)]
    rates += [1040.0 / 1.2 * rng.uniform(0.9, 1.1) for _ in range(40)]
    top = highest_band(rates, 15.0, of_all=0.0)  # the second look as 686b0bd made it
    assert top.trusted and top.goodput_mbps == pytest.approx(1040.0, rel=0.05)
    e = capacity_above_own(rates, 15.0)
    assert e.goodput_mbps == pytest.approx(1040.0, rel=0.05)
    assert not e.trusted and e.reason and "no clear peak" in e.reason


def test_the_far_windows_trust_nothing_far_above_the_link() -> None:
    """The first 5 s of 8 streams on fresh draw 12's two 120-ms cases
    (docs/results/history/far-capacity.md), where the second look alone trusted
    bands of 3.7-9x the link in 4 of 12: none over 1.5x now."""
    from tamebpf.estimate.capacity import tcp_goodput_mbps
    with gzip.open(WINDOWS.with_name("far-capacity.json.gz"), "rt") as f:
        stored = json.load(f)["records"]
    seen = far = 0
    for rec in stored:
        link = tcp_goodput_mbps(rec["case"]["rate"], 1448, False)
        for run in rec["runs"]:
            seen += 1
            before = highest_band(run["ack_pair_mbps"], run["goodput_mbps"], of_all=0.0)
            far += bool(before.trusted and before.goodput_mbps > 1.5 * link)
            e = capacity_above_own(run["ack_pair_mbps"], run["goodput_mbps"])
            assert not (e.trusted and e.goodput_mbps > 1.5 * link), (rec["key"], e)
    assert seen == 12 and far >= 1  # the windows still hold what was mended

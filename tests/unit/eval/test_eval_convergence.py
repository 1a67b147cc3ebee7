"""make eval PRESET=convergence's reading of a run (tamebpf_eval.convergence)
and the second fresh draw (tamebpf_eval.advise.draw_cases)."""

from __future__ import annotations

from tamebpf_eval.advise import FRESH2_SEED, draw_cases
from tamebpf_eval.convergence import goodput, halves_agree_at, settles_at, table


def _series(rate_at, seconds: float = 60.0, step: float = 0.1) -> list[list[float]]:
    """(t, bytes delivered) sampled every `step` for a rate (Mbit/s) of t."""
    out, total, t = [], 0.0, 0.0
    while t <= seconds + 1e-9:
        out.append([round(t, 6), int(total)])
        total += rate_at(t) * 1e6 / 8 * step
        t += step
    return out


def test_goodput_reads_the_rate_between_two_instants() -> None:
    s = _series(lambda t: 40.0)
    g = goodput(s, 10.0, 20.0)
    assert g is not None and abs(g - 40.0) < 0.01
    assert goodput(s, 70.0, 80.0) is None  # no samples there


def test_a_run_that_reaches_its_long_run_rate_at_6_s_settles_at_11() -> None:
    # 20 Mbit/s until 6 s, then 60: a probe of e s reads its later half
    # [e/2, e]; at 11 s that is 0.5 s at 20 and 5 s at 60 (56.4, within
    # 10%), at 10 s 1 s at 20 and 4 s at 60 (52, 13% off).
    s = _series(lambda t: 20.0 if t < 6.0 else 60.0)
    assert settles_at(s, 60.0, 30.0) == 11.0


def test_a_run_that_never_reaches_its_long_run_rate_never_settles() -> None:
    s = _series(lambda t: 20.0 if t < 31.0 else 60.0)
    assert settles_at(s, 60.0, 30.0) is None


def test_the_second_draw_is_fixed_and_in_issue_15s_ranges() -> None:
    a, b = draw_cases(FRESH2_SEED, 12), draw_cases(FRESH2_SEED, 12)
    assert a == b and len({c.key for c in a}) == 12
    for c in a:
        assert 20 <= c.rate <= 150 and 20 <= c.rtt <= 120 and 1 <= c.cross <= 30
        assert c.aqm in ("droptail", "red") and c.cc in ("cubic", "reno", "bbr")
        bdp_frames = c.rate * 1e6 * c.rtt / 1000 / 8 / 1514
        assert 0.2 * bdp_frames - 1 <= c.queue <= 2 * bdp_frames + 1
        assert c.cross_rtt in (None, c.rtt / 2, c.rtt * 2)


def test_the_table_counts_the_runs_within_reach_of_their_long_run_at_each_length() -> None:
    # 20 Mbit/s until 6 s, then 60: probes of 2-10 s read the slow start-up
    # (10 s: 52, 13% off), 15 s and longer read 60.
    run = {"streams": 10, "series": _series(lambda t: 20.0 if t < 6.0 else 60.0),
           "slow_start_end_s": 0.5, "mss": 1448, "ipv6": False}
    rec = {"case": {"rate": 100.0}, "key": "k", "seconds": 60.0, "runs": [run]}
    rows = {cells[0]: cells for line in table([rec]).splitlines() if line.startswith("| ")
            for cells in [[x.strip() for x in line.split("|")[1:-1]]]}
    counts = rows["throughput within 10% of the long run's"][3:10]
    assert counts == ["0 of 1"] * 4 + ["1 of 1"] * 3


def test_a_probe_only_stop_rule_ends_a_slowly_climbing_run_early() -> None:
    # A share that climbs 2% a second: the halves of a 2-s window differ by
    # about 1%, so the rule stops at once, far from the long run.
    assert halves_agree_at(_series(lambda t: 20.0 * (1 + 0.02 * t))) == 2.0
    # A jump at 1.5 s from 10 to 40: windows [e/2, e] straddle it until
    # e = 3, whose halves both read 40.
    assert halves_agree_at(_series(lambda t: 10.0 if t < 1.5 else 40.0)) == 3.0
    assert halves_agree_at(_series(lambda t: 40.0), until=1.5) is None  # not before 2 s

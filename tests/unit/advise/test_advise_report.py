"""Advice from two measured probes: estimators, warnings, output shape."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from tamebpf.commands.advise import parse_capacity, parse_dest, parse_durations, parse_probes
from tamebpf.common.errors import UsageError
from tamebpf.estimate.advice import build, impact_confidence, path_spread
from tamebpf.estimate.capacity import tcp_goodput_mbps
from tamebpf.estimate.record import AdviceWarning, ProbeResult, Target
from tamebpf.estimate.steady import FlowSteady, Steady
from tamebpf.model import Settings
from tamebpf.present.advice import refusal_text, render, to_json, warning_text, warning_texts


def probe(n: int, mbps: float, loss: float | None = 0.001, rtt_ms: float = 20.0,
          cc: str = "cubic", rwnd: float = 0.0, noise: float = 0.02,
          retrans: int = 10, mss: int | None = 1448, ipv6: bool = False,
          past: bool = True) -> ProbeResult:
    series = tuple((0.1 * i, int(mbps * 1e6 / 8 * 0.1 * i)) for i in range(21))  # 2 s, 0.1 s
    s = Steady(start_s=0.5, end_s=2.0, goodput_mbps=mbps, loss_rate=loss, retrans=retrans,
               data_segs=10_000, srtt_ms=rtt_ms, noise=noise, rwnd_limited=rwnd,
               flows=tuple(FlowSteady(i, mbps / n, loss, rtt_ms) for i in range(n)),
               congestion_control=(cc,), series=series, mss=mss, ipv6=ipv6,
               after_slow_start=past)
    return ProbeResult(n, 2.2, s, mbps * 0.97)


TARGET = Target("198.18.3.2", 5201, "tb-snd", "cubic")


def test_worked_example_through_advise() -> None:
    r = build(TARGET, [probe(1, 50.0), probe(10, 200.0)], Settings(max_impact=0.10),
              "partial")
    assert r.prediction.advice.num_flows == 2
    assert r.prediction.advice.max_nondisruptive_thru == pytest.approx(92.88, rel=1e-3)


def test_default_model_is_the_square_of_m_plus_n() -> None:
    # n / BW: 0.02 at 1 stream, 0.05 at 10 -> alpha 1/300, beta 1/60; the
    # impact at 2 streams is 1 - 0.02 / (2/300 + 1/60) = 14.3%, at 3 25%, at 4 33%.
    r = build(TARGET, [probe(1, 50.0), probe(10, 200.0)], Settings(max_impact=0.26))
    assert r.prediction.fit.model == "square-of-m-plus-n"
    assert r.prediction.advice.num_flows == 3
    assert r.prediction.advice.max_nondisruptive_thru == pytest.approx(112.5)
    out = json.loads(json.dumps(to_json(r)))
    assert out["params"]["beta"] / out["params"]["alpha"] == pytest.approx(5.0)


def test_json_has_predict_shape_and_measurements() -> None:
    r = build(TARGET, [probe(1, 50.0), probe(10, 200.0, loss=0.01)],
              Settings(max_impact=0.10))
    out = json.loads(json.dumps(to_json(r)))
    for key in ("model", "probes", "params", "curve", "advice", "warnings", "measurements"):
        assert key in out, f"missing {key}"
    m = out["measurements"]
    assert [x["streams"] for x in m] == [1, 10]
    for x in m:
        assert {"streams", "goodput_mbps", "iperf3_mbps", "loss_rate", "srtt_ms",
                "congestion_control", "duration_s"} <= x.keys()
    assert out["estimators"]["used"] == "throughput"
    assert out["estimators"]["loss_rtt"] is not None
    assert [(x["past_slow_start"], x["steady_window_rtts"]) for x in m] == [(True, 75.0)] * 2
    assert not [w for w in warning_texts(r) if "slow start" in w], warning_texts(r)


def test_a_probe_ended_in_start_up_is_told_how_to_come_closer() -> None:
    # A fixed-length probe (--quick, --duration) is told the default runs on.
    r = build(TARGET, [probe(1, 50.0, past=False), probe(10, 200.0)], Settings(max_impact=0.10))
    start_up = [w for w in warning_texts(r) if "1-stream probe ended still in slow start" in w]
    assert start_up and "run until settled" in start_up[0], warning_texts(r)
    # Both probes in start-up: two warnings, the remedy said once.
    r = build(TARGET, [probe(1, 50.0, past=False), probe(10, 200.0, past=False)],
              Settings(max_impact=0.10))
    start_up = [w for w in warning_texts(r) if "ended still in slow start" in w]
    assert len(start_up) == 2 and sum("until settled" in w for w in start_up) == 1, warning_texts(r)
    # A default probe that hit its limit is told the limit can be raised.
    limited = replace(probe(1, 50.0, past=False), stopped="time limit")
    r = build(TARGET, [limited, replace(probe(10, 200.0), stopped="settled")],
              Settings(max_impact=0.10))
    start_up = [w for w in warning_texts(r) if "1-stream probe ended still in slow start" in w]
    assert start_up and "--max-probe-time" in start_up[0], warning_texts(r)


def test_a_default_probe_that_ran_out_of_time_unsettled_says_so() -> None:
    limited = replace(probe(1, 50.0), stopped="time limit")
    r = build(TARGET, [limited, replace(probe(10, 200.0), stopped="settled")],
              Settings(max_impact=0.10))
    words = warning_texts(r)
    assert [w for w in words if "1-stream probe ran to its time limit" in w], words
    assert not [w for w in words if "10-stream probe ran to" in w], words


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"rwnd": 0.9}, "receiver's window"),
    ({"noise": 0.6}, "noisy"),
    ({"past": False}, "ended still in slow start"),
    ({"rtt_ms": 200.0}, "ended only 8 RTTs past slow start"),  # a 1.5-s window
    ({"rtt_ms": 0.0}, "ended past slow start but with no RTT measured"),
])
def test_assumption_warnings(kwargs: dict[str, object], needle: str) -> None:
    r = build(TARGET, [probe(1, 50.0, **kwargs), probe(10, 200.0, **kwargs)],  # type: ignore[arg-type]
              Settings(max_impact=0.10))
    words = warning_texts(r)
    assert any(needle in w for w in words), f"no '{needle}' warning in {words}"
    assert needle in render(r)


def test_bbr_probes_without_a_capacity_get_no_advice_and_say_why() -> None:
    """BBR's advice rests on the capacity: without one it is refused plainly,
    with no second answer hidden in the output."""
    r = build(TARGET, [probe(1, 50.0, cc="bbr"), probe(10, 200.0, cc="bbr")],
              Settings(max_impact=0.10))
    assert r.refused is not None and r.refused.code == "bbr_no_capacity"
    why = refusal_text(r.refused)
    assert "BBR" in why and "--capacity" in why
    text = render(r)
    assert "ADVICE: none" in text and "BBR" in text
    assert "impact on cross traffic" not in text  # no curve, no advised number
    out = json.loads(json.dumps(to_json(r)))
    assert out["advice"] is None and out["curve"] == [] and "BBR" in out["refused"]
    ok = build(TARGET, [probe(1, 50.0), probe(10, 200.0)], Settings(max_impact=0.10))
    assert ok.refused is None and to_json(ok)["refused"] is None


def test_bbr_probes_with_a_capacity_are_advised_from_the_share() -> None:
    # 100 Mbit/s link (95.1 of goodput): 1 BBR stream 20, 10 streams 80 ->
    # the other traffic kept 75.1 and 15.1.
    c = tcp_goodput_mbps(100.0, 1448, False)
    r = build(TARGET, [probe(1, 20.0, cc="bbr"), probe(10, 80.0, cc="bbr")],
              Settings(max_impact=0.10), capacity_mbps=100.0)
    assert r.refused is None and r.used == "share" and r.share is not None
    ten = r.share.at(10)
    assert ten.cross == pytest.approx(c - 80.0)
    assert ten.impact == pytest.approx(1 - (c - 80.0) / (c - 20.0))
    assert r.share.at(1).impact_vs_none == pytest.approx(20.0 / c)
    n = r.prediction.advice.num_flows
    assert 1 <= n < 10 and r.prediction.advice.cross_traffic_impact <= 0.10
    assert r.share.at(n + 1).impact > 0.10
    text = render(r)
    assert "capacity share, BBR" in text and "against no transfer" in text
    out = json.loads(json.dumps(to_json(r)))
    assert out["estimators"]["used"] == "share" and out["share"]["curve"][9]["measured"]


def test_no_loss_warns_and_still_advises() -> None:
    r = build(TARGET, [probe(1, 50.0, loss=0.0, retrans=0), probe(10, 200.0, loss=0.0,
                                                                  retrans=0)],
              Settings(max_impact=0.10))
    assert any("no retransmissions" in w for w in warning_texts(r)), warning_texts(r)
    assert r.prediction.advice.num_flows >= 1


def test_estimators_disagreeing_are_flagged() -> None:
    # Throughput says the path saturates fast; loss barely moves with n.
    r = build(TARGET, [probe(1, 50.0, loss=0.001), probe(10, 200.0, loss=0.0011)],
              Settings(max_impact=0.10))
    assert any("disagree" in w for w in warning_texts(r)), warning_texts(r)


def test_disagreement_points_at_other_warnings_only_when_there_are_some() -> None:
    # Clean probes (past start-up, with retransmissions): the disagreement is
    # the only warning, so it must not send the reader to "the other warnings".
    r = build(TARGET, [probe(1, 50.0, loss=0.001), probe(10, 200.0, loss=0.0011)],
              Settings(max_impact=0.10))
    assert len(warning_texts(r)) == 1 and "disagree" in warning_texts(r)[0], warning_texts(r)
    assert "the advice follows the throughput fit" in warning_texts(r)[0]
    assert "see the other warnings" not in warning_texts(r)[0]
    assert "at 1 stream at" in warning_texts(r)[0]
    # A probe that ended in start-up: now there is another warning to see.
    r = build(TARGET, [probe(1, 50.0, loss=0.001, past=False), probe(10, 200.0, loss=0.0011)],
              Settings(max_impact=0.10))
    disagree = [w for w in warning_texts(r) if "disagree" in w]
    assert len(warning_texts(r)) > 1 and disagree, warning_texts(r)
    assert "see the other warnings" in disagree[0]


@pytest.mark.parametrize(("text", "want"), [
    ("host", ("host", 5201)), ("host:5301", ("host", 5301)), ("[fd00::1]:7", ("fd00::1", 7)),
    ("fd00::1", ("fd00::1", 5201)),
])
def test_parse_dest(text: str, want: tuple[str, int]) -> None:
    assert parse_dest(text) == want


@pytest.mark.parametrize("bad", ["host:0", "host:x", ":5201", "host:70000"])
def test_parse_dest_rejects(bad: str) -> None:
    with pytest.raises(UsageError):
        parse_dest(bad)


@pytest.mark.parametrize("bad", ["1", "10,1", "0,4", "1,a", "1,2,3"])
def test_parse_probes_rejects(bad: str) -> None:
    with pytest.raises(UsageError):
        parse_probes(bad)


@pytest.mark.parametrize(("text", "want"), [("2", (2.0, 2.0)), ("2.5,1.5", (2.5, 1.5)),
                                           ("0.5,60", (0.5, 60.0))])
def test_parse_durations(text: str, want: tuple[float, float]) -> None:
    assert parse_durations(text) == want


@pytest.mark.parametrize("bad", ["", "x", "2,", "1,2,3", "0.4", "61", "-1", "nan"])
def test_parse_durations_rejects(bad: str) -> None:
    with pytest.raises(UsageError, match="--duration"):
        parse_durations(bad)


def test_plot_writes_png_and_svg(tmp_path: object) -> None:
    from pathlib import Path

    from tamebpf.present.plot import plot_file, write_plot

    r = build(TARGET, [probe(1, 50.0), probe(10, 200.0, loss=0.01)], Settings(max_impact=0.10))
    png, svg = Path(str(tmp_path)) / "a.png", Path(str(tmp_path)) / "a.svg"
    svg.write_text("an older plot, longer than the new one's first 500 bytes " * 100)
    for path in (png, svg):
        with plot_file(str(path)) as out:
            assert out is not None
            write_plot(r, out)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert b"<svg" in svg.read_bytes()[:500], "not an SVG"
    assert b"an older plot" not in svg.read_bytes(), "the old file's content is left"
    with pytest.raises(UsageError), plot_file(str(Path(str(tmp_path)) / "a.jpg")):
        pass


@pytest.mark.parametrize(("mss", "ipv6", "want"), [
    (1448, False, 1448 / 1514), (None, False, 1448 / 1514), (1428, True, 1428 / 1514),
    (8948, False, 8948 / 9014)])
def test_link_rate_to_tcp_goodput(mss: int | None, ipv6: bool, want: float) -> None:
    assert tcp_goodput_mbps(100.0, mss, ipv6) == pytest.approx(100.0 * want)


def test_plot_of_an_estimated_capacity_names_its_method(tmp_path: object) -> None:
    """A capacity the ACK spacing estimated has no link rate to label by."""
    from dataclasses import replace
    from pathlib import Path

    from tamebpf.estimate.record import Capacity
    from tamebpf.present.plot import plot_file, write_plot

    cap = tcp_goodput_mbps(100.0, 1448, False)
    given = build(TARGET, [probe(1, 0.6 * cap / 31), probe(10, cap / 4)],
                  Settings(max_impact=0.5), capacity_mbps=100.0)
    assert given.used == "capacity"
    r = replace(given, capacity=Capacity(None, cap, 30.0, "ack-spacing"))
    png = Path(str(tmp_path)) / "estimated.png"
    with plot_file(str(png)) as out:
        assert out is not None
        write_plot(r, out)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"


def test_capacity_fit_is_used_and_reported() -> None:
    # A 100 Mbit/s link carries 95.64 Mbit/s of goodput; 10 streams among 30
    # competing flows get a quarter of it; the one-stream probe read low.
    cap = tcp_goodput_mbps(100.0, 1448, False)
    probes = [probe(1, 0.6 * cap / 31), probe(10, cap / 4)]
    r = build(TARGET, probes, Settings(max_impact=0.5), capacity_mbps=100.0)
    assert r.used == "capacity" and r.capacity is not None
    assert r.capacity.goodput_mbps == pytest.approx(cap)
    # m from each probe: 31 / 0.6 - 1 and 30, weighted by the stream counts.
    assert r.capacity.competing_flows == pytest.approx((31 / 0.6 - 1 + 10 * 30) / 11)
    assert r.throughput_prediction is not None
    assert r.prediction.advice.num_flows > r.throughput_prediction.advice.num_flows
    out = json.loads(json.dumps(to_json(r)))
    assert out["estimators"]["used"] == "capacity"
    assert out["estimators"]["capacity"]["advice"] == out["advice"]
    assert out["estimators"]["throughput"]["advice"]["num_flows"] == \
        r.throughput_prediction.advice.num_flows
    assert out["capacity"]["used"] is True and out["capacity"]["link_mbps"] == 100.0
    text = render(r)
    assert "(capacity fit)" in text and "competing flows" in text


def test_capacity_below_the_measurement_is_not_used() -> None:
    r = build(TARGET, [probe(1, 50.0), probe(10, 200.0)], Settings(max_impact=0.1),
              capacity_mbps=100.0)
    assert r.used == "throughput"
    assert r.prediction is r.throughput_prediction
    assert any("--capacity 100 Mbit/s" in w and "not used" in w for w in warning_texts(r))
    out = json.loads(json.dumps(to_json(r)))
    assert out["capacity"]["used"] is False and out["estimators"]["capacity"] is None
    assert "(throughput fit)" in render(r)


def test_without_capacity_nothing_about_it() -> None:
    r = build(TARGET, [probe(1, 50.0), probe(10, 200.0)], Settings(max_impact=0.1))
    assert r.capacity is None and r.used == "throughput"
    assert to_json(r)["capacity"] is None


@pytest.mark.parametrize(("text", "want"), [
    ("100", 100.0), ("10G", 10_000.0), ("100M", 100.0), ("500k", 0.5), ("1.5Gbit/s", 1500.0),
    ("10gbps", 10_000.0)])
def test_parse_capacity(text: str, want: float) -> None:
    assert parse_capacity(text) == pytest.approx(want)


@pytest.mark.parametrize("bad", ["", "x", "0", "-5", "G", "inf", "nan", "10MB"])
def test_parse_capacity_rejects(bad: str) -> None:
    with pytest.raises(UsageError, match="not a rate"):
        parse_capacity(bad)


def test_advice_carries_its_impact_range() -> None:
    settings = Settings(max_impact=0.26)
    quiet = build(TARGET, [probe(1, 50.0, noise=0.0), probe(10, 200.0, noise=0.0)], settings)
    noisy = build(TARGET, [probe(1, 50.0, noise=0.3), probe(10, 200.0, noise=0.3)], settings)
    # The probes' own noise alone (spread 0): quiet probes leave a point.
    q = {r.streams: r for r in impact_confidence(quiet, settings, spread=0.0)}
    n = {r.streams: r for r in impact_confidence(noisy, settings, spread=0.0)}
    assert q[3].low == q[3].high == pytest.approx(0.25), q[3]
    assert n[3].low < 0.25 < n[3].high, n[3]
    # 3 streams sit at 25% against a 26% limit: noisy probes cannot tell them apart
    assert n[3].straddles(0.26) and not q[3].straddles(0.26), (q[3], n[3])
    # As advised, both are widened by the path's round-to-round spread: quiet
    # probes too, since a quiet probe is one round of a path that varies.
    for r in (quiet, noisy):
        c = to_json(r)["confidence"]
        assert c["advised"]["low"] < 0.25 < c["advised"]["high"], c
        assert c["spread"] == path_spread(r.probes) > 0.0, c
        assert 3 in c["straddling_limit"], c
    assert "range " in render(quiet) and "this path's variation" in render(quiet)
    assert "holds the 26% limit: " in render(noisy)


def with_acks(p: ProbeResult, rates: list[float]) -> ProbeResult:
    return ProbeResult(p.streams, p.duration_s, p.steady, p.iperf3_mbps,
                       ack_pair_mbps=tuple(rates))


def link_pairs(capacity: float, k: int = 400) -> list[float]:
    """k pairs at the link rate (+-2%) and as many spread below it by cross
    traffic."""
    return [capacity * (0.98 + 0.04 * i / k) for i in range(k)] + \
        [capacity * (0.05 + 0.5 * i / k) for i in range(k)]


def test_a_trusted_capacity_estimate_anchors_the_advice() -> None:
    ones, tens = probe(1, 10.0), probe(10, 50.0)
    given = build(TARGET, [ones, tens], Settings(max_impact=0.3),
                  capacity_mbps=100.0 * 1514 / 1448)
    r = build(TARGET, [with_acks(ones, link_pairs(100.0)), with_acks(tens, link_pairs(100.0))],
              Settings(max_impact=0.3))
    assert r.capacity_estimate is not None and r.capacity_estimate.trusted
    assert r.used == "capacity"
    assert r.capacity is not None and r.capacity.source == "ack-spacing"
    assert r.capacity.link_mbps is None
    # The same advice as a user who gave the link's rate.
    assert r.prediction.advice.num_flows == given.prediction.advice.num_flows
    assert r.capacity.competing_flows == pytest.approx(given.capacity.competing_flows, rel=0.03)
    out = json.loads(json.dumps(to_json(r)))
    est = out["capacity_estimate"]
    assert est["trusted"] and est["method"] == "ack-spacing"
    assert est["low_mbps"] <= est["goodput_mbps"] <= est["high_mbps"]
    assert out["capacity"]["source"] == "ack-spacing"
    assert "capacity estimate (ack-spacing): 100." in render(r)


def test_an_untrusted_estimate_falls_back_and_says_why() -> None:
    few = [50.0] * 5
    r = build(TARGET, [with_acks(probe(1, 10.0), few), with_acks(probe(10, 40.0), few)],
              Settings(max_impact=0.3))
    assert r.used == "throughput"
    assert r.capacity_estimate is not None and not r.capacity_estimate.trusted
    assert any("capacity estimate is not trusted" in w and "throughput fit alone" in w
               for w in warning_texts(r))
    assert "not trusted" in render(r)
    assert json.loads(json.dumps(to_json(r)))["capacity_estimate"]["trusted"] is False


def test_capacity_given_wins_and_a_different_estimate_is_a_warning() -> None:
    ps = [with_acks(probe(1, 10.0), link_pairs(60.0)), with_acks(probe(10, 40.0),
                                                                 link_pairs(60.0))]
    r = build(TARGET, ps, Settings(max_impact=0.3), capacity_mbps=100.0)
    assert r.capacity is not None and r.capacity.source == "given"
    assert r.capacity.goodput_mbps == pytest.approx(tcp_goodput_mbps(100.0, 1448, False))
    assert any("ACK spacing shows" in w for w in warning_texts(r))
    assert "(check)" in render(r)


def test_max_probe_time_is_checked_and_excludes_duration() -> None:
    from tamebpf.commands.advise import parse_max_probe
    assert parse_max_probe("3") == 3.0
    for bad in ("0.1", "nan", "inf", "-inf", "NaN", ""):
        with pytest.raises(UsageError, match="--max-probe-time"):
            parse_max_probe(bad)


@pytest.mark.parametrize("bad", ["nan", "NaN", "inf", "-inf", "infinity", "-1", "1e99", ""])
def test_max_age_refuses_what_is_not_a_finite_age(bad: str) -> None:
    from tamebpf.commands.advise import parse_max_age
    with pytest.raises(UsageError, match="--max-age"):
        parse_max_age(bad)
    assert parse_max_age("0") == 0.0 and parse_max_age("3600") == 3600.0


def test_iperf3s_count_is_said_to_be_over_its_whole_test() -> None:
    # Staged probes are one iperf3 test: the server's count arrives with the
    # last probe and covers both, so it must not sit in that probe's row.
    staged = [ProbeResult(1, 2.2, probe(1, 50.0).steady, None),
              ProbeResult(10, 2.2, probe(10, 200.0).steady, 120.0)]
    text = render(build(TARGET, staged, Settings(max_impact=0.10)))
    assert "iperf3 Mbit/s" not in text
    assert "iperf3's own count over its test (probes 1-2, start-up included): 120.00" in text
    # Two tests, one count each.
    separate = [probe(1, 50.0), probe(10, 200.0)]
    text = render(build(TARGET, separate, Settings(max_impact=0.10)))
    assert "(probe 1, start-up included): 48.50" in text
    assert "(probe 2, start-up included): 194.00" in text


def test_warnings_are_data_that_present_words() -> None:
    r = build(TARGET, [probe(1, 50.0), probe(10, 200.0)], Settings(max_impact=0.10))
    assert r.warnings and all(isinstance(w, AdviceWarning) for w in r.warnings), r.warnings
    assert [w.code for w in r.warnings] == [w.code for w in build(
        TARGET, [probe(1, 50.0), probe(10, 200.0)], Settings(max_impact=0.10)).warnings]
    assert all(isinstance(t, str) and t for t in warning_texts(r))
    with pytest.raises(ValueError):
        warning_text(AdviceWarning("no such warning"))


def test_one_probe_with_a_capacity_is_advised_from_it_alone() -> None:
    # A single probe: the 10-stream probe and the link's capacity fix
    # (alpha n + beta)^2 alone: 200 of 300 Mbit/s at 10 streams puts m = 5
    # competing flows on it, as the 1- and 10-stream pair above does.
    link = 300.0 * 1514 / 1448  # the link rate whose TCP goodput is 300
    r = build(TARGET, [probe(10, 200.0)], Settings(max_impact=0.26), capacity_mbps=link)
    assert r.used == "capacity"
    assert r.capacity is not None and r.capacity.competing_flows == pytest.approx(5.0, rel=1e-3)
    assert r.prediction.advice.num_flows == 3
    assert r.throughput_prediction is None
    assert r.loss_prediction is None and r.loss_error and "one probe" in r.loss_error
    text = render(r)
    assert "loss-RTT estimator (check): none (one probe" in text
    assert "one probe: with the capacity (given) it fixes the fit" in text
    out = json.loads(json.dumps(to_json(r)))
    assert [m["streams"] for m in out["measurements"]] == [10]


def test_one_probe_without_a_capacity_asks_for_a_second() -> None:
    from tamebpf.model import ModelInputError
    with pytest.raises(ModelInputError, match="a second probe is needed"):
        build(TARGET, [probe(10, 200.0)], Settings(max_impact=0.26))
    # ... and so does one that measured more than the capacity given.
    with pytest.raises(ModelInputError):
        build(TARGET, [probe(10, 200.0)], Settings(max_impact=0.26), capacity_mbps=100.0)


def test_the_advice_line_and_json_carry_the_count_range() -> None:
    """The range is the path's round-to-round spread: a long path whose
    probes did not settle gets a wider one than a short settled path."""
    settings = Settings(max_impact=0.26)

    def advised(rtt_ms: float, stopped: str | None) -> tuple[int, tuple[int, int]]:
        r = build(TARGET, [replace(probe(1, 50.0, rtt_ms=rtt_ms), stopped=stopped),
                           replace(probe(10, 200.0, rtt_ms=rtt_ms), stopped=stopped)],
                  settings)
        n, rng = r.prediction.advice.num_flows, r.streams_range
        assert rng is not None and rng[0] <= n <= rng[1]
        out = json.loads(json.dumps(to_json(r)))
        assert out["advice"]["streams_range"] == list(rng)
        line = next(ln for ln in render(r).splitlines() if ln.startswith("ADVICE:"))
        assert line.startswith(f"ADVICE: {n} streams ({rng[0]}-{rng[1]} on this path's "
                               "variation), "), line
        return n, rng

    n, short = advised(20.0, "settled")
    assert advised(120.0, None)[0] == n
    long = advised(120.0, None)[1]
    assert long[0] <= short[0] and long[1] > short[1], (short, long)

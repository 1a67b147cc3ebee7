"""Pure parts of the testbed: configuration, scenario files, sweep summaries,
the two-sweeps comparison. No root needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tamebpf.common.errors import UsageError
from tamebpf_testbed import config as C
from tamebpf_testbed.compare import compare
from tamebpf_testbed.delay import back_spec, link_spec
from tamebpf_testbed.scenario import load
from tamebpf_testbed.shaping import queue_rules
from tamebpf_testbed.sweep import Run, summarise

SCENARIOS = sorted((Path(__file__).resolve().parents[3] / "scripts" / "scenarios").glob("*.toml"))


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_every_scenario_file_loads(path: Path) -> None:
    sc = load(path)
    assert sc.description, f"{path.name}: expected a description"
    assert sc.sweep.streams == sorted(sc.sweep.streams), f"{path.name}: streams not sorted"


def test_paper_scenarios_use_the_papers_queue_and_rtts() -> None:
    by_name = {p.stem: load(p) for p in SCENARIOS}
    for i, l3_ms in ((1, 20), (2, 20), (3, 50), (4, 50), (5, 50), (6, 20)):
        sc = by_name[f"paper-s{i}"]
        want = 2 * (4 + l3_ms + 5)
        assert sc.testbed.rtt_ms == want, f"s{i}: RTT {sc.testbed.rtt_ms}, expected {want}"
        assert sc.testbed.queue_pkts == 25, f"s{i}: queue {sc.testbed.queue_pkts}, expected 25"
    assert by_name["paper-s5"].sweep.window_kb == by_name["paper-s6"].sweep.window_kb == 60


@pytest.mark.parametrize("kw", [
    {"rate_mbit": 0}, {"rtt_ms": -1}, {"queue_pkts": 0}, {"aqm": "codel"}, {"cc": "vegas"},
    {"loss_pct": 100}, {"rate_back_mbit": 0}, {"senders": 0}, {"senders": 3},
])
def test_bad_configuration_is_refused(kw: dict[str, object]) -> None:
    base: dict[str, object] = {"rate_mbit": 10, "rtt_ms": 10, "queue_pkts": 10}
    with pytest.raises(UsageError):
        C.TestbedConfig(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["", "A", "1ab", "x" * 13, "a-b", "a b"])
def test_bad_names_are_refused(name: str) -> None:
    with pytest.raises(UsageError):
        C.check_name(name)


def test_namespace_names_start_with_the_testbed_name() -> None:
    nss = C.namespaces("tbtabc123")
    assert all(ns.startswith("tbtabc123-") for ns in nss.values()), nss
    assert all(len(C.ROUTER_IF[h]) <= 15 for h in C.HOSTS)


def _arg(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_one_link_shapes_both_sources_and_carries_loss_and_red() -> None:
    plain = C.TestbedConfig(rate_mbit=10, rtt_ms=10, queue_pkts=10)
    red = C.TestbedConfig(rate_mbit=10, rtt_ms=10, queue_pkts=25, aqm="red")
    lossy = C.TestbedConfig(rate_mbit=10, rtt_ms=10, queue_pkts=10, loss_pct=1, seed=9)
    argv = link_spec(plain).argv
    assert float(_arg(argv, "--rate-bps")) == 10e6 and _arg(argv, "--limit") == "10", argv
    assert "--red" not in argv and "--loss" not in argv, argv
    assert red.red == C.RedParams(min_th=5.0, max_th=15.0), red.red
    assert _arg(link_spec(red).argv, "--red") == "5.0,15.0,0.1,0.002"
    assert _arg(link_spec(lossy).argv, "--seed") == "9"
    assert _arg(link_spec(lossy).argv, "--loss") == "1"
    rules = queue_rules()
    assert len(rules) == 4 and all("bypass" not in " ".join(r) for r in rules), rules


def _queues(argv: list[str]) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == "--queue"]


def test_the_back_link_is_the_forward_one_at_its_own_rate_without_delay() -> None:
    same = C.TestbedConfig(rate_mbit=20, rtt_ms=30, queue_pkts=25, aqm="red", loss_pct=1,
                           seed=9)
    other = C.TestbedConfig(rate_mbit=20, rtt_ms=30, queue_pkts=25, rate_back_mbit=50)
    argv = back_spec(same).argv
    assert _queues(argv) == ["3:0", "4:0"], argv
    assert float(_arg(argv, "--rate-bps")) == 20e6 and _arg(argv, "--limit") == "25", argv
    assert _arg(argv, "--red") == _arg(link_spec(same).argv, "--red"), argv
    assert _arg(argv, "--loss") == "1" and _arg(argv, "--seed") == "10", argv
    assert float(_arg(back_spec(other).argv, "--rate-bps")) == 50e6
    assert float(_arg(link_spec(other).argv, "--rate-bps")) == 20e6
    assert round(other.goodput_back_mbit, 3) == 47.82 and same.goodput_back_mbit == \
        same.goodput_mbit
    # The back rules skip the receiver's pure ACKs (at most 100 bytes in IPv6).
    back = [r for r in queue_rules() if r[1] == "rcv0"]
    assert [r[r.index("--length") + 1] for r in back] == ["129:65535"] * 2, back


def test_one_sender_is_todays_testbed_and_two_add_sender2() -> None:
    one = C.TestbedConfig(rate_mbit=10, rtt_ms=40, queue_pkts=10, cross_rtt_ms=10)
    two = C.TestbedConfig(rate_mbit=10, rtt_ms=40, queue_pkts=10, cross_rtt_ms=10, senders=2)
    assert list(C.namespaces("tbh1", one.senders)) == ["sender", "cross", "router", "receiver"]
    assert C.namespaces("tbh1", two.senders)["sender2"] == "tbh1-sn2"
    assert "sender2" not in C.addresses(4, one.senders)
    assert C.addresses(4, 2)["sender2"] == "198.18.4.2"
    assert C.addresses(6, 2)["sender2"] == "fd74:6d65:6270:4::2"
    assert _queues(link_spec(one).argv) == ["1:40000", "2:10000"]
    assert _queues(link_spec(two).argv) == ["1:40000", "2:10000", "5:40000"]
    assert _queues(back_spec(two).argv) == ["3:0", "4:0", "6:0"]
    rules = [" ".join(r) for r in queue_rules(2)]
    assert "-i sn20 -o rcv0 -j NFQUEUE --queue-num 5" in rules, rules
    assert any(r.startswith("-i rcv0 -o sn20 ") and r.endswith("--queue-num 6")
               for r in rules), rules


def test_a_state_file_from_before_the_back_link_still_loads() -> None:
    old = {"rate_mbit": 10, "rtt_ms": 10, "queue_pkts": 10, "aqm": "droptail",
           "loss_pct": 0.0, "cross_rtt_ms": None, "cc": "cubic", "seed": 1, "red": None}
    cfg = C.TestbedConfig.from_json(old)
    assert cfg.senders == 1 and cfg.effective_rate_back_mbit == 10, cfg


def test_cross_rtt_gets_its_own_delay() -> None:
    cfg = C.TestbedConfig(rate_mbit=10, rtt_ms=100, queue_pkts=10, cross_rtt_ms=10)
    argv = link_spec(cfg).argv
    assert _queues(argv) == ["1:100000", "2:10000"], argv


def _run(n: int, mbit: float, rep: int = 0) -> Run:
    return Run(n=n, m=0, repeat=rep, mbit=mbit, cross_alone_mbit=None, cross_with_mbit=None,
               iperf3_mbit=None, retransmits=0, window_s=10, started=0)


def test_summary_median_and_spread() -> None:
    rows = summarise([_run(1, 10), _run(1, 30, 1), _run(1, 20, 2), _run(2, 50)])
    assert rows[0]["mbit_median"] == 20 and rows[0]["mbit_spread"] == 1.0, rows[0]
    assert rows[0]["runs"] == 3, f"three repeats of n=1 pooled in one row: {rows[0]}"
    assert rows[1]["n"] == 2 and rows[1]["runs"] == 1


def test_compare_flags_a_median_off_by_more_than_the_tolerance() -> None:
    rows = compare({(1, 0): 100.0, (2, 0): 100.0}, {(1, 0): 104.0, (2, 0): 106.0}, 0.05)
    assert [r[5] for r in rows] == [True, False], rows

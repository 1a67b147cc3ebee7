"""`tamebpf watch` without a kernel: exact screens at 80x24, keys, the loop
and --json driven by synthetic flows."""

from __future__ import annotations

import io
import json
from dataclasses import replace

import pytest

from tamebpf.cap.view import read_caps
from tamebpf.commands.watch import Loop
from tamebpf.groups.aggregate import Aggregator
from tamebpf.groups.caps import CapLimit
from tamebpf.groups.group import Group, GroupKey
from tamebpf.kernel.flows import Flow, ReaderStats
from tamebpf.present.group_json import group_to_json
from tamebpf.present.watch import (
    KEY_BACKSPACE,
    KEY_DOWN,
    KEY_ENTER,
    KEY_ESC,
    ViewState,
    filter_groups,
    render,
    sort_groups,
)
from tests.unit.groups.test_groups import one, predict_advice, run
from tests.unit.groups.test_groups_fakes import SECOND, Transfer, cap_record


def scene() -> list[Group]:
    """iperf3 seen at 1 then 10 streams (the probes of model.md's example),
    rsync over a cap, curl to an IPv6 address too long for its column."""
    agg = Aggregator(min_samples=3)
    t = Transfer(streams=1, mbps=50.0, srtt_us=40_000)
    u = Transfer(streams=3, mbps=20.0, comm="rsync", remote="192.168.100.200", next_cookie=500,
                 cc="bbr", srtt_us=5200)
    v = Transfer(streams=2, mbps=5.0, comm="curl", remote="2001:db8:1234:5678::abcd",
                 next_cookie=900, loss=0.02)
    caps = [CapLimit(2, remote="192.168.0.0/16")]
    now, groups = 0, []
    for i in range(10):
        if i == 5:
            t.set_streams(10)
            t.mbps = 200.0
        now += SECOND
        groups = agg.update(t.step(1, now) + u.step(1, now) + v.step(1, now), now, caps)
    return groups


EXPECTED = """\
tamebpf watch - 3 groups, 15 streams, 225.0 Mbit/s             every 1s 14:02:11
sort goodput  filter -  15 flows open                             h help  q quit
 PROCESS         DESTINATION     DIR  STRMS  MBIT/S LOSS%  RTT_MS CC    ADVICE
>iperf3          10.0.0.2        send   10!   200.0  0.00    40.0 cubic 1 50M 0%
 rsync           192.168.100.200 send    3^    20.0  0.00   5.200 bbr   seen 3
 curl            2001:db8:1234:~ send     2     5.0  1.83    20.0 cubic seen 2










-- iperf3 -> 10.0.0.2 (cgroup /test) -------------------------------------------
10 flows open, 0 closed; acked 156.2 MB, retrans 0.00% of 107880 segs
seen at 1 stream 50.0 Mbit/s, 10 streams 200.0 Mbit/s
advice: 1 stream, 50.0 Mbit/s, impact 0.0% (limited by max-impact)
at 10 now: 200.0 Mbit/s, impact 60.0%; loss x RTT^2 fit: 10 streams
warning: the estimators disagree: throughput fit 1 streams, loss x RTT^2 fit 10;
  an assumption of the model may not hold (receiver window, non-loss-based cong~
! more streams than advised  ^ over a cap"""


def screen(state: ViewState, groups: list[Group], width: int = 80,
           height: int | None = 24) -> list[str]:
    shown = state.select(groups)
    frame = state.frame(shown, len(groups) - len(shown), 15, 1.0, "14:02:11", "PROCESS")
    return render(frame, width, height)


def diff(expected: str, got: list[str]) -> str:
    want = expected.split("\n")
    for i, (a, b) in enumerate(zip(want, got, strict=False)):
        if a != b:
            return f"line {i + 1}: expected {a!r}, got {b!r}"
    return f"expected {len(want)} lines, got {len(got)}"


def test_screen_at_80x24_is_exact() -> None:
    got = screen(ViewState(), scene())
    assert got == EXPECTED.split("\n"), diff(EXPECTED, got)


def test_screen_fits_any_small_terminal() -> None:
    groups = scene()
    for width, height in ((80, 24), (60, 12), (120, 40), (20, 6)):
        lines = screen(ViewState(), groups, width, height)
        assert len(lines) <= height, f"{width}x{height}: {len(lines)} lines"
        too_wide = [x for x in lines if len(x) > width]
        assert not too_wide, f"{width}x{height}: lines wider than {width}: {too_wide}"


def test_printed_refresh_has_no_padding() -> None:
    lines = screen(ViewState(), scene(), height=None)
    assert "" not in lines[3:6] and len(lines) == 15, (
        f"expected 15 lines, got {len(lines)}: {lines}")


def test_sort_and_filter() -> None:
    agg = Aggregator()
    ts = [Transfer(streams=1, mbps=10, remote="10.0.0.9", srtt_us=5000, next_cookie=1),
          Transfer(streams=3, mbps=30, remote="10.0.0.10", comm="rsync", next_cookie=100),
          Transfer(streams=2, mbps=50, remote="192.168.1.1", srtt_us=90_000, next_cookie=200)]
    groups = run(agg, ts, 2)
    groups.append(replace(one(groups, remote="10.0.0.9"), key=GroupKey("idle", "10.0.0.1"),
                          streams=0))
    order = {k: [g.remote_addr for g in sort_groups(filter_groups(groups), k)]
             for k in ("goodput", "streams", "rtt", "dest", "owner")}
    assert order == {
        "goodput": ["192.168.1.1", "10.0.0.10", "10.0.0.9"],
        "streams": ["10.0.0.10", "192.168.1.1", "10.0.0.9"],
        "rtt": ["192.168.1.1", "10.0.0.10", "10.0.0.9"],
        "dest": ["10.0.0.9", "10.0.0.10", "192.168.1.1"],
        "owner": ["10.0.0.9", "192.168.1.1", "10.0.0.10"],
    }, f"got {order}"
    assert [g.remote_addr for g in filter_groups(groups, "RSYNC")] == ["10.0.0.10"]
    assert len(filter_groups(groups, active_only=False)) == 4


def test_keys_sort_filter_select_and_quit() -> None:
    groups = scene()
    st = ViewState()
    owners = lambda: [g.key.owner for g in st.select(groups)]  # noqa: E731
    assert owners() == ["iperf3", "rsync", "curl"]
    st.key("p", st.select(groups))
    assert owners() == ["curl", "iperf3", "rsync"], f"sort by owner: got {owners()}"
    st.key("l", st.select(groups))
    assert owners()[0] == "curl", f"sort by loss: got {owners()}"
    for k in ("/", "r", "s", "x", KEY_BACKSPACE):
        st.key(k, st.select(groups))
    assert st.editing and owners() == ["rsync"], f"live filter 'rs': got {owners()}"
    lines = screen(st, groups)
    assert "filter rs_" in lines[1], f"the filter being typed is not shown: {lines[1]!r}"
    st.key(KEY_ENTER, st.select(groups))
    assert not st.editing and st.filter == "rs"
    st.key("/", st.select(groups))
    st.key("z", st.select(groups))
    st.key(KEY_ESC, st.select(groups))
    assert st.filter == "rs", f"Esc must restore the filter, got {st.filter!r}"
    st.key(KEY_ESC, st.select(groups))
    assert st.filter == "" and len(owners()) == 3
    st.key(KEY_DOWN, st.select(groups))
    st.key(KEY_DOWN, st.select(groups))
    lines = screen(st, groups)
    assert lines[5].startswith(">rsync"), f"selection mark: got {lines[3:6]}"
    assert any(x.startswith("-- rsync -> 192.168.100.200 (cgroup /test)") for x in lines), (
        f"details of the selected group missing: {lines[-7:]}")
    st.key("h", st.select(groups))
    assert "keys" in screen(st, groups)[3], "help screen not shown"
    assert st.key("q", st.select(groups)) is False, "q must quit"


def test_scrolling_keeps_the_selected_group_on_screen() -> None:
    base = scene()[0]
    groups = [replace(base, key=base.key._replace(remote_addr=f"10.9.0.{i}"),
                      remote_addr=f"10.9.0.{i}", goodput_bps=1e6 * (100 - i))
              for i in range(40)]
    st = ViewState()
    for _ in range(30):
        st.key(KEY_DOWN, st.select(groups))
    lines = screen(st, groups)
    assert len(lines) == 24
    assert any(x.startswith(">iperf3          10.9.0.30") for x in lines), (
        f"selected row not visible: {lines[3:12]}")
    assert any("more (sort or filter to see them)" in x for x in lines), "no '... more' line"


class FakeReader:
    def __init__(self, transfers: list[Transfer]) -> None:
        self.transfers, self.now = transfers, 0

    def snapshot(self) -> list[Flow]:
        self.now += SECOND
        return [f for t in self.transfers for f in t.step(1.0, self.now)]

    def stats(self) -> ReaderStats:
        return ReaderStats(0, 0, 0, 0, 1024)


def test_json_lines_have_the_promised_keys() -> None:
    out = io.StringIO()
    t = Transfer(streams=3, mbps=30.0)
    Loop(FakeReader([t]), Aggregator(), 0.01).json_lines(out, 2, ViewState())
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    assert len(lines) == 2, f"expected one object per group per refresh, got {lines}"
    promised = {"comm", "cgroup", "remote_addr", "streams", "goodput_mbps", "loss_rate",
                "srtt_ms", "congestion_control", "advice"}
    missing = promised - set(lines[0])
    assert not missing, f"keys missing from --json: {missing}"
    assert (lines[1]["comm"], lines[1]["streams"], lines[1]["advice"]) == ("iperf3", 3, None)


def test_json_advice_is_the_predict_advice_object() -> None:
    g = scene()[0] if scene()[0].key.owner == "iperf3" else None
    assert g is not None and g.passive is not None
    adv = group_to_json(g, 0.0)["advice"]
    assert set(adv) == {"num_flows", "max_nondisruptive_thru_mbps", "cross_traffic_impact",
                        "limited_by"}, f"got {adv}"
    want = predict_advice("1:50", "10:200")  # one answer: what `tamebpf predict` says
    assert adv["num_flows"] == want["num_flows"] and adv["max_nondisruptive_thru_mbps"] == \
        pytest.approx(want["max_nondisruptive_thru_mbps"], rel=1e-3), (adv, want)


def test_printed_mode_prints_n_refreshes() -> None:
    out = io.StringIO()
    Loop(FakeReader([Transfer(streams=2, mbps=8.0)]), Aggregator(), 0.01).printed(
        out, 3, ViewState())
    heads = [x for x in out.getvalue().splitlines() if x.startswith("tamebpf watch - ")]
    assert len(heads) == 3, f"expected 3 refreshes, got {len(heads)}"
    rows = [x.split() for x in out.getvalue().splitlines() if x.startswith(" iperf3")]
    assert rows[-1][:5] == ["iperf3", "10.0.0.2", "send", "2", "8.0"], f"got row {rows[-1:]}"


def test_a_process_that_sends_and_receives_to_one_destination_shows_two_groups() -> None:
    agg = Aggregator()
    up = Transfer(streams=2, mbps=40.0, next_cookie=1)
    down = Transfer(streams=3, mbps=90.0, next_cookie=100, receive=True, srtt_us=30_000)
    groups = run(agg, [up, down], 3)
    lines = screen(ViewState(), groups, height=None)
    rows = sorted(x.split()[:5] for x in lines if x.startswith((" iperf3", ">iperf3")))
    assert rows == [[">iperf3", "10.0.0.2", "recv", "3", "90.0"],
                    ["iperf3", "10.0.0.2", "send", "2", "40.0"]], rows
    assert any(x.startswith("-- iperf3 <- 10.0.0.2") for x in lines), lines
    out = {group_to_json(g, 0.0)["direction"] for g in groups}
    assert out == {"send", "receive"}, out


def test_loop_does_not_fall_behind() -> None:
    clock = [0.0]
    loop = Loop(FakeReader([]), Aggregator(), 1.0, clock=lambda: clock[0])
    loop.start()
    clock[0] = 5.5  # a refresh ran 4.5 s late
    loop.tick()
    assert loop.due_in() == pytest.approx(1.0), (
        f"expected the next refresh in 1 s, got {loop.due_in()}")


def test_caps_hook_without_and_with_a_cap_module(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from tamebpf.cap import view as watch

    monkeypatch.setitem(sys.modules, "tamebpf.cap.table", None)  # import fails
    watch._cap_table.cache_clear()
    try:
        assert watch.cap_table() == [] and read_caps() == [], "no cap module must mean no caps"
    finally:
        watch._cap_table.cache_clear()
    kernel_caps = [cap_record(cgroup="/bulk", dest="10.0.0.0/8", max_streams=4),
                   cap_record(cgroup="/x", dest="[fd00::/64]:5201", max_streams=2)]
    monkeypatch.setattr(watch, "cap_table", lambda: kernel_caps)
    got = read_caps()
    assert got == [CapLimit(4, "/bulk", "10.0.0.0/8"),
                   CapLimit(2, "/x", "fd00::/64", 5201)], f"got {got}"

"""The emulated WAN testbed (issue 4): real namespaces, real iperf3, real ICMP.

Each test brings up its own testbed under a unique name, measures one
property against the tolerance the issue sets, and tears it down, checking
that nothing is left (namespaces, processes, state, root-namespace links).
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tamebpf.common.errors import TamebpfError
from tamebpf_testbed import Testbed, iperf
from tamebpf_testbed.accuracy import BIG_PING, frame_ms, steal_ticks
from tamebpf_testbed.config import FRAME, MSS_TS
from tamebpf_testbed.scenario import SweepPlan
from tamebpf_testbed.sweep import run_once
from tests.integration.testbed_fixtures import (
    in_background,
    iperf3_json,
    killed_on_exit,
    leftovers,
    retry,
    running_testbed,
    unique_name,
)

pytestmark = pytest.mark.root
REPO = Path(__file__).resolve().parents[2]
UDP_PAYLOAD = 1472  # iperf3 -l 1472: one full-size frame per datagram


def rtt_tolerance(rtt_ms: float) -> float:
    """The issue's bar: 2% or 0.5 ms, whichever is larger."""
    return max(0.02 * rtt_ms, 0.5)


def test_up_describes_itself_and_down_twice_leaves_nothing() -> None:
    name = unique_name()
    tb = Testbed.up(name, 50, 20, 50)
    try:
        d = tb.describe()
        assert d["name"] == name
        assert set(d["namespaces"]) == {"sender", "cross", "router", "receiver"}
        assert all(ns.startswith(name) for ns in d["namespaces"].values()), d["namespaces"]
        assert d["addresses"]["receiver"].startswith("198.1"), d["addresses"]
        again = Testbed.attach(name)
        assert again.config == tb.config, f"attach gave {again.config}, expected {tb.config}"
        routes = tb.exec("sender", ["ip", "route", "get", "192.0.2.1"], check=False)
        assert "via" not in routes, f"the sender has a route out of the testbed: {routes!r}"
        assert set(tb.pids) == {"link", "back"} and not tb.dead_delay_lines(), tb.pids
        for tool in ("iptables", "ip6tables"):
            rules = tb.exec("router", [tool, "-t", "mangle", "-S", "FORWARD"])
            assert rules.count("NFQUEUE") == 4 and rules.count("--length 129:65535") == 2 \
                and "bypass" not in rules, \
                f"expected four NFQUEUE rules (two for large packets from the receiver) " \
                f"without --queue-bypass, got {rules!r}"
        filters = tb.exec("router", ["tc", "filter", "show", "dev", "rcv0"])
        assert not filters.strip(), f"expected no tc filters (no BPF) at rcv0, got {filters!r}"
    finally:
        pids = list(tb.pids.values())
        tb.down()
        tb.down()  # idempotent
    problems = leftovers(name, pids)
    assert not problems, f"after down, expected nothing left, got {problems}"


def test_cli_up_exec_status_down() -> None:
    name = unique_name()
    script = str(REPO / "scripts" / "testbed")
    try:
        up = subprocess.run([script, "up", name, "--rate", "20", "--rtt", "10", "--queue",
                             "30", "--cross-rtt", "30", "--rate-back", "40", "--senders", "2"],
                            capture_output=True, text=True, check=False, timeout=60)
        assert up.returncode == 0, f"testbed up failed: {up.stderr}"
        d = json.loads(up.stdout)
        for key in ("sender", "cross", "router", "receiver", "sender2"):
            assert d["namespaces"][key] == f"{name}-{d['namespaces'][key].split('-')[1]}"
        for key in ("sender", "cross", "receiver", "sender2"):
            assert isinstance(d["addresses"][key], str), d["addresses"]
        assert d["goodput_back_mbit"] == round(40 * MSS_TS / FRAME, 3), d
        assert set(d["pids"]) == {"link", "back"}, d["pids"]
        for role in ("receiver", "sender2"):
            ex = subprocess.run([script, "exec", name, role, "--", "ip", "-o", "-4", "addr"],
                                capture_output=True, text=True, check=False, timeout=30)
            assert d["addresses"][role] in ex.stdout, \
                f"expected {d['addresses'][role]} in {role}'s addresses, got {ex.stdout!r}"
        st = subprocess.run([script, "status", name], capture_output=True, text=True,
                            check=False, timeout=30)
        assert st.returncode == 0 and json.loads(st.stdout)["dead_delay_lines"] == [], st.stdout
        # status covers the back link too: a dead one is a dead testbed.
        os.kill(d["pids"]["back"], signal.SIGKILL)
        iperf.wait_for(lambda: "back" in Testbed.attach(name).dead_delay_lines(), 5.0,
                       "the killed back link to show as dead")
        st = subprocess.run([script, "status", name], capture_output=True, text=True,
                            check=False, timeout=30)
        assert st.returncode == 1 and json.loads(st.stdout)["dead_delay_lines"] == ["back"], \
            f"expected status 1 naming the back link, got {st.returncode}: {st.stdout}"
    finally:
        for _ in range(2):
            down = subprocess.run([script, "down", name], capture_output=True, text=True,
                                  check=False, timeout=60)
            assert down.returncode == 0, f"down failed: {down.stderr}"
    problems = leftovers(name, [])
    assert not problems, f"after down, expected nothing left, got {problems}"


def assert_idle_rtt(tb: Testbed, src: str, dst: str, family: int, want: float,
                    size: int | None = None) -> None:
    """src's pings to dst (size: payload bytes) come back after want ms, to
    within rtt_tolerance, and none early."""
    path = f"{src} -> {dst} IPv{family}"
    tb.ping(src, dst, count=2, interval=0.05, family=family)  # neighbour discovery
    tol = rtt_tolerance(want)
    # The delay line's bias is +0.2..0.3 ms (docs/testbed.md); a burst of
    # VM noise during one 0.6-s sample can add as much again, so one sample
    # outside the bar is measured again, and two must agree.
    meds = []
    for _ in range(2):
        r = tb.ping(src, dst, count=30, interval=0.02, family=family, size=size)
        assert r["received"] == 30, f"{path}: lost pings: {r}"
        meds.append(statistics.median(r["rtt_ms"]))
        if abs(meds[-1] - want) <= tol:
            break
    assert abs(meds[-1] - want) <= tol, \
        f"{path}: median RTT {meds} ms outside {want:.3f} +- {tol} ms"
    assert min(r["rtt_ms"]) >= want - tol, \
        f"{path}: a packet came back early: {min(r['rtt_ms'])} ms"


@pytest.mark.parametrize("rtt,cross_rtt", [(50.0, 20.0), (10.0, None)])
def test_ping_rtt_idle(rtt: float, cross_rtt: float | None) -> None:
    """Both ways: the hosts ping the receiver, and the receiver pings them
    with a payload large enough to cross the back link (which adds the
    frame's time on each link, 0.08 ms at 100 Mbit/s)."""
    rate = 100.0
    with running_testbed(rate_mbit=rate, rtt_ms=rtt, queue_pkts=100, cross_rtt_ms=cross_rtt) as tb:
        for src, dst, size, want in (("sender", "receiver", None, rtt),
                                     ("cross", "receiver", None, cross_rtt or rtt),
                                     ("receiver", "sender", BIG_PING, rtt),
                                     ("receiver", "cross", BIG_PING, cross_rtt or rtt)):
            for family in (4, 6):
                assert_idle_rtt(tb, src, dst, family,
                                want + (2 * frame_ms(size, family, rate) if size else 0), size)
        back = tb.link_stats("back")
        assert back["packets"] >= 4 * 30, \
            f"expected the receiver's large pings through the back link, got {back}"


def test_udp_rate() -> None:
    rate = 50.0
    # 200 frames (48 ms) of queue: a sender the host stalls for longer than the
    # queue lasts leaves the link idle, as it would a real one; the datagrams
    # still queued at the end add at most 1.2% to iperf3's count.
    with running_testbed(rate_mbit=rate, rtt_ms=10, queue_pkts=200) as tb:
        def attempt() -> tuple[bool, str]:
            d = iperf3_json(tb, iperf.client_argv(tb.addresses["receiver"], iperf.PORT_MAIN,
                                                  1, 4, "cubic", udp_mbit=rate * 1.3))
            got = d["end"]["sum"]["bits_per_second"] * (1 - d["end"]["sum"]["lost_percent"]
                                                       / 100) / 1e6
            want = rate * UDP_PAYLOAD / FRAME
            return abs(got - want) <= 0.03 * want, \
                f"UDP goodput {got:.2f} Mbit/s, expected {want:.2f} +- 3%"
        ok, msgs = retry(2, attempt)
        assert ok, msgs


def test_tcp_rate_one_cubic_flow() -> None:
    rate = 100.0
    # 500 frames (60 ms, about 3 BDP): CUBIC's back-off does not empty it, and
    # neither does a host that takes a vCPU away for tens of ms (this VM's
    # steal time reached 30%), so the check measures the link.
    with running_testbed(rate_mbit=rate, rtt_ms=20, queue_pkts=500) as tb:
        def attempt() -> tuple[bool, str]:
            s0 = steal_ticks()
            d = iperf3_json(tb, iperf.client_argv(tb.addresses["receiver"], iperf.PORT_MAIN,
                                                  1, 6, "cubic", omit=2))
            s1 = steal_ticks()
            steal = (s1[0] - s0[0]) / max(1, s1[1] - s0[1])
            got = d["end"]["sum_received"]["bits_per_second"] / 1e6
            want = rate * MSS_TS / FRAME
            return abs(got - want) <= 0.03 * want, \
                f"TCP goodput {got:.2f} Mbit/s, expected {want:.2f} +- 3% " \
                f"(host steal {100 * steal:.0f}%)"
        # One retry: a compile on the other core can starve the sender for a
        # second; a real shaping error fails both attempts.
        ok, msgs = retry(3, attempt)
        assert ok, msgs


def test_tcp_rate_download_gets_the_back_rate() -> None:
    """A download (iperf3 -R: the receiver sends) crosses the back link at
    its own rate, here above the forward link's, which carries its ACKs."""
    rate, rate_back = 20.0, 50.0
    # 400 frames: 97 ms at 50 Mbit/s, a queue that outlasts CUBIC's back-off
    # and the host's stalls, as the forward check's does.
    with running_testbed(rate_mbit=rate, rtt_ms=20, queue_pkts=400,
                         rate_back_mbit=rate_back) as tb:
        def attempt() -> tuple[bool, str]:
            d = iperf3_json(tb, iperf.client_argv(tb.addresses["receiver"], iperf.PORT_MAIN,
                                                  1, 6, "cubic", omit=2, reverse=True))
            got = d["end"]["sum_received"]["bits_per_second"] / 1e6
            want = tb.config.goodput_back_mbit
            cc = d["end"].get("sender_tcp_congestion")
            return abs(got - want) <= 0.04 * want, \
                f"download goodput {got:.2f} Mbit/s ({cc}), expected {want:.2f} +- 4%"
        ok, msgs = retry(3, attempt)
        print(msgs[-1])
        assert ok, msgs
        back = tb.link_stats("back")
        assert back["released"] > 10000 and back["tail_drops"] < back["released"] / 100, \
            f"expected the download's data through the back link, got {back}"


SHARE_WINDOW_S = 4.0


def assert_flows_share(tb: Testbed, flows: dict[str, int], want: float,
                       reverse: bool = False) -> None:
    """One CUBIC flow from each role in flows to its port on the receiver
    (reverse: downloads from it) at once. Over a window after all have left
    slow start, their goodputs (the data senders' acked bytes) sum to want
    within 5%, and each gets at least a fifth of it."""
    rcv = tb.addresses["receiver"]
    servers = [iperf.start_server(tb, port) for port in flows.values()]
    clients = {role: tb.popen(role, iperf.client_argv(rcv, port, 1, 30, "cubic",
                                                      json_out=False, reverse=reverse),
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
               for role, port in flows.items()}
    # A download's data sender is the receiver's iperf3 server.
    sender = {role: ("receiver", port, True) if reverse else (role, port, False)
              for role, port in flows.items()}
    with killed_on_exit(*clients.values(), *servers):
        for role, port in flows.items():
            iperf.wait_flows(tb, role, port, 1, clients[role])
        iperf.wait_for(lambda: all(iperf.left_slow_start(tb, r, p, 1, served=s)
                                   for r, p, s in sender.values()),
                       30.0, f"the flows of {', '.join(flows)} past slow start")

        def attempt() -> tuple[bool, str]:
            a = {role: iperf.acked_bytes(tb, *sender[role]) for role in flows}
            time.sleep(SHARE_WINDOW_S)
            got = {role: iperf.mbit_between(a[role], iperf.acked_bytes(tb, *sender[role]))
                   for role in flows}
            total = sum(got.values())
            ok = abs(total - want) <= 0.05 * want and min(got.values()) >= want / 5
            each = ", ".join(f"{role} {mbit:.2f}" for role, mbit in got.items())
            return ok, f"{each} Mbit/s, sum {total:.2f}: expected {want:.2f} +- 5%, " \
                f"each at least {want / 5:.2f}"
        ok, msgs = retry(2, attempt)
    print(msgs[-1])
    assert ok, msgs


def test_two_senders_share_the_bottleneck() -> None:
    """With senders=2, sender2 is a second host behind the same link: the
    sender's RTT, and two uploads at once share the link's rate."""
    rtt = 20.0
    with running_testbed(rate_mbit=50, rtt_ms=rtt, queue_pkts=200, senders=2) as tb:
        for family in (4, 6):
            assert_idle_rtt(tb, "sender2", "receiver", family, rtt)
        assert_flows_share(tb, {"sender": iperf.PORT_MAIN, "sender2": iperf.PORT_CROSS},
                           tb.config.goodput_mbit)
        assert tb.tx_packets("sender2") > 1000, "sender2 sent almost nothing"


def test_cross_traffic_downloads_share_the_back_bottleneck() -> None:
    """Cross traffic can flow either way: our download and one to the
    cross host (iperf3 -R from it) share the back link."""
    with running_testbed(rate_mbit=50, rtt_ms=20, queue_pkts=100, rate_back_mbit=20) as tb:
        assert_flows_share(tb, {"sender": iperf.PORT_MAIN, "cross": iperf.PORT_CROSS},
                           tb.config.goodput_back_mbit, reverse=True)
        fwd = tb.link_stats()
        assert fwd["tail_drops"] == 0, f"the downloads' ACKs met a full forward link: {fwd}"


def test_link_keeps_its_rate_through_its_own_stalls() -> None:
    """The link runs on a virtual clock: stopped for 30 ms of every 100 (a VM
    whose timers wake late, or whose vCPU the host takes away), it releases
    what came due in one batch and the queue never runs dry, so it still
    delivers R. A shaper that counts time from its own wake-ups loses it."""
    rate, queue = 50.0, 1000  # 1000 frames: 240 ms of backlog, far above a stall
    with running_testbed(rate_mbit=rate, rtt_ms=10, queue_pkts=queue) as tb:
        server = iperf.start_server(tb, iperf.PORT_MAIN)
        load = in_background(tb, "cross", iperf.client_argv(
            tb.addresses["receiver"], iperf.PORT_MAIN, 1, 12, "cubic", udp_mbit=rate * 1.5,
            json_out=False))
        pid = tb.pids["link"]
        try:
            iperf.wait_for(lambda: tb.link_stats()["backlog"] >= queue // 2, 8.0,
                           "the bottleneck queue to fill")
            a, ta = tb.link_stats()["released"], time.monotonic()
            while time.monotonic() - ta < 3.0:
                os.kill(pid, signal.SIGSTOP)
                time.sleep(0.03)
                os.kill(pid, signal.SIGCONT)
                time.sleep(0.07)
            b, tb_ = tb.link_stats()["released"], time.monotonic()
            backlog = tb.link_stats()["backlog"]
        finally:
            os.kill(pid, signal.SIGCONT)
            load.terminate()
            load.wait(10)
            server.terminate()
            server.wait(10)
        got = (b - a) * FRAME * 8 / (tb_ - ta) / 1e6
        assert backlog > 0, "the queue ran dry: the overload did not hold"
        assert abs(got - rate) <= 0.03 * rate, \
            f"link delivered {got:.2f} Mbit/s of frames while stalled 30% of the time, " \
            f"expected {rate} +- 3%"


def test_server_idle_follows_a_test() -> None:
    with running_testbed(rate_mbit=10, rtt_ms=10, queue_pkts=50) as tb:
        server = iperf.start_server(tb, iperf.PORT_MAIN)
        client = None
        try:
            assert iperf.server_idle(tb, iperf.PORT_MAIN), "idle before any test"
            client = in_background(tb, "sender", iperf.client_argv(
                tb.addresses["receiver"], iperf.PORT_MAIN, 2, 2, "cubic", json_out=False))
            iperf.wait_flows(tb, "sender", iperf.PORT_MAIN, 2, client)
            assert not iperf.server_idle(tb, iperf.PORT_MAIN), "busy during a test"
            assert client.wait(15) == 0
            iperf.wait_for(lambda: iperf.server_idle(tb, iperf.PORT_MAIN), 10.0,
                           "the server to be idle after the test")
        finally:
            for proc in (client, server):
                if proc is not None and proc.poll() is None:
                    proc.terminate()
                    proc.wait(10)


def _ping_under_udp_load(tb: Testbed, load_mbit: float, back: bool = False) -> list[float]:
    """RTTs of pings behind a UDP overload: from the cross host, the
    sender's pings; back: from the receiver to the sender (iperf3 -R), the
    receiver's pings to the sender, large enough to join it on the back link."""
    server = iperf.start_server(tb, iperf.PORT_MAIN)
    load = in_background(tb, "sender" if back else "cross", iperf.client_argv(
        tb.addresses["receiver"], iperf.PORT_MAIN, 1, 8, "cubic", udp_mbit=load_mbit,
        json_out=False, reverse=back))
    direction = "back" if back else "forward"
    try:
        iperf.wait_for(lambda: tb.link_stats(direction)["backlog"] >= tb.config.queue_pkts // 2,
                       5.0, f"the {direction} link's queue to fill")
        # The overload drops pings; after the last, ping waits twice the
        # longest RTT it saw, or 0.5 s if none came through (over 3 times the
        # RTT through either test's full queue).
        if back:
            r = tb.ping("receiver", "sender", count=60, interval=0.05, timeout=0.5,
                        size=BIG_PING)
        else:
            r = tb.ping("sender", count=60, interval=0.05, timeout=0.5)
    finally:
        load.terminate()
        load.wait(10)
        server.terminate()
        server.wait(10)
    rtts: list[float] = r["rtt_ms"]
    return rtts


@pytest.mark.parametrize("back", [False, True], ids=["forward", "back"])
def test_queue_limit_ping_under_load_sees_full_queue(back: bool) -> None:
    """Forward: the sender's ping behind the cross host's overload. Back: the
    receiver's behind its own overload toward the sender, on a back link
    slower than the forward one."""
    rate, rtt, queue = 10.0, 20.0, 50
    kw = {"rate_mbit": 50.0, "rate_back_mbit": rate} if back else {"rate_mbit": rate}
    with running_testbed(rtt_ms=rtt, queue_pkts=queue, **kw) as tb:
        rtts = _ping_under_udp_load(tb, rate * 1.5, back)
        # Overloaded, the queue is always full and a ping gets in only when it
        # beats the UDP flood to a freed slot: many are dropped, by design.
        assert len(rtts) >= 5, f"expected >= 5 of 60 pings through a full queue, got {len(rtts)}"
        # A ping joins a queue of queue-1 full frames (its own slot is the last).
        want = rtt + (queue - 1) * FRAME * 8 / (rate * 1e3)
        med = statistics.median(rtts)
        assert abs(med - want) <= 0.05 * want, \
            f"ping under load {med:.1f} ms, expected a full queue: {want:.1f} ms +- 5%"
        stats = tb.link_stats("back" if back else "forward")
        assert stats["tail_drops"] > 0, f"expected tail drops at the full queue, got {stats}"
        if back:
            fwd = tb.link_stats()
            assert fwd["tail_drops"] == 0, f"the forward link dropped: {fwd}"


def test_red_keeps_queue_below_limit() -> None:
    rate, rtt, queue = 10.0, 20.0, 100
    full = rtt + (queue - 1) * FRAME * 8 / (rate * 1e3)
    with running_testbed(rate_mbit=rate, rtt_ms=rtt, queue_pkts=queue, aqm="red") as tb:
        rtts = _ping_under_udp_load(tb, rate * 1.3)
        assert rtts, "no ping came through under load"
        med = statistics.median(rtts)
        red = tb.config.red
        assert red is not None
        # Against a 30% overload RED ("gentle") settles between max_th and
        # 2*max_th but drops before the hard limit.
        ceiling = rtt + 2 * red.max_th * FRAME * 8 / (rate * 1e3)
        assert med < min(full * 0.9, ceiling), \
            f"RED queueing: ping {med:.1f} ms, expected below {min(full * 0.9, ceiling):.1f} " \
            f"(full drop-tail queue: {full:.1f} ms)"
        assert med > rtt + red.min_th * FRAME * 8 / (rate * 1e3), \
            f"ping {med:.1f} ms: expected the average queue above min_th under overload"
        stats = tb.link_stats()
        assert stats["red_drops"] > stats["tail_drops"], \
            f"expected RED, not the full queue, to drop: {stats}"


def test_random_loss_rate() -> None:
    """The link drops the configured share of what reaches it, and iperf3
    sees at least that much loss. (iperf3 alone is not the measure: after a
    host stall the link releases a batch that can overflow the receiver's
    UDP buffer, which iperf3 counts as loss too; CI saw 3.7% for 2%.)"""
    loss = 2.0
    with running_testbed(rate_mbit=100, rtt_ms=10, queue_pkts=1000, loss_pct=loss, seed=3) as tb:
        before = tb.link_stats()
        d = iperf3_json(tb, iperf.client_argv(tb.addresses["receiver"], iperf.PORT_MAIN, 1, 3,
                                              "cubic", udp_mbit=30))
        after = tb.link_stats()
        n = after["packets"] - before["packets"]
        lost = after["lost"] - before["lost"]
        p = loss / 100
        sd = (n * p * (1 - p)) ** 0.5
        assert n > 5000, f"expected > 5000 packets through the link, got {n}"
        assert abs(lost - n * p) <= 4 * sd, \
            f"link lost {lost:.0f} of {n:.0f} ({100 * lost / n:.2f}%), expected {loss}% " \
            f"+- 4 sd ({4 * sd:.0f})"
        s = d["end"]["sum"]
        seen = s["lost_packets"] / s["packets"]
        assert seen >= p - 4 * sd / n, f"iperf3 saw {100 * seen:.2f}% lost, below {loss}%"


def test_loss_is_seeded() -> None:
    """The same seed drops the same packets of the same sequence; another does not."""
    lost = {}
    for seed in (11, 11, 12):
        with running_testbed(rate_mbit=100, rtt_ms=1, queue_pkts=100, loss_pct=10, seed=seed) as tb:
            # After the last, ping waits twice the longest RTT it saw (0.3 s,
            # 300 RTTs, if none came). A reply later than that counts as lost,
            # which could only make the two runs of seed 11 differ, never agree.
            r = tb.ping("sender", count=300, interval=0.002, timeout=0.3)
            lost.setdefault(seed, []).append(r["lost_seq"])
    a, b = lost[11]
    assert 10 <= len(a) <= 55, f"10% loss of 300 pings: expected 10..55 lost, got {len(a)}"
    assert a == b, f"seed 11 twice: expected the same lost pings, got {a} and {b}"
    assert lost[12][0] != a, f"seeds 11 and 12 lost the same pings: {a}"


def test_dead_delay_line_is_noticed_and_path_dies() -> None:
    with running_testbed(rate_mbit=10, rtt_ms=20, queue_pkts=50) as tb:
        tb.check()
        os.kill(tb.pids["link"], signal.SIGKILL)
        iperf.wait_for(lambda: "link" in tb.dead_delay_lines(), 5.0,
                       "the killed delay line to show as dead")
        with pytest.raises(TamebpfError, match="delay line"):
            tb.check()
        r = tb.ping("sender", count=5, interval=0.05, timeout=0.5)
        assert r["received"] == 0, \
            f"expected a dead path without its delay line (no --queue-bypass), got {r}"


def test_delay_line_exits_cleanly_on_sigterm() -> None:
    with running_testbed(rate_mbit=10, rtt_ms=20, queue_pkts=50) as tb:
        tb.ping("sender", count=5, interval=0.02)
        pid = tb.pids["link"]
        os.kill(pid, signal.SIGTERM)
        iperf.wait_for(lambda: pid in [p for p in [pid] if not Path(f"/proc/{p}").exists()]
                       or "link" in tb.dead_delay_lines(), 5.0, "exit on SIGTERM")
        log = (Path(tb.describe()["state_dir"]) / "delay-link.log").read_text()
        assert "packets" in log and "late_mean_us" in log, \
            f"expected exit statistics in the log after SIGTERM, got {log!r}"


def test_sweep_keeps_raw_runs_and_measures_cross_traffic(tmp_path: Path) -> None:
    # One sweep, run as a user runs it (the CLI): two stream counts against the
    # same cross traffic, every run kept raw in the JSON and the CSV. (How the
    # summary pools repeats of one (n, m) is pure: tests/unit/testbed.)
    with running_testbed(rate_mbit=20, rtt_ms=20, queue_pkts=40) as tb:
        out = tmp_path / "s.json"
        cli = subprocess.run([sys.executable, "-m", "tamebpf_testbed", "sweep", tb.name,
                              "--streams", "1,3", "--cross", "2", "--repeats", "1",
                              "--duration", "2", "--warmup", "1", "--cc", "cubic",
                              "--out", str(out)],
                             capture_output=True, text=True, check=False, timeout=120)
        assert cli.returncode == 0, cli.stderr
        doc = json.loads(out.read_text())
        runs = doc["runs"]
        assert [(r["n"], r["m"]) for r in runs] == [(1, 2), (3, 2)], runs
        cap = tb.config.goodput_mbit
        for r in runs:
            alone, with_ = r["cross_alone_mbit"], r["cross_with_mbit"]
            assert alone is not None and with_ is not None, r
            total = r["mbit"] + with_
            assert 0.5 * cap < total <= 1.05 * cap, \
                f"n={r['n']}: ours {r['mbit']:.2f} + cross {with_:.2f} Mbit/s, " \
                f"expected close to the bottleneck's {cap:.2f}"
            assert with_ < alone, \
                f"n={r['n']}: cross traffic got {with_:.2f} with our streams, " \
                f"{alone:.2f} without: expected less with"
        assert [(row["n"], row["runs"]) for row in doc["summary"]] == [(1, 1), (3, 1)], \
            doc["summary"]
        assert out.with_suffix(".csv").read_text().count("\n") == 3


def test_run_once_refuses_a_dead_testbed() -> None:
    with running_testbed(rate_mbit=10, rtt_ms=10, queue_pkts=20) as tb:
        os.kill(tb.pids["link"], signal.SIGKILL)
        iperf.wait_for(lambda: bool(tb.dead_delay_lines()), 5.0, "dead delay line")
        plan = SweepPlan(streams=[1], duration_s=1, warmup_s=1)
        t0 = time.monotonic()
        with pytest.raises(TamebpfError, match="died"):
            run_once(tb, plan, 1, 0, 0)
        assert time.monotonic() - t0 < 5, "expected run_once to refuse at once"

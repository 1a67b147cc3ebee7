"""`tamebpf advise` on the WAN testbed: a short version of `make eval` with
loose bounds, so that a broken estimator fails here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tamebpf.cli import main
from tamebpf.common.defaults import DEFAULT_MAX_PROBE_S
from tamebpf.estimate.record import TIME_LIMIT
from tamebpf.estimate.settled import SETTLED, SETTLED_EPOCHS
from tamebpf.kernel.cgroups import cgroup2_mount
from tamebpf_testbed import Testbed, iperf
from tests.integration import testbed_fixtures as tbfix
from tests.integration.unprivileged import run_as_user

pytestmark = pytest.mark.root

RATE, RTT, QUEUE = 20.0, 20.0, 25
CAPACITY = RATE * 1448 / 1514  # TCP goodput the bottleneck allows


@pytest.fixture(scope="module")
def tb() -> Iterator[Testbed]:
    """The RATE/RTT/QUEUE path, one for the module's tests on it: each
    starts and ends its own servers and traffic on it and puts back what it
    changed (the BBR test, the sender's default congestion control)."""
    with tbfix.running_testbed(rate_mbit=RATE, rtt_ms=RTT, queue_pkts=QUEUE, cc="cubic") as t:
        yield t


@pytest.fixture(scope="module")
def short_path() -> Iterator[Testbed]:
    """The same link at 5 ms, one for the module's error tests."""
    with tbfix.running_testbed(rate_mbit=RATE, rtt_ms=5.0, queue_pkts=QUEUE, cc="cubic") as t:
        yield t


def advise(tb: Testbed, *extra: str, port: int = 5201) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tamebpf", "advise", f"{tb.addresses['receiver']}:{port}",
         "--max-impact", "10%", "--netns", tb.namespaces["sender"], "--congestion", "cubic",
         *extra], capture_output=True, text=True, timeout=60)


def goodput(tb: Testbed, role: str, streams: int, seconds: int = 4, port: int = 5201,
            omit: int = 1) -> subprocess.Popen[bytes]:
    argv = iperf.client_argv(tb.addresses["receiver"], port, streams, seconds, "cubic",
                             omit=omit)
    return tb.popen(role, argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)


def mbps(proc: subprocess.Popen[bytes]) -> float:
    out, _ = proc.communicate(timeout=30)
    report: dict[str, Any] = json.loads(out)
    return float(report["end"]["sum_received"]["bits_per_second"]) / 1e6




def probe_cgroups() -> list[str]:
    root = cgroup2_mount()
    assert root
    return [d for d in os.listdir(root) if d.startswith("tamebpf-probe-")]


def one_clear_line(res: subprocess.CompletedProcess[str], *words: str, code: int = 1) -> None:
    lines = res.stderr.strip().splitlines()
    assert res.returncode == code, f"exit {res.returncode}: {res.stderr}"
    assert not [ln for ln in lines if ln.startswith("Traceback")], res.stderr
    assert lines and all(w in lines[-1] for w in words), (words, lines)


@pytest.mark.long
def test_advice_predicts_throughput_and_impact_on_a_testbed(tb: Testbed) -> None:
    """--quick: two fixed 2-s probes, checked against a measured run."""
    servers = [iperf.start_server(tb, p) for p in (5201, 5202)]
    with tbfix.killed_on_exit(*servers):
        res = advise(tb, "--json", "--quick")
        assert res.returncode == 0, res.stderr
        out = json.loads(res.stdout)
        m = out["measurements"]
        assert [x["streams"] for x in m] == [1, 10]
        for x in m:
            assert x["congestion_control"] == "cubic", x
            assert x["goodput_mbps"] <= CAPACITY * 1.03, (
                f"{x['streams']} streams: kernel goodput {x['goodput_mbps']:.2f} above "
                f"the bottleneck's {CAPACITY:.2f} Mbit/s")
            assert abs(x["srtt_ms"] - RTT) < RTT, f"srtt {x['srtt_ms']} ms vs base {RTT}"
        # The probes are the two stages of one iperf3 test: the first
        # carries its set-up, the second its result exchange and the
        # server's count of the whole test. That count covers slow start
        # too, so it is mostly lower; but it runs until TEST_END reaches
        # the server, and at a full queue that byte can wait out an RTO
        # while the send buffers drain: seen 20.9 against 18.3.
        first, second = m
        assert first["iperf3_mbps"] is None, first
        assert 0 < second["iperf3_mbps"] <= CAPACITY * 1.25, second
        assert first["setup_s"] > 0 and first["finish_s"] == 0, first
        assert second["setup_s"] == 0 and second["finish_s"] > 0, second
        assert first["setup_s"] + 2.0 <= first["duration_s"] < first["setup_s"] + 2.5, first
        assert 2.0 < second["duration_s"] < second["finish_s"] + 2.5, second
        assert m[1]["goodput_mbps"] >= 0.85 * CAPACITY, f"10 streams fill the link: {m[1]}"
        assert m[1]["loss_rate"] and m[1]["loss_rate"] > 0, "a 25-packet queue drops"
        assert out["estimators"]["loss_rtt"] is not None, out["estimators"]
        curve = {c["streams"]: c for c in out["curve"]}

        # Ground truth at 4 streams: our throughput, and the impact on one
        # cross-traffic flow: its goodput alone, then sharing with our 4
        # streams past their first second (as iperf3's omitted one),
        # read from its socket over exactly those seconds.
        ours = mbps(goodput(tb, "sender", 4))
        rcv = tb.addresses["receiver"]
        cross = tb.popen("cross", iperf.client_argv(rcv, 5202, 1, 30, "cubic",
                                                    json_out=False),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with tbfix.killed_on_exit(cross):
            iperf.wait_past_slow_start(tb, "cross", 5202, 1, cross)
            alone = iperf.cross_rate(tb, 4)
            ours4 = tb.popen("sender", iperf.client_argv(rcv, 5201, 4, 30, "cubic",
                                                         json_out=False),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            with tbfix.killed_on_exit(ours4):
                iperf.wait_flows(tb, "sender", 5201, 4, ours4)
                time.sleep(1)
                shared = iperf.cross_rate(tb, 4)
        measured_impact = 1 - shared / alone
        predicted = curve[4]
        err = (predicted["throughput_mbps"] - ours) / ours
        assert abs(err) <= 0.15, (
            f"4 streams: predicted {predicted['throughput_mbps']:.2f}, measured {ours:.2f} "
            f"Mbit/s (error {err:+.0%}, bound 15%)")
        assert abs(predicted["impact"] - measured_impact) <= 0.30, (
            f"impact of 4 streams on one cross flow: predicted {predicted['impact']:.2f}, "
            f"measured {measured_impact:.2f} ({alone:.2f} -> {shared:.2f} Mbit/s)")
    assert not probe_cgroups(), f"probe cgroups left: {probe_cgroups()}"


# A shared path: 4 CUBIC cross flows on 40 Mbit/s, 30 ms, a queue of half a
# BDP. Here the capacity trust rule (acktrain.MIN_SHARE, 25% of the pairs
# above the floor in the band) refuses a right estimate now and then: 23-24%
# in 3 of 25 runs at one BDP and at half a BDP (issue 29, session notes of
# 2026-11-26; docs/results/history/probe-limit.md shows the same on the fresh
# draws). The advice then comes from the throughput fit; the estimate's
# value is checked either way.
SHARED_RATE, SHARED_RTT, SHARED_QUEUE, SHARED_CROSS = 40.0, 30.0, 50, 4
SHARED_CAPACITY = SHARED_RATE * 1448 / 1514


@pytest.mark.long
def test_settled_default_advice_on_a_shared_path() -> None:
    """The default advice (probes until settled, no --capacity) on a path
    that 4 CUBIC flows keep full: each probe ends early only once its
    streams have been through the stop rule's congestion epochs (a rule that
    stops at once, before the epochs, fails here; so does one that never
    stops: a 30-ms path settles well within the 15-s limit), the bottleneck
    is estimated from ACK spacing within 15%, and the advised stream count
    then moves what the advice predicts, measured beside the same cross
    traffic after it settled (3 s skipped, 10 s averaged). The bound is 30%."""
    with tbfix.running_testbed(rate_mbit=SHARED_RATE, rtt_ms=SHARED_RTT,
                               queue_pkts=SHARED_QUEUE, cc="cubic") as tb:
        servers = [iperf.start_server(tb, p) for p in (5201, 5202)]
        cross = tb.popen("cross", iperf.client_argv(tb.addresses["receiver"], 5202,
                                                    SHARED_CROSS, 90, "cubic"),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with tbfix.killed_on_exit(cross, *servers):
            iperf.wait_past_slow_start(tb, "cross", 5202, SHARED_CROSS, cross)
            res = advise(tb, "--json", "--max-impact", "30%")
            assert res.returncode == 0, res.stderr
            out = json.loads(res.stdout)
            m = out["measurements"]
            assert [x["stopped"] for x in m if x["stopped"] not in (SETTLED, TIME_LIMIT)] \
                == [], m
            assert any(x["stopped"] == SETTLED for x in m), (
                f"no probe settled on a {SHARED_RTT:g}-ms path within its limit: "
                f"{[(x['stopped'], x['duration_s']) for x in m]}")
            for x in m:
                if x["stopped"] == SETTLED:
                    assert x["past_slow_start"] and x["epochs"] >= SETTLED_EPOCHS, (
                        f"{x['streams']}-stream probe stopped as settled after "
                        f"{x['epochs']} epochs (stream epochs {x['stream_epochs']})")
                traffic = x["duration_s"] - x["setup_s"] - x["finish_s"]
                assert traffic <= DEFAULT_MAX_PROBE_S + 1, x
            est = out["capacity_estimate"]
            err = est["goodput_mbps"] / SHARED_CAPACITY - 1
            assert abs(err) <= 0.15, (
                f"capacity estimate {est['goodput_mbps']:.2f} Mbit/s against the link's "
                f"{SHARED_CAPACITY:.2f} (error {err:+.1%}, bound 15%)")
            if est["trusted"]:
                assert out["estimators"]["used"] == "capacity", out["estimators"]
            else:  # only the share rule may refuse it here, and then the fit advises
                assert est["reason"].startswith("no clear peak") and est["ack_pairs"] >= 20, est
                assert out["estimators"]["used"] == "throughput", out["estimators"]
            assert out["congestion"].startswith("cubic (--congestion)"), out["congestion"]
            n = out["advice"]["num_flows"]
            # The count range on this path's variation, around the count.
            low, high = out["advice"]["streams_range"]
            assert 1 <= low <= n <= high, out["advice"]
            predicted = {c["streams"]: c for c in out["curve"]}[n]["throughput_mbps"]
            # iperf3 adds the omitted seconds to -t: 3 s skipped, 10 s averaged.
            ours = mbps(goodput(tb, "sender", n, seconds=10, omit=3))
            err = (predicted - ours) / ours
            assert abs(err) <= 0.30, (
                f"{n} streams (advised): predicted {predicted:.2f}, measured {ours:.2f} "
                f"Mbit/s beside {SHARED_CROSS} cross flows (error {err:+.0%}, bound 30%)")
    assert not probe_cgroups(), f"probe cgroups left: {probe_cgroups()}"


def test_probes_that_know_enough_end_early(tb: Testbed) -> None:
    """--max-probe-time: on a steady path (our streams alone on the link) each
    probe ends once its goodput and the capacity estimate are tight, well
    before the limit; the advice is still complete."""
    limit = 6.0
    server = iperf.start_server(tb, 5201)
    with tbfix.killed_on_exit(server):
        res = advise(tb, "--json", "--max-probe-time", f"{limit:g}")
        assert res.returncode == 0, res.stderr
        out = json.loads(res.stdout)
        m = out["measurements"]
        assert [x["streams"] for x in m] == [1, 10], m
        for x in m:
            traffic = x["duration_s"] - x["setup_s"] - x["finish_s"]
            assert traffic < limit - 1.5, (
                f"{x['streams']}-stream probe sent for {traffic:.1f} s of at most "
                f"{limit:g} on a steady path")
        assert out["capacity_estimate"]["trusted"], out["capacity_estimate"]
        assert out["advice"]["num_flows"] >= 1
        res = advise(tb, "--max-probe-time", "3", "--duration", "2")
        assert res.returncode == 2 and "choose one" in res.stderr, res.stderr
    assert not probe_cgroups(), f"probe cgroups left: {probe_cgroups()}"


# A long, deep path: 100 ms and a queue of 2 BDP. One stream alone leaves
# slow start when the queue overflows (or HyStart sees it fill), after a
# second or so, and its RTT is then up to 3 times the base: 10 RTTs of
# window after that need more than the 2 s a probe sends by default.
DEEP_RATE, DEEP_RTT = 40.0, 100.0
DEEP_QUEUE = int(2 * DEEP_RATE * 1e6 * DEEP_RTT / 1000 / (1514 * 8))


def test_probes_that_end_in_start_up_say_so() -> None:
    """On a long path with a deep queue, the default 2-s probes end before
    the 1-stream probe is past start-up (estimate/adaptive.past_start_up): the
    JSON says so and the advice carries a warning naming the probe, and only
    for probes that were not past it. --max-probe-time waits for start-up
    to pass: a probe that ends before its limit was past it."""
    limit = 5.0
    with tbfix.running_testbed(rate_mbit=DEEP_RATE, rtt_ms=DEEP_RTT, queue_pkts=DEEP_QUEUE,
                               cc="cubic") as tb:
        server = iperf.start_server(tb, 5201)
        with tbfix.killed_on_exit(server):
            def probes(*extra: str) -> tuple[list[dict[str, Any]], list[str]]:
                iperf.wait_for(lambda: iperf.server_idle(tb, 5201), 30.0, "the iperf3 server")
                res = advise(tb, "--json", *extra)
                assert res.returncode == 0, res.stderr
                out = json.loads(res.stdout)
                return out["measurements"], out["warnings"]

            def past(x: dict[str, Any]) -> bool:
                return bool(x["past_slow_start"]) and x["steady_window_rtts"] >= 10

            def warned(x: dict[str, Any], warnings: list[str]) -> bool:
                return any(w.startswith(f"the {x['streams']}-stream probe ended")
                           for w in warnings)

            m, warnings = probes("--quick")
            assert not past(m[0]), f"2 s on a {DEEP_RTT:g}-ms path with a deep queue: {m[0]}"
            for x in m:
                assert warned(x, warnings) is not past(x), (x, warnings)
            m, warnings = probes("--max-probe-time", f"{limit:g}")
            for x in m:
                traffic = x["duration_s"] - x["setup_s"] - x["finish_s"]
                assert past(x) or traffic > limit - 0.5, (
                    f"{x['streams']}-stream probe ended after {traffic:.2f} s of at most "
                    f"{limit:g} while not past start-up", x)
                assert warned(x, warnings) is not past(x), (x, warnings)
    assert not probe_cgroups(), f"probe cgroups left: {probe_cgroups()}"


@pytest.mark.long
def test_bbr_senders_are_advised_from_the_capacity_share(tb: Testbed) -> None:
    """BBR does not follow the loss law, so its advice comes from the
    capacity share: the other traffic keeps the capacity less what our
    streams got. Checked against a measured run: 4 CUBIC flows alone, then
    beside one BBR stream; the advice's impact of 1 stream against no
    transfer (its goodput over the capacity) is within 0.25 of the CUBIC
    flows' measured loss. Both ways BBR is chosen are named in the output:
    --congestion bbr, and the default of the namespace probed from."""
    cross_flows = 4
    servers = [iperf.start_server(tb, p) for p in (5201, 5202)]
    cross = tb.popen("cross", iperf.client_argv(tb.addresses["receiver"], 5202,
                                                cross_flows, 120, "cubic"),
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with tbfix.killed_on_exit(cross, *servers):
        iperf.wait_past_slow_start(tb, "cross", 5202, cross_flows, cross)
        # Measured: the CUBIC flows' goodput alone, before anything of
        # ours ran. They fill the link: 4-s windows of it stayed within
        # 1% of each other, so 3 s read it.
        alone = iperf.cross_rate(tb, 3)

        res = subprocess.run(
            [sys.executable, "-m", "tamebpf", "advise", f"{tb.addresses['receiver']}:5201",
             "--max-impact", "30%", "--netns", tb.namespaces["sender"], "--congestion",
             "bbr", "--json"], capture_output=True, text=True, timeout=90)
        assert res.returncode == 0, (res.stdout[-2000:], res.stderr)
        out = json.loads(res.stdout)
        assert out["estimators"]["used"] == "share", out["estimators"]
        assert out["congestion"].startswith("bbr (--congestion)"), out["congestion"]
        share = out["share"]
        measured = [p for p in share["curve"] if p["measured"]]
        assert {p["streams"] for p in measured} >= {1, 10}, measured
        for p in measured:
            assert p["cross_mbps"] == pytest.approx(share["capacity_mbps"] - p["goodput_mbps"])
        predicted = share["curve"][0]["impact_vs_none"]

        # Then beside 1 BBR stream: past its start-up (within a second
        # at 20 ms; the CUBIC flows' share settled by the second's end),
        # 6 s that end before its first ProbeRTT (10 s in).
        bbr = tb.popen("sender", iperf.client_argv(tb.addresses["receiver"], 5201, 1, 12,
                                                   "bbr"),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with tbfix.killed_on_exit(bbr):
            iperf.wait_flows(tb, "sender", 5201, 1, bbr)
            time.sleep(2)
            beside = iperf.cross_rate(tb, 6)
        lost = 1 - beside / alone
        assert abs(predicted - lost) <= 0.25, (
            f"1 BBR stream: predicted to take {predicted:.0%} of the link from the "
            f"CUBIC flows, measured {lost:.0%} ({alone:.2f} -> {beside:.2f} Mbit/s)")

        # The last advise only has to name the namespace's default: on the
        # path without the cross flows its BBR probes need no third one.
        cross.kill()
        cross.wait()
        key = "net.ipv4.tcp_congestion_control"
        default = tb.exec("sender", ["sysctl", "-n", key]).strip()
        tb.exec("sender", ["sysctl", "-qw", f"{key}=bbr"])
        try:
            iperf.wait_for(lambda: iperf.server_idle(tb, 5201), 30.0, "the iperf3 server")
            res = subprocess.run(
                [sys.executable, "-m", "tamebpf", "advise", f"{tb.addresses['receiver']}:5201",
                 "--max-impact", "30%", "--netns", tb.namespaces["sender"], "--quick",
                 "--fresh"],
                capture_output=True, text=True, timeout=60)
        finally:  # the path's default again, for the module's next test on it (as
            # at its making, best effort: a namespace may set only an allowed one)
            tb.exec("sender", ["sysctl", "-qw", f"{key}={default}"], check=False)
        sender = tb.namespaces["sender"]
        assert f"bbr (the default of network namespace {sender}" in res.stdout, (
            res.stdout, res.stderr)
    assert not probe_cgroups(), f"probe cgroups left: {probe_cgroups()}"


def test_no_server_is_one_clear_line_and_nothing_left(short_path: Testbed) -> None:
    tb = short_path
    res = advise(tb, port=5999)
    # No server and no memory: no advice is possible (exit 3), and the line
    # names both ways to get some.
    one_clear_line(res, "iperf3 -s -p 5999", "tamebpf run", code=3)
    assert not probe_cgroups(), f"probe cgroups left: {probe_cgroups()}"


def test_busy_server_and_server_gone_mid_probe_are_clear_errors(short_path: Testbed) -> None:
    tb = short_path
    server = iperf.start_server(tb, 5201)
    with tbfix.killed_on_exit(server):
        # Another client holds the server: iperf3 runs one test at a time.
        other = tb.popen("cross", iperf.client_argv(tb.addresses["receiver"], 5201, 1, 8,
                                                    "cubic"),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with tbfix.killed_on_exit(other):
            iperf.wait_flows(tb, "cross", 5201, 1, other)
            one_clear_line(advise(tb), "busy", "5201")
        iperf.wait_for(lambda: iperf.server_idle(tb, 5201), 15.0, "server idle")
        # The server dies once the first probe's stream is up (not a fixed
        # time after start: under load advise may not have connected yet,
        # and a server that never answered is "no server", exit 3).
        proc = subprocess.Popen(
            [sys.executable, "-m", "tamebpf", "advise", f"{tb.addresses['receiver']}",
             "--max-impact", "10%", "--netns", tb.namespaces["sender"], "--duration", "4",
             "--congestion", "cubic"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        iperf.wait_for(lambda: proc.poll() is not None
                       or iperf.established(tb, "sender", 5201) > 1, 30.0,
                       "the first probe's stream")
        time.sleep(0.5)
        server.kill()
        out, err = proc.communicate(timeout=30)
        one_clear_line(subprocess.CompletedProcess(proc.args, proc.returncode, out, err),
                       "iperf3", "5201")
    assert not probe_cgroups(), f"probe cgroups left: {probe_cgroups()}"


def test_capacity_anchors_the_fit_among_cross_traffic(tb: Testbed) -> None:
    """4 CUBIC cross flows share the 20 Mbit/s bottleneck; given its rate,
    advise turns it into goodput with the kernel's MSS and the probes put
    about 4 competing flows on it."""
    cross_flows = 4
    servers = [iperf.start_server(tb, p) for p in (5201, 5202)]
    cross = goodput(tb, "cross", cross_flows, seconds=20, port=5202)
    with tbfix.killed_on_exit(cross, *servers):
        # The cross traffic settles first, as on a real path.
        iperf.wait_past_slow_start(tb, "cross", 5202, cross_flows, cross)
        res = advise(tb, "--json", "--capacity", f"{RATE:g}M")
        assert res.returncode == 0, res.stderr
        out = json.loads(res.stdout)
        cap = out["capacity"]
        assert cap["link_mbps"] == RATE and cap["used"], cap
        assert cap["goodput_mbps"] == pytest.approx(CAPACITY), "MSS 1448, 1514-byte frames"
        assert out["estimators"]["used"] == "capacity"
        assert out["estimators"]["capacity"]["advice"] == out["advice"]
        assert out["asymptote_mbps"] == pytest.approx(CAPACITY)
        assert 0.5 * cross_flows <= cap["competing_flows"] <= 2 * cross_flows, (
            f"competing flows {cap['competing_flows']:.1f}, {cross_flows} running; "
            f"probes {[x['goodput_mbps'] for x in out['measurements']]} Mbit/s")
    assert not probe_cgroups(), f"probe cgroups left: {probe_cgroups()}"


BAD_ARGUMENTS = (
    ["h", "--max-impact", "150%"], ["h:0", "--max-impact", "5%"],
    ["h", "--max-impact", "5%", "--probes", "4,2"],
    ["h", "--max-impact", "5%", "--duration", "2,x"],
    ["h", "--max-impact", "5%", "--duration", "0.1"],
    ["h", "--max-impact", "5%", "--quick", "--duration", "2"],
    ["h", "--max-impact", "5%", "--quick", "--max-probe-time", "5"],
    ["h", "--max-impact", "5%", "--plot", "x.jpg"],
    ["h", "--max-impact", "5%", "--capacity", "0"],
    ["h", "--max-impact", "5%", "--capacity", "fast"])


def test_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    # The command itself once: what its entry point prints of a bad argument.
    res = subprocess.run([sys.executable, "-m", "tamebpf", "advise", *BAD_ARGUMENTS[0]],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 2, f"{BAD_ARGUMENTS[0]}: exit {res.returncode}, {res.stderr}"
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    # The others through the same main() in this process: the same checks and
    # messages, without a Python start-up each (a second of CPU apiece).
    for argv in BAD_ARGUMENTS[1:]:
        try:
            code = main(["advise", *argv])
        except SystemExit as exited:
            code = exited.code
        err = capsys.readouterr().err
        assert code == 2, f"{argv}: exit {code}, {err}"
        assert len(err.strip().splitlines()) == 1, err


def test_not_root_gets_one_clear_line() -> None:
    """Unprivileged, advise stops before it creates a cgroup or sends a
    packet: one line naming sudo, exit 1, no traceback."""
    res = run_as_user("advise", "198.18.3.2", "--max-impact", "5%")
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 1, f"exit code {res.returncode}, stderr {res.stderr!r}"
    assert len(lines) == 1 and "needs root" in lines[0] and "sudo" in lines[0], lines

"""advise/pathrtt.py on the WAN testbed: the RTT check before the probes
measures the path's RTT through its delay stage, takes a fraction of a
second, and is an ordinary test to the iperf3 server (no error there, and
the next probe is served); advisor order "by-rtt" then probes a short path
with the larger count first."""

from __future__ import annotations

import pytest

from tamebpf.advise.advisor import SHORT_PATH_SRTT_US, run_advice
from tamebpf.advise.pathrtt import path_rtt
from tamebpf.advise.probes import run_probe
from tamebpf.advise.record import Target
from tamebpf.model import Settings
from tamebpf.testbed import iperf
from tests.integration import conftest_testbed as tbfix
from tests.integration.test_advise import probe_cgroups

pytestmark = pytest.mark.root

RTT_MS = 20.0  # a short path: by-rtt's larger-first side


def test_the_rtt_check_measures_the_path_and_leaves_the_server_serving() -> None:
    with tbfix.running_testbed(rate_mbit=50.0, rtt_ms=RTT_MS, queue_pkts=50, cc="cubic") as tb:
        server = iperf.start_server(tb, 5201, capture=True)
        with tbfix.killed_on_exit(server):
            target = Target(tb.addresses["receiver"], 5201, tb.namespaces["sender"], "cubic")
            check = path_rtt(target)
            # Through the delay stage and an idle queue: the base RTT, and
            # not the 300 ms of a resent SYN.
            assert RTT_MS * 1000 <= check.srtt_us < 2 * RTT_MS * 1000, check
            assert check.seconds < 2.0, check
            probe = run_probe(target, 1, 1.0, srtt_us=check.srtt_us)
            assert probe.steady.goodput_mbps > 1.0, probe
            r = run_advice(target, Settings(max_impact=0.1), max_probe_s=6.0, order="by-rtt")
            assert r.rtt_check is not None and 0 < r.rtt_check.srtt_us <= SHORT_PATH_SRTT_US
            assert r.probes[0].streams == 10, [p.streams for p in r.probes]
            server.kill()
            log = server.communicate(timeout=5)[0].decode(errors="replace")
        assert "error" not in log.lower(), log
    assert not probe_cgroups(), f"probe cgroups left: {probe_cgroups()}"

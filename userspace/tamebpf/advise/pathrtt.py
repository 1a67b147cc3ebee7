"""The path's RTT before any probe: an iperf3 test that sends nothing.

advisor.run_advice(order="by-rtt") picks the order of its probes by it. The
RTT is the control connection's handshake as the SYN timeout program learns
it (kernel/synrto.py), the same `path_srtt_us` every probe records, so it
includes the queue the other traffic keeps at that moment. The test is a
whole one (cookie, parameters, one data connection, results), so the server
sees an ordinary client; it costs the set-up and the result exchange, a few
round trips.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from tamebpf import iperf3_client
from tamebpf.advise.probes import CONNECT_TIMEOUT_MS, FIRST_SYN_RTO_US, probe_failure_hint
from tamebpf.advise.record import PathRtt, Target
from tamebpf.errors import TamebpfError
from tamebpf.kernel.probe import Say, Work, probe_cgroup, spawn
from tamebpf.kernel.synrto import SynRto


def _silent_test(target: Target) -> Work:
    def work(say: Say, stop: Callable[[int], bool]) -> dict[str, Any]:
        try:
            iperf3_client.run_stages(target.host, target.port, [(1, 0.0)], None,
                                     CONNECT_TIMEOUT_MS / 1000)
        except iperf3_client.Iperf3Error as err:
            return {"error": str(err)}
        return {"done": True}

    return work


def path_rtt(target: Target) -> PathRtt:
    """The RTT of the path to `target` now, from a test that sends no data."""
    t0 = time.monotonic()
    report: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        cg = stack.enter_context(probe_cgroup(1))
        syn_rto = stack.enter_context(SynRto(cg, 0, FIRST_SYN_RTO_US))
        child = spawn(_silent_test(target), cg, target.netns)
        deadline = t0 + 2 * CONNECT_TIMEOUT_MS / 1000 + 2
        try:
            while not report and time.monotonic() < deadline:
                for msg in child.lines():
                    report = msg
                if not report:
                    child.wait_for_line(0.1)
            if report:
                child.reap()
        finally:
            child.close(kill=not report)
        srtt_us = syn_rto.state().srtt_us
    if not report:
        raise TamebpfError(f"the RTT check to {target.host}:{target.port} did not finish in "
                           f"{deadline - t0:.0f} s", "is the path still up?")
    if "error" in report:
        raise TamebpfError(f"iperf3 RTT check to {target.host}:{target.port} failed: "
                           f"{report['error']}", probe_failure_hint(report["error"], target))
    return PathRtt(srtt_us, time.monotonic() - t0)

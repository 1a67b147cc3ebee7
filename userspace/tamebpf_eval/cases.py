"""A case of the evaluations: a bottleneck on the WAN testbed, its queue,
our congestion control and m cross flows, uploads or downloads (ours and
theirs alike), brought up with both iperf3 servers and the cross traffic
running (case_path), as every draw measures it. The cross traffic starts
once and runs through the whole case, as the traffic of other users does on
a real path (truth.py says why).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

from tamebpf.estimate.record import Target
from tamebpf_eval.truth import start_cross
from tamebpf_testbed import Testbed, iperf, teardown
from tamebpf_testbed.iperf import cross_rate

CROSS_WARMUP_S = 5.0
FRAME_BYTES = 1514  # a queue's length in frames of a full segment


@dataclass(frozen=True)
class Case:
    name: str
    rate: float
    rtt: float
    queue: int
    aqm: str
    cc: str
    cross: int
    cross_rtt: float | None = None  # the cross traffic's own RTT; None: the same as ours
    cross_cc: str | None = None  # the cross traffic's congestion control; None: ours
    rate_back: float | None = None  # the back link's rate; None: the same as `rate`
    # "download": the receiver's servers send (iperf3 -R), through the back
    # link, and cc is theirs, ours and the cross traffic's alike.
    direction: str = "upload"

    @property
    def reverse(self) -> bool:
        return self.direction == "download"

    @property
    def key(self) -> str:
        if self.cross_cc is None:
            return f"{self.name}/{self.cc}/m={self.cross}"
        return f"{self.name}/{self.cc}-vs-{self.cross_cc}/m={self.cross}"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def case_path(case: Case, prefix: str) -> Iterator[tuple[Testbed, float | None, Target]]:
    """A testbed for the case with both iperf3 servers up and, when the case
    has any, its cross traffic running: (testbed, the cross traffic's rate
    alone or None, the advisor's target). Torn down on every way out."""
    name = prefix + os.urandom(2).hex()
    tb = Testbed.up(name, case.rate, case.rtt, case.queue, aqm=case.aqm, cc=case.cc,
                    cross_rtt_ms=case.cross_rtt, rate_back_mbit=case.rate_back)
    procs = []
    try:
        procs = [iperf.start_server(tb, p) for p in (iperf.PORT_MAIN, iperf.PORT_CROSS)]
        reference = None
        if case.cross:
            procs.append(start_cross(tb, case.cross, case.cross_cc or case.cc, CROSS_WARMUP_S,
                                     case.reverse))
            reference = cross_rate(tb, 3.0, case.reverse)
            log(f"  cross traffic alone: {reference:.2f} Mbit/s")
        yield tb, reference, Target(tb.addresses["receiver"], iperf.PORT_MAIN,
                                    tb.namespaces["sender"], case.cc,
                                    "receive" if case.reverse else "send")
    finally:
        for proc in reversed(procs):
            proc.kill()
            proc.wait()
        teardown(name)

"""The path's capacity from the run's own ACKs.

The advisor's ACK log (kernel/acktrain.py) marks the connections opened
from a cgroup and logs the arrival of every ACK that advances them, host
wide, while it is attached. The run attaches it to its cgroup before CMD
starts (it marks connections when they are established) and detaches it
after WINDOW_S: the transfer's first seconds, slow start included, and
nothing per packet after that.

The estimate (estimate/acktrain.highest_band, the transfers' own: the
advisor's trust rule, climbing past the lower peaks that its streams
interleaving with each other and with other traffic put below the link's
rate, and not trusted far above what the transfer got through:
estimate/reach.py) reads only the pairs at or above the transfer's own goodput, so
segments the pace cap spaced (each stream's share, below the group's
goodput when it has 2 streams or more) do not count: what is left is the
bottleneck's spacing of segments sent faster than it, which needs a cap
above the path (`--rate`). The following cap takes the capacity from
here when path memory has none and its scout's ACKs (the one stream it
does not pace) gave none; when the cap held the streams, only the scout
can give it (cap/scoutacks.py).

CMD may download: the data its connections receive is logged beside the
ACKs they get, and the destination's direction says which log is read.
"""

from __future__ import annotations

from collections.abc import Sequence

from tamebpf.estimate.acktrain import CapacityEstimate, highest_band, pair_rates
from tamebpf.estimate.reach import peak_acked_mbps, reach_refused
from tamebpf.kernel.acktrain import AckTrain
from tamebpf.paths.passive import RECEIVED_METHOD, MeasuredCapacity

WINDOW_S = 5.0  # the ACKs of the transfer's first seconds
# A destination not known by then (CMD started slowly): wait this much longer at most.
WAIT_FOR_DEST_S = 10.0


class FirstAcks:
    """The ACK and data logs of the run's first WINDOW_S, one read once."""

    def __init__(self, cgroup: str, now: float) -> None:
        self.trains: dict[str, AckTrain] = {}
        try:
            self.trains["send"] = AckTrain(cgroup)
            self.trains["receive"] = AckTrain(cgroup, receive=True)
        except BaseException:
            self.close()
            raise
        self.opened = now
        self.estimate: CapacityEstimate | None = None

    @property
    def pending(self) -> bool:
        """Whether the logs are attached still, not read."""
        return bool(self.trains)

    def due(self, now: float, have_dest: bool) -> bool:
        """Whether to read now (or give up: no destination in time)."""
        if not self.trains:
            return False
        waited = now - self.opened
        return waited >= WINDOW_S and (have_dest or waited >= WINDOW_S + WAIT_FOR_DEST_S)

    def read(self, cookies: Sequence[int], goodput_mbps: float, mss: int,
             direction: str = "send") -> CapacityEstimate:
        """The estimate from the ACKs (receiving: the data) of these
        connections (the destination's) above their goodput; the logs are
        detached."""
        assert self.trains
        try:
            log = self.trains[direction].read()
        finally:
            self.close()
        mine = log.only(cookies) if cookies else log
        if cookies and not mine.flows:
            what = "data segment" if direction == "receive" else "ACK"
            self.estimate = CapacityEstimate(None, None, None, 0, 0, False,
                                             f"no {what} logged for the destination's streams")
        else:
            self.estimate = reach_refused(highest_band(pair_rates(mine, mss), goodput_mbps),
                                          peak_acked_mbps(mine))
        return self.estimate

    def close(self) -> None:
        for train in self.trains.values():
            train.close()
        self.trains = {}


def measured(e: CapacityEstimate | None, direction: str = "send") -> MeasuredCapacity | None:
    """A trusted estimate as path memory takes it."""
    if e is None or not e.trusted or e.goodput_mbps is None:
        return None
    if direction == "receive":
        return MeasuredCapacity(e.goodput_mbps, e.low_mbps, e.high_mbps, RECEIVED_METHOD)
    return MeasuredCapacity(e.goodput_mbps, e.low_mbps, e.high_mbps)

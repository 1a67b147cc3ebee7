"""Synthetic flows and transfers for the watch and export unit tests (helpers
only, no tests: imported by test_groups, test_watch*, test_export*)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from tamebpf.common.records import Cap, Flow

SECOND = 1_000_000_000


def make_flow(cookie: int, **kw: Any) -> Flow:
    """An established flow with every counter at 0 unless given."""
    base: dict[str, Any] = dict(
        cookie=cookie, pid=100, comm="iperf3", cgroup_id=1, cgroup="/test", family="ipv4",
        local_addr="10.0.0.1", local_port=40000 + cookie % 20000, remote_addr="10.0.0.2",
        remote_port=5201, state="ESTABLISHED", closed=False, congestion_control="cubic",
        srtt_us=20_000, rttvar_us=1000, min_rtt_us=19_000, segs_out=0, segs_in=0,
        data_segs_out=0, data_segs_in=0, total_retrans=0, retrans_out=0, lost_out=0,
        bytes_acked=0, bytes_received=0, bytes_sent=0, bytes_retrans=0, snd_cwnd=10,
        snd_ssthresh=None, snd_wnd=65535, delivered=0, mss=1448, delivery_rate_bps=None,
        loss_rate=None,
        age_s=None, netns=4026531840, read_monotonic_ns=0,
    )
    base.update(kw)
    if "direction" not in kw:  # as the kernel reader says it: by the whole life's bytes
        base["direction"] = "receive" if base["bytes_received"] > base["bytes_acked"] else "send"
    return Flow(**base)


@dataclass
class Transfer:
    """A sender with n streams toward one destination at a given aggregate
    rate and loss; step() advances it by one interval and returns its flows.
    With `receive`, a download: the streams receive at that rate (srtt_us
    is then the receiver's RTT; the handshake's stays at 1 ms)."""

    streams: int
    mbps: float
    loss: float = 0.0
    srtt_us: int = 20_000
    comm: str = "iperf3"
    remote: str = "10.0.0.2"
    cgroup: str = "/test"
    cc: str = "cubic"
    next_cookie: int = 1000
    receive: bool = False
    flows: dict[int, Flow] = field(default_factory=dict)
    closing: list[Flow] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.set_streams(self.streams)

    def set_streams(self, n: int) -> None:
        """Open or close flows (closed ones are reported once, as the kernel does)."""
        while len(self.flows) < n:
            cookie = self.next_cookie
            self.next_cookie += 1
            rtts = {"srtt_us": 1000, "rcv_rtt_us": self.srtt_us} if self.receive else \
                {"srtt_us": self.srtt_us}
            self.flows[cookie] = make_flow(cookie, comm=self.comm, remote_addr=self.remote,
                                           cgroup=self.cgroup, congestion_control=self.cc,
                                           direction="receive" if self.receive else "send",
                                           **rtts)
        while len(self.flows) > n:
            cookie = max(self.flows)
            f = self.flows.pop(cookie)
            self.closing.append(replace(f, closed=True, state="CLOSE"))
        self.streams = n

    def step(self, seconds: float, now_ns: int) -> list[Flow]:
        per_flow = int(self.mbps * 1e6 / 8 * seconds / max(1, len(self.flows)))
        segs = max(1, per_flow // 1448)
        retrans = round(segs * self.loss)
        for cookie, f in self.flows.items():
            if self.receive:
                self.flows[cookie] = replace(
                    f, bytes_received=f.bytes_received + per_flow,
                    data_segs_in=f.data_segs_in + segs, segs_in=f.segs_in + segs,
                    segs_out=f.segs_out + segs // 2, read_monotonic_ns=now_ns)
                continue
            self.flows[cookie] = replace(
                f,
                bytes_acked=f.bytes_acked + per_flow,
                bytes_sent=f.bytes_sent + per_flow + retrans * 1448,
                bytes_retrans=f.bytes_retrans + retrans * 1448,
                data_segs_out=f.data_segs_out + segs + retrans,
                segs_out=f.segs_out + segs + retrans,
                segs_in=f.segs_in + segs // 2,
                total_retrans=f.total_retrans + retrans,
                read_monotonic_ns=now_ns,
            )
        out = list(self.flows.values()) + self.closing
        self.closing = []
        return out


def cap_record(**kw: object) -> Cap:
    """A cap as the kernel's cap table reports it (records.Cap), with defaults."""
    base: dict[str, object] = dict(
        id=1, cgroup="/transfer.slice", cgroup_id=77, cgroup_exists=True,
        dest="198.18.0.0/15", family="ipv4", port=None, max_streams=8, streams=3,
        refused=12, charged=15, seeded=0, released=12)
    base.update(kw)
    return Cap(**base)  # type: ignore[arg-type]

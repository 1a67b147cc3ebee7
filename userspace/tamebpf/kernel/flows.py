"""Per-flow TCP telemetry read from the kernel (bpf/flows.bpf.c).

`FlowReader` keeps the BPF programs attached for as long as it is open, so a
live view reads many snapshots through one handle without reloading: each
`snapshot()` is one pass of the TCP iterator plus a drain of flows that
closed since the previous call.
"""

from __future__ import annotations

import ctypes
import ipaddress
import os
import socket
import struct
import time
from collections.abc import Sequence
from typing import Any, overload

from tamebpf.common.errors import TamebpfError
from tamebpf.common.records import Flow, FlowChanges, ReaderStats
from tamebpf.kernel import native, preflight
from tamebpf.kernel.abi import (
    TB_FLOW_CLOSED,
    TB_FLOW_FORMAT,
    TB_FLOW_OWNER_KNOWN,
    TB_FLOW_START_KNOWN,
    TbFlow,
    TbFlowsStats,
)
from tamebpf.kernel.cgroups import Cgroup, CgroupNames, resolve
from tamebpf.kernel.handle import NativeHandle
from tamebpf.kernel.netns import open_netns

__all__ = ["Flow", "FlowReader", "ReaderStats", "flow_from_record", "flow_row"]

TCP_STATES = {
    1: "ESTABLISHED", 2: "SYN_SENT", 3: "SYN_RECV", 4: "FIN_WAIT1", 5: "FIN_WAIT2",
    6: "TIME_WAIT", 7: "CLOSE", 8: "CLOSE_WAIT", 9: "LAST_ACK", 10: "LISTEN",
    11: "CLOSING", 12: "NEW_SYN_RECV",
}
# tcp_sock fields that hold these values mean "not measured yet".
NO_MIN_RTT = 0xFFFFFFFF
INFINITE_SSTHRESH = 0x7FFFFFFF


V4_MAPPED = bytes(10) + b"\xff\xff"


# Addresses repeat (a server's own, its busy peers): each is made text once.
_ADDR_CACHE: dict[tuple[int, bytes], tuple[str, str]] = {}
_CACHE_MAX = 1 << 16


def _addr(family: int, raw: Any) -> tuple[str, str]:
    key = (family, bytes(raw))
    hit = _ADDR_CACHE.get(key)
    if hit is None:
        if len(_ADDR_CACHE) >= _CACHE_MAX:
            _ADDR_CACHE.clear()
        hit = _ADDR_CACHE[key] = _addr_text(family, key[1])
    return hit


def _addr_text(family: int, data: bytes) -> tuple[str, str]:
    # inet_ntop, not ipaddress: this runs for every new address of a snapshot
    # and is ten times faster; both print RFC 5952 text.
    if family == socket.AF_INET:
        return "ipv4", socket.inet_ntop(socket.AF_INET, data[:4])
    if data[:12] == V4_MAPPED:
        return "ipv4", socket.inet_ntop(socket.AF_INET, data[12:16])
    if data[:12] == bytes(12):
        # ::1 and the old IPv4-compatible form: glibc writes ::a.b.c.d where
        # RFC 5952 (and ipaddress, as before) writes hex.
        return "ipv6", str(ipaddress.IPv6Address(data))
    return "ipv6", socket.inet_ntop(socket.AF_INET6, data)


# Process names and congestion controls repeat: one str each, shared by
# every flow that has it (a view of 100k flows keeps them all).
_TEXT_CACHE: dict[bytes, str] = {}


def _text(raw: bytes) -> str:
    hit = _TEXT_CACHE.get(raw)
    if hit is None:
        if len(_TEXT_CACHE) >= _CACHE_MAX:
            _TEXT_CACHE.clear()
        hit = _TEXT_CACHE[raw] = raw.split(b"\0", 1)[0].decode(errors="replace")
    return hit


# One struct.unpack per record instead of a ctypes attribute read per field:
# a snapshot of 100k flows is decoded in a fraction of the time.
_RECORD = struct.Struct(TB_FLOW_FORMAT)
RECORD_SIZE = _RECORD.size


def flow_from_record(rec: TbFlow, names: CgroupNames | None, now_ns: int) -> Flow:
    return flow_from_bytes(bytes(rec), 0, names, now_ns)


def flow_from_bytes(buf: Any, offset: int, names: CgroupNames | None, now_ns: int) -> Flow:
    """The record at `offset` of `buf` (bytes or a buffer of tb_flow) as a Flow."""
    return Flow(*flow_row(buf, offset, names, now_ns))


def flow_row(buf: Any, offset: int, names: CgroupNames | None, now_ns: int
             ) -> tuple[Any, ...]:
    """The record at `offset` of `buf` as Flow's values in FLOW_JSON_ORDER:
    `flows --json` writes these tuples without a dict or a Flow for each."""
    (cookie, cgroup_id, start_ns, update_ns, bytes_acked, bytes_received, bytes_sent,
     bytes_retrans, segs_out, segs_in, data_segs_out, data_segs_in, total_retrans,
     retrans_out, lost_out, srtt_us, rttvar_us, min_rtt_us, snd_cwnd, snd_ssthresh, mss,
     rate_delivered, rate_interval_us, snd_wnd, delivered, cong_events, pid, netns_ino,
     rcv_rtt_us, rcv_ooopack, family_no, sport, dport, state, flags, saddr, daddr, comm,
     cc) = _RECORD.unpack_from(buf, offset)
    family, local = _addr(family_no, saddr)
    _, remote = _addr(family_no, daddr)
    owner = bool(flags & TB_FLOW_OWNER_KNOWN)
    rate = None
    if rate_delivered and rate_interval_us:
        # As tcp_info's delivery rate: segments x MSS over the sample interval.
        rate = rate_delivered * mss * 8 * 1_000_000 // rate_interval_us
    has_rtt = srtt_us > 0
    # FLOW_JSON_ORDER, Flow's own order (a unit test holds the two together).
    return (
        cookie,
        pid if owner else None,  # pid
        _text(comm) if owner else None,  # comm
        cgroup_id,
        names.name(cgroup_id) if names else None,  # cgroup
        family,
        local,  # local_addr
        sport,  # local_port
        remote,  # remote_addr
        dport,  # remote_port
        TCP_STATES.get(state, str(state)),  # state
        _text(cc) or None,  # congestion_control
        srtt_us if has_rtt else None,  # srtt_us
        rttvar_us if has_rtt else None,  # rttvar_us
        min_rtt_us if min_rtt_us not in (0, NO_MIN_RTT) else None,  # min_rtt_us
        segs_out,
        data_segs_out,
        total_retrans,
        bytes_acked,
        bytes_received,
        snd_cwnd,
        snd_ssthresh if snd_ssthresh < INFINITE_SSTHRESH else None,  # snd_ssthresh
        mss,
        rate,  # delivery_rate_bps
        (now_ns - start_ns) / 1e9 if flags & TB_FLOW_START_KNOWN else None,  # age_s
        bool(flags & TB_FLOW_CLOSED),  # closed
        segs_in,
        data_segs_in,
        retrans_out,
        lost_out,
        bytes_sent,
        bytes_retrans,
        snd_wnd,
        delivered,
        total_retrans / data_segs_out if data_segs_out else None,  # loss_rate
        netns_ino,  # netns
        update_ns,  # read_monotonic_ns
        cong_events,
        rcv_rtt_us or None,  # rcv_rtt_us
        rcv_ooopack,
        "receive" if bytes_received > bytes_acked else "send",  # direction
    )


FLAGS_OFFSET = TbFlow.flags.offset


class _Decoded(Sequence[Flow]):
    """The changed records of one read, made into Flow objects one at a time
    as they are used: the first refresh of 100k flows then never holds 100k
    Flow objects at once. Valid until the reader's next read."""

    def __init__(self, buf: memoryview, offsets: list[int], names: CgroupNames,
                 now_ns: int) -> None:
        self._buf, self._offsets, self._names, self._now = buf, offsets, names, now_ns

    def __len__(self) -> int:
        return len(self._offsets)

    @overload
    def __getitem__(self, i: int) -> Flow: ...

    @overload
    def __getitem__(self, i: slice) -> list[Flow]: ...

    def __getitem__(self, i: int | slice) -> Flow | list[Flow]:
        if isinstance(i, slice):
            return [flow_from_bytes(self._buf, off, self._names, self._now)
                    for off in self._offsets[i]]
        return flow_from_bytes(self._buf, self._offsets[i], self._names, self._now)


class FlowReader(NativeHandle):
    """Attach flow telemetry for a cgroup subtree; read snapshots; detach.

    Use as a context manager so the programs are detached on every exit path.
    """

    _open_fn, _close_fn = "tb_flows_open", "tb_flows_close"
    _closed_text = "flow reader is closed"

    def __init__(
        self,
        cgroup: str | None = None,
        netns: Sequence[str] = (),
        closed_max: int = 0,
        verbose: bool = False,
        command: str = "flows",
    ) -> None:
        root = preflight.check(command, needs_netns=bool(netns))
        self.names = CgroupNames(root)
        self.cgroup: Cgroup | None = resolve(cgroup) if cgroup else None
        super().__init__()
        self._diff: int | None = None  # tb_flowdiff, made by the first changes()
        self._lib.tb_set_verbose(1 if verbose else 0)
        fds = []
        try:
            for name in netns:
                fds.append(open_netns(name))
            arr = (ctypes.c_int * max(1, len(fds)))(*fds)
            # The root cgroup means "everything": no filter in the kernel.
            cg = self.cgroup if self.cgroup and self.cgroup.level > 0 else None
            self._open(cg.id if cg else 0, cg.level if cg else 0, closed_max, arr, len(fds))
        finally:
            for fd in fds:
                os.close(fd)

    def close(self) -> None:
        if self._diff is not None:
            self._lib.tb_flowdiff_free(self._diff)
            self._diff = None
        super().close()

    def records(self) -> list[TbFlow]:
        """Raw records of one snapshot (copies, safe to keep)."""
        ptr = ctypes.POINTER(TbFlow)()
        count = ctypes.c_size_t()
        err = self._lib.tb_flows_snapshot(self._live(), ctypes.byref(ptr), ctypes.byref(count))
        if err:
            raise TamebpfError(native.last_error(self._lib))
        return [TbFlow.from_buffer_copy(ptr[i]) for i in range(count.value)]

    def snapshot(self) -> list[Flow]:
        buf = self._read()
        now = time.monotonic_ns()
        return [flow_from_bytes(buf, off, self.names, now)
                for off in range(0, len(buf), RECORD_SIZE)]

    def snapshot_rows(self) -> list[tuple[Any, ...]]:
        """snapshot() as tuples in FLOW_JSON_ORDER (flow_row), for `flows --json`."""
        buf = self._read()
        now = time.monotonic_ns()
        return [flow_row(buf, off, self.names, now) for off in range(0, len(buf), RECORD_SIZE)]

    def _read(self) -> memoryview:
        """One snapshot's records as a view of the library's buffer (valid
        until the next read)."""
        ptr = ctypes.POINTER(TbFlow)()
        count = ctypes.c_size_t()
        err = self._lib.tb_flows_snapshot(self._live(), ctypes.byref(ptr), ctypes.byref(count))
        if err:
            raise TamebpfError(native.last_error(self._lib))
        return self._view(ptr, count.value)

    @staticmethod
    def _view(ptr: Any, count: int) -> memoryview:
        if not count:
            return memoryview(b"")
        return memoryview((ctypes.c_char * (count * RECORD_SIZE)).from_address(
            ctypes.addressof(ptr.contents))).cast("B")

    def changes(self) -> FlowChanges:
        """One snapshot as what changed since the previous `changes()` (the
        library compares the records): only those become Flow objects. Do not
        mix with snapshot() on one reader: each takes the closed flows."""
        ptr = ctypes.POINTER(TbFlow)()
        count = ctypes.c_size_t()
        err = self._lib.tb_flows_snapshot(self._live(), ctypes.byref(ptr), ctypes.byref(count))
        if err:
            raise TamebpfError(native.last_error(self._lib))
        if self._diff is None:
            self._diff = self._lib.tb_flowdiff_new()
            if not self._diff:
                raise TamebpfError("out of memory comparing flow snapshots")
        idx = ctypes.POINTER(ctypes.c_uint32)()
        van = ctypes.POINTER(ctypes.c_uint64)()
        n_idx, n_van, read_ns = ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_uint64()
        err = self._lib.tb_flowdiff_update(self._diff, ptr, count, ctypes.byref(idx),
                                           ctypes.byref(n_idx), ctypes.byref(van),
                                           ctypes.byref(n_van), ctypes.byref(read_ns))
        if err:
            raise TamebpfError("out of memory comparing flow snapshots")
        now = time.monotonic_ns()
        buf = self._view(ptr, count.value)
        offsets = [i * RECORD_SIZE for i in idx[:n_idx.value]]
        closed = sum(buf[off + FLAGS_OFFSET] & TB_FLOW_CLOSED for off in offsets)
        return FlowChanges(_Decoded(buf, offsets, self.names, now), van[:n_van.value],
                           count.value - closed, read_ns.value or now)

    def stats(self) -> ReaderStats:
        st = TbFlowsStats()
        fill, cap = ctypes.c_uint32(), ctypes.c_uint32()
        self._lib.tb_flows_stats(self._live(), ctypes.byref(st), ctypes.byref(fill),
                                 ctypes.byref(cap))
        return ReaderStats(st.closed_recorded, st.closed_dropped, st.owners_dropped,
                           fill.value, cap.value)

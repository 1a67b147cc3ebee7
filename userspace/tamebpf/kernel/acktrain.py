"""ACK arrival log of some connections (bpf/acktrain.bpf.c).

Attached to the advisor's probe cgroup while a probe runs (AckTrain), or to
a few established connections while `export` samples them (AckTrain.window):
every ACK that advances one of them is logged with its arrival time, which
is what the capacity estimate (estimate/acktrain.py) reads. With
receive=True the connections receive (a download): their data segments'
arrivals are logged in the ACKs' place, and `rx()` counts what they showed
of the sender's losses. Closing detaches the programs and drops the marks;
nothing is pinned. How often a path may have a window (WindowsPerHour) is
kept here too, for export's sampler and the scouts' windows alike; that
part is pure.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Hashable, Sequence
from typing import Generic, Protocol, TypeVar

from tamebpf.common.records import AckLog, RxCounts
from tamebpf.kernel.abi import TB_ACK_FLOWS_MAX, TB_ACKS_MAX, TbAck
from tamebpf.kernel.handle import NativeHandle
from tamebpf.kernel.netns import open_netns


class AckTrain(NativeHandle):
    """Log the ACKs of connections opened from `cgroup` (a path) until closed."""

    _open_fn, _close_fn = "tb_acktrain_open", "tb_acktrain_close"
    _closed_text = "probe ACK log is detached"

    def __init__(self, cgroup: str, receive: bool = False) -> None:
        super().__init__()
        self.receive = receive
        self._open(cgroup.encode(), int(receive))

    def rx(self) -> dict[int, RxCounts]:
        """Receive mode: each connection's counts so far, by cookie."""
        handle = self._live()
        counts = self._lib.tb_acktrain_rx(handle)
        cookies = ctypes.POINTER(ctypes.c_uint64)()
        flows = ctypes.c_uint32()
        self._lib.tb_acktrain_read(handle, ctypes.byref(ctypes.POINTER(TbAck)()),
                                   ctypes.byref(ctypes.c_uint64()), ctypes.byref(cookies),
                                   ctypes.byref(flows))
        return {cookies[i]: RxCounts(counts[i].segs, counts[i].episodes, counts[i].fills,
                                     counts[i].dups) for i in range(flows.value)}

    def read(self) -> AckLog:
        """The ACKs logged so far, by connection cookie."""
        handle = self._live()
        acks = ctypes.POINTER(TbAck)()
        seen = ctypes.c_uint64()
        cookies = ctypes.POINTER(ctypes.c_uint64)()
        flows = ctypes.c_uint32()
        self._lib.tb_acktrain_read(handle, ctypes.byref(acks), ctypes.byref(seen),
                                   ctypes.byref(cookies), ctypes.byref(flows))
        kept = min(seen.value, TB_ACKS_MAX)
        # One copy out of the live mmap, then plain Python from there on.
        raw: ctypes.Array[TbAck] | list[TbAck] = \
            (TbAck * kept).from_address(ctypes.addressof(acks.contents)) if kept else []
        by_flow: dict[int, list[tuple[int, int]]] = {}
        names = [cookies[i] for i in range(flows.value)]
        for a in raw:
            if a.flow < len(names):
                by_flow.setdefault(names[a.flow], []).append((a.t_ns, a.ack_seq))
        return AckLog(by_flow, seen.value - kept)


class AckWindow(AckTrain):
    """Log the ACKs of established connections, by cookie (the first
    TB_ACK_FLOWS_MAX), of network namespace `netns` (None: ours) until
    closed: `export`'s sampling window. They are marked once, when it opens."""

    _open_fn = "tb_acktrain_window_open"
    _closed_text = "ACK sampling window is closed"

    def __init__(self, cookies: Sequence[int], netns: str | None = None,
                 receive: bool = False) -> None:
        NativeHandle.__init__(self)
        self.receive = receive
        wanted = list(cookies)[:TB_ACK_FLOWS_MAX]
        fd = -1 if netns is None else open_netns(netns)
        try:
            self._open((ctypes.c_uint64 * len(wanted))(*wanted), len(wanted), fd,
                       int(receive))
        finally:
            if fd >= 0:
                os.close(fd)


class AckLogHandle(Protocol):
    """An open ACK log (AckTrain, AckWindow), or a test's stand-in."""

    def read(self) -> AckLog: ...

    def close(self) -> None: ...


# What opens a window: cookies, the network namespace (None: ours), whether
# they receive (their data, not their ACKs, is logged) -> its log.
OpenWindow = Callable[[Sequence[int], "str | None", bool], AckLogHandle]


HOUR_S = 3600.0
WINDOWS_PER_HOUR = 3  # per path: a window that gave nothing is not retried at once

K = TypeVar("K", bound=Hashable)


class WindowsPerHour(Generic[K]):
    """At most `per_hour` windows on each path (any key) in any hour: the
    bound export's sampler and the scouts' windows keep. No clock: callers
    pass `now` (time.monotonic())."""

    def __init__(self, per_hour: int = WINDOWS_PER_HOUR) -> None:
        self.per_hour = per_hour
        self._opened: dict[K, list[float]] = {}

    def count(self, key: K, now: float) -> int:
        """Windows opened on `key` in the hour before `now`."""
        return sum(1 for t in self._opened.get(key, ()) if now - t < HOUR_S)

    def allows(self, key: K, now: float) -> bool:
        """Whether `key` may have another window now."""
        return self.count(key, now) < self.per_hour

    def opened(self, key: K, now: float) -> None:
        """A window opened on `key` at `now`. Paths with none in the last
        hour are forgotten here (at most once a window, not once a read)."""
        self._opened = {k: recent for k, times in self._opened.items()
                        if (recent := [t for t in times if now - t < HOUR_S])}
        self._opened.setdefault(key, []).append(now)

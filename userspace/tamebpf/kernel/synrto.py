"""A shorter SYN timeout for the sockets of one cgroup (bpf/synrto.bpf.c).

The advisor's probes connect all their streams into a path that may be
congested; a dropped SYN is resent after 1 s by default, and the iperf3
server waits for every stream, so one drop stalls a probe for a second. With
this attached to the probe's cgroup, SYNs after the first connection are
resent after 3 x the path's RTT (200 ms to 1 s), as TCP does for data once it
has an RTT sample.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

from tamebpf.kernel.handle import NativeHandle


@dataclass(frozen=True)
class SynRtoState:
    srtt_us: int  # the path RTT the timeout is derived from; 0: none yet
    timeouts_set: int  # sockets whose SYN timeout was shortened


class SynRto(NativeHandle):
    """Attach to `cgroup` (a path) until closed. `srtt_us` seeds the RTT
    (e.g. from an earlier probe to the same host) so even the cgroup's first
    SYN gets the short timeout; without it, SYNs sent before any connection
    is up are resent after `first_rto_us` (0: the kernel's 1 s)."""

    _open_fn, _close_fn = "tb_synrto_open", "tb_synrto_close"
    _closed_text = "SYN timeout program is detached"

    def __init__(self, cgroup: str, srtt_us: int = 0, first_rto_us: int = 0) -> None:
        super().__init__()
        self._open(cgroup.encode(), srtt_us, first_rto_us)

    def state(self) -> SynRtoState:
        handle = self._live()
        srtt, count = ctypes.c_uint32(), ctypes.c_uint64()
        self._lib.tb_synrto_read(handle, ctypes.byref(srtt), ctypes.byref(count))
        return SynRtoState(srtt.value, count.value)

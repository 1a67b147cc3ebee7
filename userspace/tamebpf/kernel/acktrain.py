"""ACK arrival log of one cgroup's connections (bpf/acktrain.bpf.c).

Attached to the advisor's probe cgroup while a probe runs: every ACK that
advances one of its connections is logged with its arrival time, which is
what the capacity estimate (advise/estimate/acktrain.py) reads. Closing detaches
both programs; nothing is pinned.
"""

from __future__ import annotations

import ctypes

from tamebpf.errors import TamebpfError
from tamebpf.kernel import native
from tamebpf.kernel.abi import TB_ACKS_MAX, TbAck
from tamebpf.records import AckLog


class AckTrain:
    """Log the ACKs of connections opened from `cgroup` (a path) until closed."""

    def __init__(self, cgroup: str) -> None:
        self._lib = native.load()
        handle = ctypes.c_void_p()
        rc = self._lib.tb_acktrain_open(ctypes.byref(handle), cgroup.encode())
        if rc:
            raise TamebpfError(native.last_error(self._lib), native.errno_hint(-rc))
        self._handle: ctypes.c_void_p | None = handle

    def __enter__(self) -> AckTrain:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._handle is not None:
            self._lib.tb_acktrain_close(self._handle)
            self._handle = None

    def read(self) -> AckLog:
        """The ACKs logged so far, by connection cookie."""
        if self._handle is None:
            raise TamebpfError("probe ACK log is detached")
        acks = ctypes.POINTER(TbAck)()
        seen = ctypes.c_uint64()
        cookies = ctypes.POINTER(ctypes.c_uint64)()
        flows = ctypes.c_uint32()
        self._lib.tb_acktrain_read(self._handle, ctypes.byref(acks), ctypes.byref(seen),
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

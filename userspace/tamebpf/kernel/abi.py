"""ctypes mirror of bpf/flows.h, bpf/cap.h and bpf/acktrain.h: the structs
that cross into Python.

tests/unit/kernel/test_abi.py checks these against the C compiler's layout (as
exported by libtamebpf) and against the BPF object's BTF.
"""

from __future__ import annotations

import ctypes
from typing import Any

TB_COMM_LEN = 16
TB_CC_LEN = 16

TB_FLOW_CLOSED = 0x1
TB_FLOW_START_KNOWN = 0x2
TB_FLOW_OWNER_KNOWN = 0x4

u8, u16, u32, u64 = ctypes.c_uint8, ctypes.c_uint16, ctypes.c_uint32, ctypes.c_uint64


class TbFlow(ctypes.Structure):
    _fields_ = [
        ("cookie", u64),
        ("cgroup_id", u64),
        ("start_ns", u64),
        ("update_ns", u64),
        ("bytes_acked", u64),
        ("bytes_received", u64),
        ("bytes_sent", u64),
        ("bytes_retrans", u64),
        ("segs_out", u32),
        ("segs_in", u32),
        ("data_segs_out", u32),
        ("data_segs_in", u32),
        ("total_retrans", u32),
        ("retrans_out", u32),
        ("lost_out", u32),
        ("srtt_us", u32),
        ("rttvar_us", u32),
        ("min_rtt_us", u32),
        ("snd_cwnd", u32),
        ("snd_ssthresh", u32),
        ("mss", u32),
        ("rate_delivered", u32),
        ("rate_interval_us", u32),
        ("snd_wnd", u32),
        ("delivered", u32),
        ("cong_events", u32),
        ("pid", u32),
        ("netns_ino", u32),
        ("rcv_rtt_us", u32),
        ("rcv_ooopack", u32),
        ("family", u16),
        ("sport", u16),
        ("dport", u16),
        ("state", u8),
        ("flags", u8),
        ("saddr", u8 * 16),
        ("daddr", u8 * 16),
        ("comm", ctypes.c_char * TB_COMM_LEN),
        ("cc", ctypes.c_char * TB_CC_LEN),
    ]


class TbFlowsStats(ctypes.Structure):
    _fields_ = [
        ("closed_recorded", u64),
        ("closed_dropped", u64),
        ("owners_dropped", u64),
    ]


# cap: ctypes mirror of bpf/cap.h.
TB_CAP_RULES_MAX = 16
TB_CAP_CGROUPS_MAX = 4096
TB_CAP_SOCK_MAX = 8
TB_CAP_PATH_LEN = 256
TB_CAP_MODE_REFUSE = 0  # tb_cap_count.mode: connect()s over max fail with EPERM
TB_CAP_MODE_PACE = 1  # never refused; the streams share rate_bytes_per_s
TB_CAP_DIR_SEND = 0x1  # tb_cap_count.dirs: pace what the streams send (0 reads as this)
TB_CAP_DIR_RECEIVE = 0x2  # ... and/or what they receive (their receive window)


class TbCapRule(ctypes.Structure):
    _fields_ = [
        ("id", u64),
        ("addr", u32 * 4),
        ("mask", u32 * 4),
        ("family", u16),
        ("port", u16),  # first port; 0: every port
        ("port_end", u16),  # last port (== port: one)
        ("pad", u16),
        ("prefix_len", u32),
        ("pad2", u32),
    ]


class TbCapKey(ctypes.Structure):
    _fields_ = [
        ("cgid", u64),
        ("gen", u32),  # generation of cap_rules, 0 or 1 (cap_gen: the one in force)
        ("pad", u32),
    ]


class TbCapCgroup(ctypes.Structure):
    _fields_ = [
        ("n", u32),
        ("level", u32),
        ("path", ctypes.c_char * TB_CAP_PATH_LEN),
        ("rules", TbCapRule * TB_CAP_RULES_MAX),
    ]


class TbCapCount(ctypes.Structure):
    _fields_ = [
        ("lock", u32),  # struct bpf_spin_lock
        ("max", u32),
        ("count", u64),
        ("charged", u64),
        ("refused", u64),
        ("seeded", u64),
        ("released", u64),
        ("mode", u32),  # TB_CAP_MODE_*
        ("epoch_checkins", u32),
        ("rate_bytes_per_s", u64),
        ("epoch_start_ns", u64),
        ("prev_checkins", u32),
        ("dirs", u32),  # TB_CAP_DIR_*
    ]


class TbCapState(ctypes.Structure):
    _fields_ = [
        ("nomem", u64),
        ("overflow", u64),
        ("seed_skipped", u64),
    ]


class TbCapFollow(ctypes.Structure):
    """How a pace cap follows its path (cap_follow, docs/cap.md)."""

    _fields_ = [
        ("scout_cookie", u64),  # the socket left unpaced; 0: none
        ("rate_bytes_per_s", u64),  # the paced streams' target; 0: the cap's own
    ]


# userspace/c/lib/tamebpf.h: a cap plan's changes (the library's API; BPF
# never sees them).
TB_CAP_OP_ADD = 1
TB_CAP_OP_REMOVE = 2


class TbCapChange(ctypes.Structure):
    _fields_ = [
        ("rule", TbCapRule),
        ("cgid", u64),
        ("rate", u64),
        ("op", u32),
        ("max", u32),
        ("mode", u32),
        ("level", u32),
        ("dirs", u32),
        ("pad", u32),
        ("cg_path", ctypes.c_char_p),
        ("rel_path", ctypes.c_char_p),
    ]


# bpf/acktrain.h
TB_ACKS_MAX = 1 << 17
TB_ACK_FLOWS_MAX = 256


class TbAck(ctypes.Structure):
    _fields_ = [
        ("t_ns", u64),
        ("ack_seq", u32),
        ("flow", u16),
        ("pad", u16),
    ]


class TbRxFlow(ctypes.Structure):
    _fields_ = [
        ("segs", u64),
        ("episodes", u32),
        ("fills", u32),
        ("dups", u32),
        ("pad", u32),
    ]


# Every boundary struct, by its C name, for the layout test.
STRUCTS: dict[str, type[ctypes.Structure]] = {
    "tb_flow": TbFlow,
    "tb_flows_stats": TbFlowsStats,
    "tb_cap_rule": TbCapRule,
    "tb_cap_key": TbCapKey,
    "tb_cap_cgroup": TbCapCgroup,
    "tb_cap_count": TbCapCount,
    "tb_cap_state": TbCapState,
    "tb_cap_follow": TbCapFollow,
    "tb_ack": TbAck,
    "tb_rx_flow": TbRxFlow,
}
# Structs of the C library's API alone (not in any BPF object).
LIB_STRUCTS: dict[str, type[ctypes.Structure]] = {
    "tb_cap_change": TbCapChange,
}


def struct_format(cls: type[ctypes.Structure]) -> str:
    """A `struct` module format with the layout of a ctypes Structure (same
    offsets, padding as 'x'), so that records are decoded in one call
    instead of one ctypes attribute read per field. Byte arrays and char
    arrays come out as bytes."""
    codes: dict[Any, str] = {ctypes.c_uint8: "B", ctypes.c_uint16: "H", ctypes.c_uint32: "I",
                             ctypes.c_uint64: "Q"}
    out, pos = ["="], 0
    for field in cls._fields_:
        name, typ = field[0], field[1]
        off = getattr(cls, name).offset
        if off > pos:
            out.append(f"{off - pos}x")
        size = ctypes.sizeof(typ)
        out.append(codes.get(typ, f"{size}s"))
        pos = off + size
    if ctypes.sizeof(cls) > pos:
        out.append(f"{ctypes.sizeof(cls) - pos}x")
    return "".join(out)


TB_FLOW_FORMAT = struct_format(TbFlow)
TB_FLOW_FIELDS = tuple(field[0] for field in TbFlow._fields_)

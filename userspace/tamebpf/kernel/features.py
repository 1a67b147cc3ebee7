"""Which kernel features tamebpf's BPF programs use, probed on the running
kernel rather than guessed from its version: distribution kernels (RHEL 9's
5.14, for one) carry features from later upstream releases, so a version
number says little. Each feature is found by a name the kernel's BTF only
has when the feature is built in, except atomic fetch-and-add, which is an
instruction: a five-instruction program is loaded to see whether the
verifier takes it."""

from __future__ import annotations

import ctypes
import errno
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass

# Commands that read flows (iterators over TCP sockets and processes' files,
# a tracepoint on state changes, per-socket storage from tracing programs).
FLOWS = ("flows", "watch", "export", "advise", "cap")


@dataclass(frozen=True)
class Feature:
    name: str  # as an operator would search for it
    since: str  # the upstream release that added it
    btf_names: tuple[str, ...]  # present in the kernel's BTF when it is built in
    commands: tuple[str, ...]  # the commands whose programs use it


FEATURES = (
    Feature("BPF iterator over TCP sockets (iter/tcp)", "5.9", ("bpf_iter__tcp",), FLOWS),
    Feature("BPF iterator over open files (iter/task_file)", "5.8",
            ("bpf_iter__task_file",), FLOWS),
    Feature("BTF tracepoint inet_sock_set_state (tp_btf)", "5.5",
            ("btf_trace_inet_sock_set_state",), FLOWS),
    Feature("socket storage in tracing programs (sk_storage)", "5.11",
            ("bpf_sk_storage_get_tracing",), FLOWS),
    Feature("cgroup socket hooks (connect4/6, sock_release)", "5.9",
            ("BPF_CGROUP_INET4_CONNECT", "BPF_CGROUP_INET6_CONNECT",
             "BPF_CGROUP_INET_SOCK_RELEASE"), ("cap",)),
    Feature("cgroup sock_ops programs", "4.13", ("BPF_CGROUP_SOCK_OPS",), ("cap", "advise")),
    Feature("BTF tracepoint tcp_probe (tp_btf)", "5.5", ("btf_trace_tcp_probe",), ("advise",)),
)
ATOMIC_FETCH = Feature("BPF atomic fetch-and-add (BPF v3 atomics)", "5.12", (), ("advise",))


def btf_strings(btf_path: str) -> bytes:
    """The string section of a raw BTF file (every type, member and enum name)."""
    with open(btf_path, "rb") as f:
        data = f.read()
    if len(data) < 24:
        return b""
    magic, _ver, _flags, hdr_len, _toff, _tlen, str_off, str_len = struct.unpack_from(
        "<HBBIIIII", data)
    if magic != 0xEB9F:
        return b""
    start = hdr_len + str_off
    return b"\0" + data[start:start + str_len]


def has_names(strings: bytes, names: tuple[str, ...]) -> bool:
    return all(b"\0" + n.encode() + b"\0" in strings for n in names)


# struct bpf_insn: code, dst:4|src:4, off, imm. The program stores 0 on the
# stack, fetch-adds 1 to it (BPF_STX|BPF_ATOMIC|BPF_DW, imm BPF_ADD|BPF_FETCH)
# and returns 0.
_ATOMIC_FETCH_PROG = [
    (0x7A, 0x0A, -8, 0),  # *(u64 *)(r10 - 8) = 0
    (0xB7, 0x01, 0, 1),  # r1 = 1
    (0xDB, 0x1A, -8, 0x01),  # r1 = atomic_fetch_add((u64 *)(r10 - 8), r1)
    (0xB7, 0x00, 0, 0),  # r0 = 0
    (0x95, 0x00, 0, 0),  # exit
]
_SYS_BPF = {"x86_64": 321, "aarch64": 280}
_BPF_PROG_LOAD, _SOCKET_FILTER = 5, 1


def atomic_fetch_loads() -> bool | None:
    """Whether the verifier takes an atomic fetch-and-add (None: cannot tell
    here, e.g. an unknown architecture or no permission to load)."""
    nr = _SYS_BPF.get(os.uname().machine)
    if nr is None:
        return None
    insns = b"".join(struct.pack("<BBhi", *i) for i in _ATOMIC_FETCH_PROG)
    insn_buf = ctypes.create_string_buffer(insns, len(insns))
    license_buf = ctypes.create_string_buffer(b"GPL")
    attr = ctypes.create_string_buffer(128)  # union bpf_attr, zero beyond what we set
    struct.pack_into("<IIQQ", attr, 0, _SOCKET_FILTER, len(_ATOMIC_FETCH_PROG),
                     ctypes.addressof(insn_buf), ctypes.addressof(license_buf))
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.syscall(ctypes.c_long(nr), ctypes.c_int(_BPF_PROG_LOAD), attr,
                      ctypes.c_uint(len(attr)))
    if fd >= 0:
        os.close(fd)
        return True
    return False if ctypes.get_errno() == errno.EINVAL else None


def missing(command: str, btf_path: str,
            atomic_probe: Callable[[], bool | None] = atomic_fetch_loads) -> list[Feature]:
    """The features COMMAND needs that this kernel lacks."""
    strings = btf_strings(btf_path)
    lacking = [f for f in FEATURES if command in f.commands
               and not has_names(strings, f.btf_names)]
    if command in ATOMIC_FETCH.commands and atomic_probe() is False:
        lacking.append(ATOMIC_FETCH)
    return lacking

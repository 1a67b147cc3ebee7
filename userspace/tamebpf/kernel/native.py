"""Finding and loading libtamebpf.so, with its function prototypes."""

from __future__ import annotations

import ctypes
import errno
import os
from pathlib import Path

from tamebpf.common.errors import TamebpfError
from tamebpf.kernel.abi import (
    TbAck,
    TbCapCgroup,
    TbCapChange,
    TbCapCount,
    TbCapFollow,
    TbCapState,
    TbFlow,
    TbFlowsStats,
    TbRxFlow,
)

LIB_NAME = "libtamebpf.so"


def candidate_paths() -> list[Path]:
    """Where the library may be: $TAMEBPF_LIB, an install, the source tree."""
    paths = []
    if os.environ.get("TAMEBPF_LIB"):
        paths.append(Path(os.environ["TAMEBPF_LIB"]))
    here = Path(__file__).resolve()
    # Installed by `make install`: PREFIX/lib/tamebpf/ beside PREFIX/lib/pythonX/...
    for parent in here.parents:
        if parent.name == "lib":
            paths.append(parent / "tamebpf" / LIB_NAME)
            break
    # Source tree (editable install): userspace/tamebpf/kernel -> repo/build.
    paths.append(here.parents[3] / "build" / LIB_NAME)
    return paths


_lib: ctypes.CDLL | None = None


def load() -> ctypes.CDLL:
    global _lib
    if _lib is not None:
        return _lib
    tried = candidate_paths()
    for path in tried:
        if path.is_file():
            lib = ctypes.CDLL(str(path), use_errno=True)
            _declare(lib)
            _lib = lib
            return lib
    raise TamebpfError(
        f"{LIB_NAME} not found (looked in {', '.join(map(str, tried))})",
        "run 'make' in the tamebpf source tree, or set TAMEBPF_LIB",
    )


def errno_hint(err: int) -> str | None:
    """What to do about a libtamebpf call that failed with -err."""
    if err == errno.EPERM:
        return ("BPF is not permitted: run as root, and check "
                "kernel.unprivileged_bpf_disabled and any LSM policy")
    if err == errno.EINVAL:
        return "the kernel refused a program; run with -v for libbpf's log"
    return None


def last_error(lib: ctypes.CDLL) -> str:
    msg: bytes = lib.tb_last_error()
    return msg.decode(errors="replace")


def _declare(lib: ctypes.CDLL) -> None:
    c = ctypes
    lib.tb_last_error.restype = c.c_char_p
    lib.tb_last_error.argtypes = []
    lib.tb_set_verbose.argtypes = [c.c_int]
    lib.tb_set_verbose.restype = None
    lib.tb_abi_sizeof.argtypes = [c.c_char_p]
    lib.tb_abi_sizeof.restype = c.c_long
    lib.tb_abi_offsetof.argtypes = [c.c_char_p, c.c_char_p]
    lib.tb_abi_offsetof.restype = c.c_long
    lib.tb_flows_open.argtypes = [
        c.POINTER(c.c_void_p), c.c_uint64, c.c_uint32, c.c_uint32,
        c.POINTER(c.c_int), c.c_int,
    ]
    lib.tb_flows_open.restype = c.c_int
    lib.tb_flows_snapshot.argtypes = [
        c.c_void_p, c.POINTER(c.POINTER(TbFlow)), c.POINTER(c.c_size_t),
    ]
    lib.tb_flows_snapshot.restype = c.c_int
    lib.tb_flows_stats.argtypes = [
        c.c_void_p, c.POINTER(TbFlowsStats), c.POINTER(c.c_uint32), c.POINTER(c.c_uint32),
    ]
    lib.tb_flows_stats.restype = c.c_int
    lib.tb_flows_close.argtypes = [c.c_void_p]

    lib.tb_flowdiff_new.argtypes = []
    lib.tb_flowdiff_new.restype = c.c_void_p
    lib.tb_flowdiff_update.argtypes = [
        c.c_void_p, c.POINTER(TbFlow), c.c_size_t,
        c.POINTER(c.POINTER(c.c_uint32)), c.POINTER(c.c_size_t),
        c.POINTER(c.POINTER(c.c_uint64)), c.POINTER(c.c_size_t), c.POINTER(c.c_uint64)]
    lib.tb_flowdiff_update.restype = c.c_int
    lib.tb_flowdiff_free.argtypes = [c.c_void_p]
    lib.tb_flowdiff_free.restype = None
    lib.tb_flows_close.restype = None
    # probe SYN timeout
    lib.tb_synrto_open.argtypes = [c.POINTER(c.c_void_p), c.c_char_p, c.c_uint32, c.c_uint32]
    lib.tb_synrto_open.restype = c.c_int
    lib.tb_synrto_read.argtypes = [c.c_void_p, c.POINTER(c.c_uint32), c.POINTER(c.c_uint64)]
    lib.tb_synrto_read.restype = None
    lib.tb_synrto_close.argtypes = [c.c_void_p]
    lib.tb_synrto_close.restype = None

    lib.tb_acktrain_open.argtypes = [c.POINTER(c.c_void_p), c.c_char_p, c.c_int]
    lib.tb_acktrain_open.restype = c.c_int
    lib.tb_acktrain_window_open.argtypes = [c.POINTER(c.c_void_p), c.POINTER(c.c_uint64),
                                            c.c_uint32, c.c_int, c.c_int]
    lib.tb_acktrain_window_open.restype = c.c_int
    lib.tb_acktrain_read.argtypes = [c.c_void_p, c.POINTER(c.POINTER(TbAck)),
                                     c.POINTER(c.c_uint64), c.POINTER(c.POINTER(c.c_uint64)),
                                     c.POINTER(c.c_uint32)]
    lib.tb_acktrain_read.restype = c.c_int
    lib.tb_acktrain_rx.argtypes = [c.c_void_p]
    lib.tb_acktrain_rx.restype = c.POINTER(TbRxFlow)
    lib.tb_acktrain_close.argtypes = [c.c_void_p]
    lib.tb_acktrain_close.restype = None
    # cap
    lib.tb_cap_commit.argtypes = [
        c.c_char_p, c.POINTER(TbCapChange), c.c_size_t, c.POINTER(c.c_size_t),
        c.POINTER(c.c_int), c.c_int,
    ]
    lib.tb_cap_commit.restype = c.c_int
    lib.tb_cap_tidy.argtypes = [c.c_char_p, c.POINTER(c.c_int), c.c_int]
    lib.tb_cap_tidy.restype = c.c_int
    lib.tb_cap_list.argtypes = [
        c.c_char_p, c.POINTER(c.c_uint64), c.POINTER(TbCapCgroup), c.c_size_t,
        c.POINTER(c.c_size_t),
    ]
    lib.tb_cap_list.restype = c.c_int
    lib.tb_cap_read_count.argtypes = [c.c_char_p, c.c_uint64, c.POINTER(TbCapCount)]
    lib.tb_cap_read_count.restype = c.c_int
    lib.tb_cap_read_state.argtypes = [c.c_char_p, c.POINTER(TbCapState)]
    lib.tb_cap_read_state.restype = c.c_int
    for name in ("tb_cap_follow_set", "tb_cap_follow_read"):
        getattr(lib, name).argtypes = [c.c_char_p, c.c_uint64, c.POINTER(TbCapFollow)]
        getattr(lib, name).restype = c.c_int
    lib.tb_cap_follow_clear.argtypes = [c.c_char_p, c.c_uint64]
    lib.tb_cap_follow_clear.restype = c.c_int

"""What tamebpf needs from the machine before it loads anything, checked in
an order that names the first missing piece with the fix for it."""

from __future__ import annotations

import os

from tamebpf.cgroups import MOUNTS, require_cgroup2
from tamebpf.errors import TamebpfError

BTF_PATH = "/sys/kernel/btf/vmlinux"


def check(
    command: str,
    euid: int | None = None,
    btf_path: str = BTF_PATH,
    mounts_path: str = MOUNTS,
) -> str:
    """Raise TamebpfError for the first thing missing; return the cgroup2 root."""
    if euid is None:
        euid = os.geteuid()
    if euid != 0:
        raise TamebpfError(
            f"'tamebpf {command}' loads BPF programs and needs root",
            f"run it as 'sudo tamebpf {command} ...'",
        )
    if not os.path.exists(btf_path):
        raise TamebpfError(
            f"kernel BTF not found at {btf_path}",
            "tamebpf needs a kernel built with CONFIG_DEBUG_INFO_BTF=y",
        )
    return require_cgroup2(mounts_path)

"""What tamebpf needs from the machine before it loads anything, checked in
an order that names the first missing piece with the fix for it."""

from __future__ import annotations

import os
import re

from tamebpf.cgroups import MOUNTS, require_cgroup2
from tamebpf.errors import TamebpfError

BTF_PATH = "/sys/kernel/btf/vmlinux"
# The newest kernel feature our BPF objects use: atomic fetch-and-add whose
# result is used (BPF v3 atomics, bpf/acktrain.bpf.c), Linux 5.12. The rest
# is older (iter/tcp 5.9, socket storage in tracing programs 5.11). Tested on
# 6.18; docs/design.md.
MIN_KERNEL = (5, 12)


def kernel_version(release: str | None = None) -> tuple[int, int]:
    """(major, minor) of a release string like '6.18.0-1-amd64' ((0, 0) if
    it cannot be read)."""
    release = release or os.uname().release
    m = re.match(r"(\d+)\.(\d+)", release)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


# Capability bits (linux/capability.h): what loading, attaching and pinning
# our programs asks of the kernel when the caller is not root.
CAP_NET_ADMIN, CAP_SYS_ADMIN, CAP_PERFMON, CAP_BPF = 12, 21, 38, 39
BASE_CAPS = {"CAP_BPF": CAP_BPF, "CAP_PERFMON": CAP_PERFMON, "CAP_NET_ADMIN": CAP_NET_ADMIN}
# Entering another network namespace (setns: `--netns`, and a cap counting
# the streams its cgroup already has in every namespace) also needs this.
NETNS_CAPS = {**BASE_CAPS, "CAP_SYS_ADMIN": CAP_SYS_ADMIN}


def effective_caps(status_path: str = "/proc/self/status") -> int:
    """This process's effective capability set, as a bit mask."""
    with open(status_path) as f:
        for line in f:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return 0


def missing_caps(caps: int, needed: dict[str, int]) -> list[str]:
    return [name for name, bit in needed.items() if not caps >> bit & 1]


def check(
    command: str,
    euid: int | None = None,
    btf_path: str = BTF_PATH,
    mounts_path: str = MOUNTS,
    caps: int | None = None,
    needs_netns: bool = False,
    release: str | None = None,
) -> str:
    """Raise TamebpfError for the first thing missing; return the cgroup2 root.

    Root will do; so will any user holding CAP_BPF, CAP_PERFMON and
    CAP_NET_ADMIN, plus CAP_SYS_ADMIN when it must enter other network
    namespaces (measured: docs/metrics.md, "Running as a service")."""
    if euid is None:
        euid = os.geteuid()
    needed = NETNS_CAPS if needs_netns else BASE_CAPS
    lacking = missing_caps(effective_caps() if caps is None else caps, needed)
    if lacking and euid != 0:
        raise TamebpfError(
            f"'tamebpf {command}' loads BPF programs and needs root (or "
            f"{', '.join(needed)}; missing {', '.join(lacking)})",
            f"run it as 'sudo tamebpf {command} ...'",
        )
    if lacking:
        # Root whose capabilities were dropped (setpriv --bounding-set,
        # capsh, a container): the kernel would only say EPERM.
        raise TamebpfError(
            f"'tamebpf {command}' runs as root but without {', '.join(lacking)}, which "
            "loading and attaching its BPF programs needs",
            "run it with full capabilities (not under setpriv/capsh --drop, or grant "
            f"{', '.join(needed)} to the container or unit)",
        )
    have = kernel_version(release)
    if have != (0, 0) and have < MIN_KERNEL:
        raise TamebpfError(
            f"Linux {have[0]}.{have[1]} is too old: tamebpf's BPF programs need "
            f"{MIN_KERNEL[0]}.{MIN_KERNEL[1]} or later",
            "run it on a newer kernel (tested on 6.18)",
        )
    if not os.path.exists(btf_path):
        raise TamebpfError(
            f"kernel BTF not found at {btf_path}",
            "tamebpf needs a kernel built with CONFIG_DEBUG_INFO_BTF=y",
        )
    return require_cgroup2(mounts_path)

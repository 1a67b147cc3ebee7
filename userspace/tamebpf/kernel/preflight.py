"""What tamebpf needs from the machine before it loads anything, checked in
an order that names the first missing piece with the fix for it."""

from __future__ import annotations

import os
from collections.abc import Callable

from tamebpf.common.errors import TamebpfError
from tamebpf.kernel import features
from tamebpf.kernel.cgroups import MOUNTS, require_cgroup2

BTF_PATH = "/sys/kernel/btf/vmlinux"


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
    atomic_probe: Callable[[], bool | None] = features.atomic_fetch_loads,
) -> str:
    """Raise TamebpfError for the first thing missing; return the cgroup2 root.

    Root will do; so will any user holding CAP_BPF, CAP_PERFMON and
    CAP_NET_ADMIN, plus CAP_SYS_ADMIN when it must enter other network
    namespaces (measured: docs/metrics.md, "Running as a service"). The
    kernel's features are probed, not inferred from its version
    (kernel/features.py): the message names each one missing."""
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
    if not os.path.exists(btf_path):
        raise TamebpfError(
            f"kernel BTF not found at {btf_path}",
            "tamebpf needs a kernel built with CONFIG_DEBUG_INFO_BTF=y",
        )
    absent = features.missing(command, btf_path, atomic_probe)
    if absent:
        names = "; ".join(f"{f.name}, upstream Linux {f.since}" for f in absent)
        raise TamebpfError(
            f"this kernel ({os.uname().release}) lacks what 'tamebpf {command}' needs: {names}",
            "run it on a kernel that has them (tested on 6.18; docs/deploy.md)",
        )
    return require_cgroup2(mounts_path)

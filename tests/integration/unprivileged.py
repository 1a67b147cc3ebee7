"""Running the command as an unprivileged user, wherever the checkout is.

A checkout may sit under a directory only root can enter (`mktemp -d` makes
0700 ones), where another user cannot even import the package. The command
runs instead in a private mount namespace in which this checkout and the
venv are bind-mounted under a fresh directory anyone can enter; nothing is
copied, and the mounts vanish with the process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534

# sh -c: bind the checkout and the venv, then become the user and run.
_MOUNT_AND_RUN = ('mount --bind "$1" "$3/repo" && mount --bind "$2" "$3/venv" '
                  '&& shift 3 && exec "$@"')


def run_as_user(*argv: str, uid: int = NOBODY, caps: str = "", timeout: float = 60,
                env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m tamebpf ARGV` as uid (and its gid), from readable mounts;
    caps ("+bpf,+perfmon") are kept as ambient capabilities, as a service
    unit's AmbientCapabilities= would."""
    view = tempfile.mkdtemp(prefix="tamebpf-unpriv-")
    try:
        os.chmod(view, 0o755)
        for sub in ("repo", "venv"):
            os.mkdir(os.path.join(view, sub), 0o755)
        cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c", _MOUNT_AND_RUN,
               "sh", str(REPO), sys.prefix, view,
               "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
               *([f"--inh-caps={caps}", f"--ambient-caps={caps}"] if caps else []),
               f"{view}/venv/bin/python", "-m", "tamebpf", *argv]
        full_env = {**os.environ, "HOME": "/tmp", "PYTHONPATH": f"{view}/repo/userspace",
                    **(env or {})}
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env=full_env, check=False)
    finally:
        for sub in ("repo", "venv"):
            os.rmdir(os.path.join(view, sub))
        os.rmdir(view)

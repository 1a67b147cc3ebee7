"""The integration tests' WAN testbeds (tamebpf_testbed) as context managers and
checks: a testbed up for one test and down after it, even when the test fails."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tamebpf_testbed import Testbed, config, iperf, teardown
from tamebpf_testbed.testbed import state_dir


def unique_name() -> str:
    """A fresh testbed name; TAMEBPF_TESTBED_PREFIX (default "tbt", at most
    6 characters) keeps runs from several checkouts apart."""
    return os.environ.get("TAMEBPF_TESTBED_PREFIX", "tbt") + secrets.token_hex(3)


@contextmanager
def running_testbed(**kw: Any) -> Iterator[Testbed]:
    """A testbed under a fresh name; torn down even if the test fails, and
    checked to have left nothing behind."""
    name = unique_name()
    tb = None
    try:
        tb = Testbed.up(name, **kw)
        yield tb
    finally:
        pids = list(tb.pids.values()) if tb else []
        teardown(name)
        problems = leftovers(name, pids)
        assert not problems, f"testbed {name} left: {problems}"


def leftovers(name: str, pids: list[int]) -> list[str]:
    """What of testbed name still exists (namespaces, processes, state)."""
    found = []
    nss = set(config.namespaces(name, config.MAX_SENDERS).values())
    listed = subprocess.run(["ip", "-o", "netns", "list"], capture_output=True, text=True,
                            check=True).stdout
    found += [f"namespace {ns}" for ns in sorted(nss) if ns in listed.split()]
    found += [f"process {p}" for p in pids if _running(p)]
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if any(f" {ns} " in f" {cmd} " for ns in nss):
                found.append(f"process {proc.name}: {cmd.strip()}")
    if state_dir(name).exists():
        found.append(f"state dir {state_dir(name)}")
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True,
                           check=True).stdout
    found += [f"root-namespace link {ln.split(':')[1].strip()}" for ln in links.splitlines()
              if name in ln]
    # Our rules live in the router namespace; none may have reached the root's.
    rules = subprocess.run(["nft", "list", "ruleset"], capture_output=True, text=True,
                           check=False).stdout
    found += [f"root-namespace rule mentioning {w}"
              for w in (name, *config.ROUTER_IF.values()) if w in rules]
    return found


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def iperf3_json(tb: Testbed, argv: list[str], timeout: float = 60) -> dict[str, Any]:
    """Runs an iperf3 client in the sender namespace against a fresh server."""
    server = iperf.start_server(tb, iperf.PORT_MAIN)
    try:
        out = tb.exec("sender", argv, timeout=timeout)
    finally:
        server.terminate()
        server.wait(5)
    result: dict[str, Any] = json.loads(out)
    return result


def in_background(tb: Testbed, role: str, argv: list[str]) -> subprocess.Popen[bytes]:
    return tb.popen(role, argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL)


@contextmanager
def killed_on_exit(*procs: subprocess.Popen[Any]) -> Iterator[None]:
    """Kills and reaps the processes a test started, however the test ends."""
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def retry(times: int, fn: Callable[[], tuple[bool, str]]) -> tuple[bool, list[str]]:
    """Calls fn up to times times until it reports success; returns all messages.

    Only for measurements of throughput, which other jobs on this 2-core
    machine can disturb; each attempt is a full, independent measurement.
    """
    msgs = []
    for _ in range(times):
        ok, msg = fn()
        msgs.append(msg)
        if ok:
            return True, msgs
        time.sleep(0.5)
    return False, msgs

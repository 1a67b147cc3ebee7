"""tamebpf's commands as a user types them, run as processes on a testbed:
`tamebpf run -- CMD`, `tamebpf export` (the agent) and `tamebpf advise`,
each with a state directory of its own, and the private bpffs pin directory
that keeps their caps apart from the host's.

The evaluations measure what the commands do, not what their modules do
when called: options are parsed, logs written, exit statuses given as they
are for a user.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

from tamebpf.cap.table import PIN_ENV
from tamebpf.paths.store import STATE_DIR_ENV
from tamebpf_testbed import Testbed

TAMEBPF = [sys.executable, "-m", "tamebpf"]
# A link may send a stray neighbour-discovery packet of its own while a
# command runs; a probe sends thousands (tests/integration/test_paths.py
# allows as many).
STRAY_PACKETS = 3
AGENT_START_S = 3.0  # export attaches its programs before this
STOP_WAIT_S = 30.0  # a command's time to end on SIGTERM (run: CMD, then its tidy)
LOG_RECORDS = 400  # of a command's log, kept in a record


@contextlib.contextmanager
def pin_dir(prefix: str = "tamebpf-eval-") -> Iterator[str]:
    """A fresh bpffs directory for the caps' pins, in TAMEBPF_PIN_DIR for
    this process and the commands it starts; unpinning what is left on the
    way out detaches whatever a failed run left attached."""
    path = f"/sys/fs/bpf/{prefix}{secrets.token_hex(3)}"
    old = os.environ.get(PIN_ENV)
    os.environ[PIN_ENV] = path
    try:
        yield path
    finally:
        if old is None:
            os.environ.pop(PIN_ENV, None)
        else:
            os.environ[PIN_ENV] = old
        if os.path.isdir(path):
            for name in os.listdir(path):
                os.unlink(os.path.join(path, name))
            os.rmdir(path)


def stop(proc: subprocess.Popen[bytes], wait_s: float = STOP_WAIT_S) -> None:
    """SIGTERM (the command tidies: caps, cgroups, BPF programs), SIGKILL if
    it has not ended in wait_s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(wait_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def agent(state: str, netns: str, *extra: str) -> Iterator[subprocess.Popen[bytes]]:
    """`tamebpf export` as the service runs it, reading `netns`, its path
    memory in `state` and its log in state/agent.log; `extra`: more options
    (--interval 5, --ack-sampling, ...)."""
    env = {**os.environ, STATE_DIR_ENV: state}
    logfile = os.path.join(state, "agent.log")
    with open(logfile, "w") as err:
        proc = subprocess.Popen([*TAMEBPF, "export", "--netns", netns, "--listen", "off",
                                 "--jsonl", os.devnull, *extra],
                                env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=err)
    try:
        time.sleep(AGENT_START_S)
        if proc.poll() is not None:
            with open(logfile) as f:
                raise SystemExit(f"the agent exited: {f.read()}")
        yield proc
    finally:
        stop(proc, 10.0)


def json_log(path: str, keep: Sequence[str] = (), most: int = LOG_RECORDS
             ) -> list[dict[str, Any]]:
    """The records of a `--log-format json` log at info or above, and those
    with an event in `keep` at any level; a line that is not JSON (the
    one-line error a command ends with, a libbpf message) as {"level":
    "text", "msg": line}. The last `most` of them: a record stays small."""
    out = []
    with open(path) as f:
        for line in f:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                rec = {"level": "text", "msg": line.rstrip("\n")} if line.strip() else None
            if isinstance(rec, dict) and (rec.get("level") != "debug"
                                          or rec.get("event") in keep):
                out.append(rec)
    return out[-most:]


def run_transfer(tb: Testbed, state: str, max_impact: float, argv: Sequence[str],
                 seconds: float) -> dict[str, Any]:
    """`tamebpf run --netns SENDER -- argv` with path memory in `state`:
    its exit status, its --json summary, its log (the cap's follow_change
    events carry the new target and when), and the wall time it started."""
    summary, logfile = os.path.join(state, "run.json"), os.path.join(state, "run.log")
    cmd = [*TAMEBPF, "--log-format", "json", "--log-level", "debug", "run",
           "--netns", tb.namespaces["sender"], "--max-impact", f"{max_impact:g}",
           "--state-dir", state, f"--json={summary}", "--", *argv]
    started = time.time()
    with open(logfile, "w") as err:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=err)
    try:
        status = proc.wait(seconds + 60)
    except subprocess.TimeoutExpired:
        status = None
    finally:
        stop(proc)
    out: dict[str, Any] = {"exit": status, "started": started,
                           "log": json_log(logfile, ("follow_change", "follow_scout"))}
    try:
        with open(summary) as f:
            out["summary"] = json.load(f)
    except (OSError, json.JSONDecodeError) as err:
        out["summary"] = None
        out["error"] = f"no summary: {err}"
    return out


def advise_from_memory(tb: Testbed, state: str, port: int, cc: str,
                       max_impact: float) -> dict[str, Any]:
    """`tamebpf advise RECEIVER:port --json` with path memory in `state`,
    where no iperf3 server listens on `port`: it can answer only from what
    was learned. Its exit status, its JSON (None when it gave none), the
    last line of its stderr, and the packets the sender's link sent while
    it ran (none, or a stray one, when it answers from memory)."""
    before = tb.settled_tx_packets()
    t0 = time.monotonic()
    res = subprocess.run([*TAMEBPF, "advise", f"{tb.addresses['receiver']}:{port}",
                          "--netns", tb.namespaces["sender"], "--congestion", cc,
                          "--max-impact", f"{max_impact:g}", "--state-dir", state, "--json"],
                         capture_output=True, text=True, timeout=120)
    took = time.monotonic() - t0
    sent = tb.tx_packets() - before
    try:
        answer = json.loads(res.stdout) if res.returncode == 0 else None
    except json.JSONDecodeError:
        answer = None
    lines = res.stderr.strip().splitlines()
    return {"exit": res.returncode, "answer": answer, "error": lines[-1] if lines else "",
            "sent_packets": sent, "seconds": took}

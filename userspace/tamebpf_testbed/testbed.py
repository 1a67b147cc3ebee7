"""The Testbed object: bring up, re-open, run things in, tear down."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from tamebpf.common.errors import TamebpfError
from tamebpf_testbed import config as C
from tamebpf_testbed import delay, shaping, topology
from tamebpf_testbed.sh import CommandError, in_ns, run

STATE_ROOT = Path(os.environ.get("TAMEBPF_TESTBED_STATE", "/run/tamebpf/testbed"))
# iputils' ping, in the C locale (its words are translated). A reply line
# ends "(DUP!)" when it is a duplicate, which does not count.
PING_REPLY = re.compile(r"^\d+ bytes from \S+ icmp_seq=(\d+) .*\btime=([\d.]+) ms$", re.M)
PING_SUMMARY = re.compile(r"^(\d+) packets transmitted, (\d+) received\b", re.M)


def state_dir(name: str) -> Path:
    return STATE_ROOT / name


class Testbed:
    """A running testbed. Use Testbed.up(...) as a context manager in tests:
    it always tears down. Testbed.attach(name) re-opens one made elsewhere."""

    __test__ = False  # not a pytest test class, despite the name

    def __init__(self, name: str, cfg: C.TestbedConfig, pids: dict[str, int]) -> None:
        self.name = name
        self.config = cfg
        self.namespaces = C.namespaces(name, cfg.senders)
        self.addresses = C.addresses(4, cfg.senders)
        self.addresses6 = C.addresses(6, cfg.senders)
        self.pids = pids  # delay-line label -> pid

    # -- life cycle ---------------------------------------------------------
    @classmethod
    def up(cls, name: str, rate_mbit: float, rtt_ms: float, queue_pkts: int, *,
           aqm: str = "droptail", loss_pct: float = 0.0, cross_rtt_ms: float | None = None,
           cc: str = "cubic", seed: int = 1, red: C.RedParams | None = None,
           rate_back_mbit: float | None = None, senders: int = 1) -> Testbed:
        cfg = C.TestbedConfig(rate_mbit=rate_mbit, rtt_ms=rtt_ms, queue_pkts=queue_pkts,
                              aqm=aqm, loss_pct=loss_pct, cross_rtt_ms=cross_rtt_ms, cc=cc,
                              seed=seed, red=red, rate_back_mbit=rate_back_mbit,
                              senders=senders)
        return cls.up_config(name, cfg)

    @classmethod
    def up_config(cls, name: str, cfg: C.TestbedConfig) -> Testbed:
        C.check_name(name)
        if os.geteuid() != 0:
            raise TamebpfError("the testbed needs root", "run as root (sudo)")
        taken = (set(C.namespaces(name, C.MAX_SENDERS).values())
                 & topology.existing_namespaces())
        if taken or state_dir(name).exists():
            raise TamebpfError(f"testbed {name} exists already",
                               f"scripts/testbed down {name}, or pick another name")
        sdir = state_dir(name)
        sdir.mkdir(parents=True)
        tb = cls(name, cfg, {})
        tb._save()  # so that down() finds what to remove even if we fail half-way
        try:
            topology.build(name, cfg)
            rtr = tb.namespaces["router"]
            # The links first, then the rules that feed them: no packet ever
            # meets a rule without a listener.
            for spec in (delay.link_spec(cfg), delay.back_spec(cfg)):
                tb.pids[spec.label] = delay.start(rtr, spec, tb.log(spec.label))
                tb._save()
            shaping.install_rules(rtr, cfg.senders)
        except BaseException:
            tb.down()
            raise
        return tb

    @classmethod
    def attach(cls, name: str) -> Testbed:
        path = state_dir(C.check_name(name)) / "state.json"
        try:
            st = json.loads(path.read_text())
        except FileNotFoundError as err:
            raise TamebpfError(f"no testbed {name}", f"no {path}; start one with "
                               f"scripts/testbed up {name} ...") from err
        return cls(name, C.TestbedConfig.from_json(st["config"]),
                   {k: int(v) for k, v in st["pids"].items()})

    def down(self) -> None:
        teardown(self.name)

    def __enter__(self) -> Testbed:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.down()

    # -- running things -------------------------------------------------------
    def argv(self, role: str, argv: Sequence[str]) -> list[str]:
        if role not in self.namespaces:
            raise TamebpfError(f"testbed {self.name} has no role {role!r}",
                               f"use one of {', '.join(self.namespaces)}")
        return in_ns(self.namespaces[role], argv)

    def exec(self, role: str, argv: Sequence[str], *, check: bool = True,
             timeout: float = 60.0) -> str:
        """Runs argv in role's namespace; returns stdout."""
        return run(self.argv(role, argv), check=check, timeout=timeout)

    def popen(self, role: str, argv: Sequence[str], **kw: Any) -> subprocess.Popen[bytes]:
        """Starts argv in role's namespace (keyword arguments go to Popen)."""
        return subprocess.Popen(self.argv(role, argv), **kw)

    def ping(self, role: str = "sender", dst: str = "receiver", count: int = 10,
             interval: float = 0.1, family: int = 4, timeout: float = 2.0,
             size: int | None = None) -> dict[str, Any]:
        """ICMP echo from role to host dst, count of them every interval s
        (ping's -c, -i; below 0.2 s it needs root); ping_result's record.
        After the last, ping waits twice the longest RTT it saw for late
        replies, or timeout s when none came (-W). size: payload bytes (-s;
        ping's default 56 makes packets the back link lets through untouched)."""
        addr = (self.addresses if family == 4 else self.addresses6)[dst]
        argv = ["env", "LC_ALL=C", "ping", f"-{family}", "-n", "-c", str(count),
                "-i", f"{interval:.3f}", "-W", f"{timeout:.3f}",
                *(["-s", str(size)] if size is not None else []), addr]
        # Exit status 1: not every reply came, which is a result (a lossy or
        # dead path); 2 is an error.
        out = run(self.argv(role, argv), ok=(0, 1), timeout=count * interval + timeout + 30)
        return ping_result(out)

    def tx_packets(self, role: str = "sender") -> int:
        """Packets role's link has sent (its veth's counter): whether a
        command sent anything at all (an answer from path memory must not)."""
        links = json.loads(run(["ip", "-n", self.namespaces[role], "-j", "-s", "link", "show",
                                C.HOST_IF]))
        return int(links[0]["stats64"]["tx"]["packets"])

    def settled_tx_packets(self, role: str = "sender", quiet_s: float = 1.0,
                           within_s: float = 10.0) -> int:
        """role's tx_packets once it has not moved for quiet_s (a transfer's
        connections close after it returns: a late FIN or ACK counted after
        the reading was once taken for the next command's)."""
        deadline = time.monotonic() + within_s
        last = self.tx_packets(role)
        while time.monotonic() < deadline:
            time.sleep(quiet_s)
            now = self.tx_packets(role)
            if now == last:
                return now
            last = now
        return last

    # -- health ---------------------------------------------------------------
    def dead_delay_lines(self) -> list[str]:
        return [label for label, pid in self.pids.items() if not delay.alive(pid)]

    def check(self) -> None:
        """Raises if a delay line died (the path would be dead, not faster)."""
        dead = self.dead_delay_lines()
        if dead:
            logs = " ".join(str(self.log(d)) for d in dead)
            raise TamebpfError(f"testbed {self.name}: delay line(s) {', '.join(dead)} died",
                               f"see {logs}; scripts/testbed down {self.name} and up again")

    def log(self, label: str) -> Path:
        """Where delay-line instance `label` writes its errors and statistics."""
        return state_dir(self.name) / f"delay-{label}.log"

    def link_stats(self, direction: str = "forward") -> dict[str, float]:
        """A link's counters so far: packets, tail_drops, red_drops, lost,
        backlog (packets in its FIFO now), late_mean_us, ...; direction
        "forward" (toward the receiver) or "back" (from it)."""
        if direction not in delay.DIRECTIONS:
            raise TamebpfError(f"unknown direction {direction!r}",
                               f"use one of {', '.join(delay.DIRECTIONS)}")
        label = delay.DIRECTIONS[direction]
        return delay.stats(self.pids[label], self.log(label))

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "namespaces": dict(self.namespaces),
            "addresses": dict(self.addresses),
            "addresses6": dict(self.addresses6),
            "config": self.config.to_json(),
            "pids": dict(self.pids),
            "goodput_mbit": round(self.config.goodput_mbit, 3),
            "goodput_back_mbit": round(self.config.goodput_back_mbit, 3),
            "state_dir": str(state_dir(self.name)),
        }

    def _save(self) -> None:
        path = state_dir(self.name) / "state.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.describe(), indent=1) + "\n")
        tmp.replace(path)


def ping_result(out: str) -> dict[str, Any]:
    """iputils ping's output as {"sent", "received", "rtt_ms": [...] (one RTT
    a reply, in order of sequence number), "lost_seq": [...] (the sequence
    numbers with no reply, from 0)}. ping prints an RTT to 3 significant
    digits (0.01 ms from 1 to 10 ms, 1 ms from 100 ms)."""
    summary = PING_SUMMARY.search(out)
    if summary is None:
        raise CommandError("ping printed no statistics", f"it printed: {out.strip()[-300:]!r}")
    sent, received = int(summary[1]), int(summary[2])
    rtts: dict[int, float] = {}
    for seq, ms in PING_REPLY.findall(out):
        rtts.setdefault(int(seq) - 1, float(ms))  # ping counts from 1
    if len(rtts) != received:
        raise CommandError(f"ping counted {received} replies, {len(rtts)} reply lines read",
                           f"it printed: {out.strip()[-300:]!r}")
    return {"sent": sent, "received": received, "rtt_ms": [rtts[s] for s in sorted(rtts)],
            "lost_seq": [s for s in range(sent) if s not in rtts]}


def teardown(name: str) -> None:
    """Removes testbed name: processes, then namespaces, then state. Idempotent;
    touches only the pids it recorded and the namespaces named after it."""
    C.check_name(name)
    sdir = state_dir(name)
    pids: list[int] = []
    try:
        st = json.loads((sdir / "state.json").read_text())
        pids = [int(p) for p in st.get("pids", {}).values()]
    except (OSError, ValueError):
        pass
    ours = set(C.namespaces(name, C.MAX_SENDERS).values()) & topology.existing_namespaces()
    # Whatever runs inside our namespaces (iperf3 servers, clients, pings).
    inside = topology.pids_inside(ours)
    _kill_all([p for p in inside if p not in pids])
    delay.kill([p for p in pids if delay.alive(p)])
    _kill_all(inside)
    if ours:
        topology.delete_namespaces(ours)
    shutil.rmtree(sdir, ignore_errors=True)


def _kill_all(pids: list[int], timeout: float = 3.0) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for pid in pids:  # reap our own children
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
            if not any(Path(f"/proc/{p}").exists() and not _zombie(p) for p in pids):
                return
            time.sleep(0.02)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False

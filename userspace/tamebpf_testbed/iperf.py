"""iperf3 servers and clients on a testbed, and byte counters read with ss."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable, Sequence

from tamebpf.common.errors import TamebpfError
from tamebpf.common.units import mbps_over
from tamebpf.common.values import IPERF3_PORT
from tamebpf_testbed.testbed import Testbed

PORT_MAIN = IPERF3_PORT  # our n parallel streams: iperf3's own port
PORT_CROSS = 5202  # the m cross-traffic flows
_ACKED = re.compile(r"bytes_acked:(\d+)")


def start_server(tb: Testbed, port: int, capture: bool = False) -> subprocess.Popen[bytes]:
    """`capture`: its output (errors included) readable from its stdout."""
    proc = tb.popen("receiver", ["iperf3", "-s", "-p", str(port)],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
                    stderr=subprocess.STDOUT if capture else subprocess.DEVNULL)
    wait_for(lambda: _listening(tb, port), 5.0, f"iperf3 server on port {port}")
    return proc


def _listening(tb: Testbed, port: int) -> bool:
    out = tb.exec("receiver", ["ss", "-tlnH", f"sport = :{port}"])
    return bool(out.strip())


def client_argv(dst: str, port: int, streams: int, seconds: float, cc: str, *,
                window_kb: int | None = None, omit: int = 0, json_out: bool = True,
                udp_mbit: float | None = None, reverse: bool = False) -> list[str]:
    """reverse: the server sends (-R), a download through the back link; -C
    then sets the server's congestion control."""
    argv = ["iperf3", "-c", dst, "-p", str(port), "-P", str(streams), "-t", f"{seconds:g}",
            "-C", cc, "--connect-timeout", "5000"]
    if reverse:
        argv.append("-R")
    if window_kb:
        argv += ["-w", f"{window_kb}K"]
    if omit:
        argv += ["-O", str(omit)]
    if json_out:
        argv.append("-J")
    if udp_mbit is not None:
        argv += ["-u", "-b", f"{udp_mbit}M", "-l", "1472"]
    return argv


def server_idle(tb: Testbed, port: int) -> bool:
    """No connection the server still holds on its port: the previous test
    has ended there too (an iperf3 server that is still busy refuses the
    next client)."""
    # Only sockets the server has not closed keep it busy. One it closed
    # lingers in FIN-WAIT, LAST-ACK or TIME-WAIT while the handshake ends,
    # and when the peer's FIN or RST is lost at a full queue an orphan stays
    # in FIN-WAIT-2 for tcp_fin_timeout (60 s), longer than callers wait.
    out = tb.exec("receiver", ["ss", "-tnH", "state", "established", "state", "close-wait",
                               "state", "syn-recv", f"sport = :{port}"])
    return not out.strip()


def wait_flows(tb: Testbed, role: str, port: int, flows: int, proc: subprocess.Popen[bytes],
               timeout: float = 30.0) -> None:
    """Waits until flows data connections (plus iperf3's control one) are up;
    fails at once, with iperf3's message, if the client exits first. The
    timeout is generous: at low rates SYNs meet a full queue and back off."""
    def up() -> bool:
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace").strip() if proc.stderr else ""
            raise TamebpfError(f"iperf3 client in {role} exited ({proc.returncode})",
                               err[-300:] or None)
        return established(tb, role, port) > flows
    wait_for(up, timeout, f"{flows} flows from {role}")


# An ssthresh in ss's TCP info (not rcv_ssthresh): the kernel sets it when
# the flow leaves slow start, at its first loss or HyStart's exit.
_SSTHRESH = re.compile(r"\sssthresh:\d+")


def wait_past_slow_start(tb: Testbed, role: str, port: int, flows: int,
                         proc: subprocess.Popen[bytes]) -> None:
    """Waits until `flows` connections from role to port are up and have
    left slow start: cross traffic as a path's is, in congestion avoidance
    with the queue full (on these testbeds a few tenths of a second after
    the connections are up, where a fixed sleep of seconds was waited)."""
    wait_flows(tb, role, port, flows, proc)
    wait_for(lambda: left_slow_start(tb, role, port, flows), 30.0,
             f"{flows} flows from {role} past slow start")


def _ends(port: int, served: bool) -> str:
    """ss's filter for role's connections to port, or (served) those it
    serves on port: a download's data sender is the iperf3 server."""
    return f"{'sport' if served else 'dport'} = :{port}"


def left_slow_start(tb: Testbed, role: str, port: int, flows: int,
                    served: bool = False) -> bool:
    """At least `flows` of role's connections to (served: on) port have
    left slow start."""
    out = tb.exec(role, ["ss", "-tinH", "state", "established", _ends(port, served)])
    return len(_SSTHRESH.findall(out)) >= flows


def established(tb: Testbed, role: str, port: int) -> int:
    out = tb.exec(role, ["ss", "-tnH", "state", "established", f"dport = :{port}"])
    return len([ln for ln in out.splitlines() if ln.strip()])


def acked_bytes(tb: Testbed, role: str, port: int,
                served: bool = False) -> tuple[int, float]:
    """Bytes acknowledged so far on all role's connections to port (served:
    those it serves on port, a download's), and when.

    Read from the sender's sockets (tcp_info bytes_acked) at times we choose,
    so the cross traffic's throughput with and without our streams covers
    exactly the measured window. The iperf3 control connection is included;
    it carries a few hundred bytes.
    """
    t0 = time.monotonic()
    out = tb.exec(role, ["ss", "-tinH", "state", "established", _ends(port, served)])
    t1 = time.monotonic()
    return sum(int(m) for m in _ACKED.findall(out)), (t0 + t1) / 2


def sent_bytes(tb: Testbed, role: str, port: int, reverse: bool = False) -> tuple[int, float]:
    """acked_bytes of role's iperf3 client to port, read where its data is
    sent: at role, or (reverse, a download) at the receiver's server."""
    return acked_bytes(tb, "receiver", port, served=True) if reverse \
        else acked_bytes(tb, role, port)


def mbit_between(a: tuple[int, float], b: tuple[int, float]) -> float:
    """Goodput between two acked_bytes readings, in Mbit/s."""
    return mbps_over(b[0] - a[0], b[1] - a[1])


def cross_rate(tb: Testbed, seconds: float, reverse: bool = False) -> float:
    """The cross flows' goodput over the next `seconds` (their sockets' acked
    bytes: the window is exactly those seconds); reverse: downloads'."""
    return cross_rates(tb, (seconds,), reverse)[0]


def cross_rates(tb: Testbed, windows_s: Sequence[float], reverse: bool = False) -> list[float]:
    """The cross traffic's goodput over each window, all opening now (the
    shorter ones are the first seconds of the longer ones)."""
    a = sent_bytes(tb, "cross", PORT_CROSS, reverse)
    t0 = time.monotonic()
    out = {}
    for w in sorted(set(windows_s)):
        time.sleep(max(0.0, t0 + w - time.monotonic()))
        out[w] = mbit_between(a, sent_bytes(tb, "cross", PORT_CROSS, reverse))
    return [out[w] for w in windows_s]


def wait_for(cond: Callable[[], bool], timeout: float, what: str, step: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(step)
    raise TamebpfError(f"timed out after {timeout:g} s waiting for {what}")

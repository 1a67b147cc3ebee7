"""What a stream cap costs a connect() (make bench).

A client process in a test cgroup connect()s over loopback to a server
outside it and closes each connection with a reset (so no TIME_WAIT piles
up), timing every connect() call. Three modes, in alternating rounds so
machine noise hits all alike:

  none     no cap: nothing of ours attached to the cgroup
  match    a cap in force on the cgroup whose destination matches
           (127.0.0.0/8, N far above what is reached): charge + count-down
  other    a cap in force on the cgroup for another destination: the hook
           runs but matches nothing

Reports the median connect() latency per mode, the median of the per-round
differences to `none`, and connects per second sustained (connect + close,
median over rounds). End-to-end numbers on a small VM are noisy, so it also
reports what each of our programs costs per run, from the kernel's BPF
run-time statistics (enabled for the run through BPF_ENABLE_STATS, which
ends when we exit).

Second, what a refuse-mode cap costs per socket that sends data (issue 30):
sockets in the capped cgroup each send --bytes over loopback with an
Ethernet-sized MSS (so ACKs come as on a real path), and the BPF run time of
all our programs is summed per socket. *before*: tb_cap_pace turns on the
per-ACK RTT callback for every socket of a capped cgroup, as it did until
issue 30 (the same object, loaded with rtt_for_all set, through
TAMEBPF_BENCH_RTT_FOR_ALL); *after*: only for paced sockets. The two
alternate round by round in one run.

Writes its sections of docs/performance.md with --write.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import secrets
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator

from tamebpf.cap.spec import parse_dest
from tamebpf.cap.table import CapTable
from tamebpf.kernel.cgroups import require_cgroup2
from tamebpf_bench.bpfstats import bpf_run_stats, bpftool_json, prog_runs
from tamebpf_eval.commands import pin_dir
from tamebpf_eval.docsection import markers, write_section

START, END = markers("bench_cap")
MODES = ("none", "match", "other")
DESTS = {"match": "127.0.0.0/8", "other": "198.18.0.0/15"}

SERVER = r"""
import socket, sys
lst = socket.socket()
lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
lst.bind(("127.0.0.1", 0))
lst.listen(4096)
print(lst.getsockname()[1], flush=True)
while True:
    conn, _ = lst.accept()
    conn.close()
"""

# "go K": K timed connect()s; answers with the latencies (ns) and the wall
# time of the whole batch.
CLIENT = r"""
import socket, struct, sys, time
port = int(sys.argv[1])
addr = ("127.0.0.1", port)
linger = struct.pack("ii", 1, 0)
clock = time.perf_counter_ns
for line in sys.stdin:
    k = int(line.split()[1])
    lat = []
    start = clock()
    for _ in range(k):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
        t0 = clock()
        s.connect(addr)
        lat.append(clock() - t0)
        s.close()
    wall = clock() - start
    print(wall, *lat, flush=True)
"""


def cap_prog_ids(cg: str, pin: str) -> set[int]:
    """Our programs on this cgroup and the global one (the pinned state link)."""
    ids = {int(p["id"]) for p in bpftool_json("cgroup", "show", cg)}  # type: ignore[attr-defined]
    link = bpftool_json("link", "show", "pinned", os.path.join(pin, "state"))
    ids.add(int(link["prog_id"]))  # type: ignore[index]
    return ids


def prog_costs(cg: str, pin: str) -> dict[str, tuple[int, int]]:
    """(runs, total ns) of our programs on this cgroup and the global one."""
    return {name: (runs, ns) for name, runs, ns in prog_runs(cap_prog_ids(cg, pin)).values()}


@contextlib.contextmanager
def bench_cgroup() -> Iterator[str]:
    path = os.path.join(require_cgroup2(), f"tamebpf-bench-{secrets.token_hex(3)}")
    os.mkdir(path)
    try:
        yield path
    finally:
        for _ in range(100):
            with contextlib.suppress(OSError):
                os.rmdir(path)
                break
            time.sleep(0.05)


Results = dict[str, dict[str, list[float]]]


def run(rounds: int, batch: int) -> tuple[Results, dict[str, dict[str, list[int]]]]:
    res: Results = {m: {"lat": [], "medians": [], "rates": []} for m in MODES}
    costs: dict[str, dict[str, list[int]]] = {m: {} for m in MODES if m != "none"}
    with bench_cgroup() as cg, pin_dir("tamebpf-bench-") as pin, bpf_run_stats():
        table = CapTable("bench")
        server = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE,
                                  text=True)
        assert server.stdout is not None
        port = server.stdout.readline().strip()

        def enter() -> None:
            with open(os.path.join(cg, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))

        client = subprocess.Popen([sys.executable, "-c", CLIENT, port], preexec_fn=enter,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert client.stdin is not None and client.stdout is not None
        try:
            client.stdin.write(f"go {batch}\n")  # warm-up, not counted
            client.stdin.flush()
            client.stdout.readline()
            for r in range(rounds):
                order = MODES[r % 3:] + MODES[:r % 3]
                for mode in order:
                    if mode != "none":
                        table.add(cg, parse_dest(DESTS[mode]), 1_000_000)
                    client.stdin.write(f"go {batch}\n")
                    client.stdin.flush()
                    wall, *lat = map(int, client.stdout.readline().split())
                    if mode != "none":
                        for name, (cnt, ns) in prog_costs(cg, pin).items():
                            acc = costs[mode].setdefault(name, [0, 0])
                            acc[0] += cnt
                            acc[1] += ns
                        cap = table.find(cg, parse_dest(DESTS[mode]))
                        table.remove(cg, parse_dest(DESTS[mode]))
                        assert cap is not None
                        want = batch if mode == "match" else 0
                        assert cap.charged == want, f"{mode}: {cap.charged} charged, not {want}"
                    res[mode]["lat"] += [x / 1000 for x in lat]
                    res[mode]["medians"].append(statistics.median(lat) / 1000)
                    res[mode]["rates"].append(batch / (wall / 1e9))
        finally:
            client.kill()
            server.kill()
            client.wait()
            server.wait()
            for mode, dest in DESTS.items():  # a failed round may have left one
                with contextlib.suppress(Exception):
                    table.remove(cg, parse_dest(dest))
                del mode
    return res, costs


# Drains every connection until EOF, then closes it.
SINK = r"""
import socket, sys, threading
lst = socket.socket()
lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
lst.bind(("127.0.0.1", 0))
lst.listen(4096)
print(lst.getsockname()[1], flush=True)
def drain(conn):
    while conn.recv(1 << 20):
        pass
    conn.close()
while True:
    conn, _ = lst.accept()
    threading.Thread(target=drain, args=(conn,), daemon=True).start()
"""

# "go K BYTES": K sockets one after another, each connects, sends BYTES with
# an MSS of 1448 (Ethernet's), waits for the server's close and closes.
SENDER = r"""
import socket, sys
port = int(sys.argv[1])
data = b"x" * (1 << 20)
for line in sys.stdin:
    _, k, size = line.split()
    for _ in range(int(k)):
        s = socket.socket()
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 1448)
        s.connect(("127.0.0.1", port))
        left = int(size)
        while left > 0:
            left -= s.send(data[:left])
        s.shutdown(socket.SHUT_WR)
        s.recv(1)
        s.close()
    print("done", flush=True)
"""
VARIANTS = ("before", "after")


def run_per_socket(rounds: int, sockets: int, size: int) -> dict[str, dict[str, list[int]]]:
    """(runs, ns) of each of our programs per variant, summed over rounds."""
    costs: dict[str, dict[str, list[int]]] = {v: {} for v in VARIANTS}
    with bench_cgroup() as cg, pin_dir("tamebpf-bench-") as pin, bpf_run_stats():
        table = CapTable("bench")
        server = subprocess.Popen([sys.executable, "-c", SINK], stdout=subprocess.PIPE,
                                  text=True)
        assert server.stdout is not None
        port = server.stdout.readline().strip()

        def enter() -> None:
            with open(os.path.join(cg, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))

        client = subprocess.Popen([sys.executable, "-c", SENDER, port], preexec_fn=enter,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert client.stdin is not None and client.stdout is not None
        dest = parse_dest("127.0.0.0/8")
        try:
            for r in range(rounds):
                for variant in VARIANTS[r % 2:] + VARIANTS[:r % 2]:
                    if variant == "before":
                        os.environ["TAMEBPF_BENCH_RTT_FOR_ALL"] = "1"
                    try:
                        table.add(cg, dest, 1_000_000)  # refuse mode, never binds
                    finally:
                        os.environ.pop("TAMEBPF_BENCH_RTT_FOR_ALL", None)
                    client.stdin.write(f"go {sockets} {size}\n")
                    client.stdin.flush()
                    assert client.stdout.readline().strip() == "done"
                    for name, (cnt, ns) in prog_costs(cg, pin).items():
                        acc = costs[variant].setdefault(name, [0, 0])
                        acc[0] += cnt
                        acc[1] += ns
                    table.remove(cg, dest)
        finally:
            client.kill()
            server.kill()
            client.wait()
            server.wait()
            with contextlib.suppress(Exception):
                table.remove(cg, dest)
    return costs


def per_socket_section(costs: dict[str, dict[str, list[int]]], rounds: int, sockets: int,
                       size: int) -> str:
    per = {v: sockets * rounds for v in VARIANTS}  # every round runs both variants
    start, end = markers("bench_cap_refuse")
    total = {v: sum(ns for _, ns in costs[v].values()) / per[v] for v in VARIANTS}
    lines = [
        start,
        "## cap: BPF time per socket of a refuse-mode cap",
        "",
        f"A refuse-mode cap (never binding) on a test cgroup; {sockets} sockets per round "
        f"one after another, each sending {size // 1024} KiB over loopback with an MSS of "
        f"1448 bytes, then closing; {rounds} rounds, the two variants alternating within "
        "each round. *before*: `tb_cap_pace` turns on the per-ACK RTT callback for every "
        "socket of a capped cgroup, as an earlier version did (the same object loaded with "
        "`rtt_for_all` set); *after*: only for sockets a pace cap paces. Runs and time "
        "from the kernel's BPF run-time statistics, per socket. `tb_cap_state` runs for "
        "every TCP state change on the host, so other traffic adds to it.",
        "",
        "Measured on this VM: "
        f"Linux {platform.release()}, {os.cpu_count()} CPUs.",
        "",
        "| program | before: runs per socket | before: ns per socket "
        "| after: runs per socket | after: ns per socket |",
        "|---|---|---|---|---|",
    ]
    names = sorted(set(costs["before"]) | set(costs["after"]))
    for name in names:
        b = costs["before"].get(name, [0, 0])
        a = costs["after"].get(name, [0, 0])
        if not b[0] and not a[0]:
            continue  # (connect6: the sockets are IPv4)
        lines.append(f"| {name} | {b[0] / per['before']:.1f} | {b[1] / per['before']:.0f} "
                     f"| {a[0] / per['after']:.1f} | {a[1] / per['after']:.0f} |")
    lines.append(f"| **all** | | **{total['before']:.0f}** | | **{total['after']:.0f}** |")
    cmd = " ".join(["-m tamebpf_bench.bench_cap", *sys.argv[1:]])
    lines += ["", f"After / before: {total['after'] / total['before']:.3f} of the BPF time "
              "per socket.", "",
              f"Reproduce: `sudo .venv/bin/python {cmd}` (also run by `make bench`).",
              end]
    return "\n".join(lines) + "\n"


def section(res: Results, costs: dict[str, dict[str, list[int]]], rounds: int,
            batch: int) -> str:
    base = res["none"]
    lines = [
        START,
        "## cap: connect() overhead",
        "",
        f"Loopback connect() from a process in a test cgroup, closed with a reset; "
        f"{rounds} rounds of {batch} connects per mode, modes alternating within each "
        "round. *none*: no cap on the cgroup; *match*: a cap in force whose destination "
        "matches (every connect is charged and later counted down); *other*: a cap in "
        "force for another destination (the hook runs, matches nothing). Latency is the "
        "connect() call alone as Python's `perf_counter_ns` sees it; connects/s is "
        "connect + close back to back, one process.",
        "",
        "Measured on this VM: "
        f"Linux {platform.release()}, {os.cpu_count()} CPUs.",
        "",
        "| mode | connect() median µs | p90 µs | added vs none, µs (median of rounds) "
        "| connects/s (median of rounds) | connects/s vs none (median of round ratios) |",
        "|---|---|---|---|---|---|",
    ]
    for mode in MODES:
        r = res[mode]
        lat = sorted(r["lat"])
        p90 = lat[int(0.9 * (len(lat) - 1))]
        diffs = [m - b for m, b in zip(r["medians"], base["medians"], strict=True)]
        ratios = [m / b for m, b in zip(r["rates"], base["rates"], strict=True)]
        added = "—" if mode == "none" else f"{statistics.median(diffs):+.2f}"
        ratio = "—" if mode == "none" else f"{statistics.median(ratios):.3f}"
        lines.append(f"| {mode} | {statistics.median(lat):.2f} | {p90:.2f} | {added} "
                     f"| {statistics.median(r['rates']):.0f} | {ratio} |")
    lines += [
        "",
        "In-kernel cost per program run (BPF run-time statistics, same run): the connect "
        "hook is what a capped cgroup's connect() pays; `tb_cap_release` runs once per "
        "socket closed in a capped cgroup; `tb_cap_state` runs on every TCP state change "
        "on the host (any cgroup) while a cap exists, and does real work only on "
        "TCP_CLOSE of a charged socket.",
        "",
        "| program | mode | runs | ns per run |",
        "|---|---|---|---|",
    ]
    for mode, progs in costs.items():
        for name, (cnt, ns) in sorted(progs.items()):
            if cnt:
                lines.append(f"| {name} | {mode} | {cnt} | {ns / cnt:.0f} |")
    cmd = " ".join(["-m tamebpf_bench.bench_cap", *sys.argv[1:]])
    lines += ["", f"Reproduce: `sudo .venv/bin/python {cmd}` (also run by `make bench`).",
              "Loopback on a 2-CPU VM shared with other runs is noisy; compare modes within "
              "one run only. The in-kernel table is the steadier measure of what a cap adds.",
              END]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15, help="alternating rounds")
    ap.add_argument("--batch", type=int, default=2000, help="connects per mode and round")
    ap.add_argument("--sockets", type=int, default=20,
                    help="per-socket part: sockets per variant and round")
    ap.add_argument("--bytes", type=int, default=1 << 20,
                    help="per-socket part: bytes each socket sends")
    ap.add_argument("--per-socket-only", action="store_true",
                    help="only the per-socket part (the refuse-mode cap's BPF time)")
    ap.add_argument("--write", metavar="FILE", help="write the section into this Markdown file")
    args = ap.parse_args()
    if not args.per_socket_only:
        res, costs = run(args.rounds, args.batch)
        text = section(res, costs, args.rounds, args.batch)
        sys.stdout.write(text)
        if args.write:
            write_section(args.write, "bench_cap", text, "Performance")
    per = run_per_socket(args.rounds, args.sockets, args.bytes)
    text = per_socket_section(per, args.rounds, args.sockets, args.bytes)
    sys.stdout.write(text)
    if args.write:
        write_section(args.write, "bench_cap_refuse", text, "Performance")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

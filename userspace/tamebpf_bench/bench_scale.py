"""How tamebpf's views scale with the number of TCP flows (make bench).

For each size, idle loopback connections are opened (each connection is two
flows: both ends are on this host) by two helper processes, then timed:

  iterator    one kernel read of every flow (FlowReader.records: the TCP
              iterator and the copy into Python, no Flow objects)
  snapshot    FlowReader.snapshot(): the same, as Flow objects
  refresh     refresh_groups on the reader: what watch and export do per
              refresh (the kernel read, the library's comparison with the last
              snapshot, Flow objects for what changed, the group sums)
  scrape      GET /metrics from a running `tamebpf export` (median of 3,
              spaced so that each one reads the kernel)
  watch       `tamebpf watch --once`, a whole process (median of 3)
  flows       `tamebpf flows --json`, a whole process (median of 3)
  ss          `ss -tin`, the same flows, for comparison
  RSS         the exporter's resident memory after its scrapes

Connections, processes and the exporter are created and removed by the
benchmark. Writes its section of docs/performance.md with --write.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator

from prometheus_client import generate_latest

from tamebpf.exporter.collector import TamebpfCollector, make_registry
from tamebpf.groups.aggregate import Aggregator
from tamebpf.kernel.flows import FlowReader
from tamebpf.refresh import refresh_groups
from tamebpf_eval.docsection import markers, write_section

START, END = markers("bench_scale")
PORT = 5291
EXPORT_PORT = 9491
# Connections per server address and per helper process: below the
# ephemeral port range and below the open-files limit a process may have.
PER_ADDRESS = 15000

# Holds connections: listens on 127.0.0.N:PORT for each address given,
# accepts everything, keeps every socket open until killed.
SERVER = r"""
import resource, selectors, socket, sys
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
sel = selectors.DefaultSelector()
for addr in sys.argv[3:]:
    lst = socket.socket()
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.bind((addr, int(sys.argv[2])))
    lst.listen(4096)
    lst.setblocking(False)
    sel.register(lst, selectors.EVENT_READ)
print("ready", flush=True)
held = []
while True:
    for key, _ in sel.select():
        while True:
            try:
                conn, _ = key.fileobj.accept()
            except BlockingIOError:
                break
            held.append(conn)
"""

# Opens N connections over the addresses, then waits to be killed.
CLIENT = r"""
import resource, socket, sys
n, port, addrs = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
held = []
for i in range(n):
    s = socket.socket()
    s.connect((addrs[i % len(addrs)], port))
    held.append(s)
print("ready", flush=True)
sys.stdin.read()
"""


# Opens and closes connections to a listener of its own, forever: flows
# that come and go while the exporter is scraped.
CHURN = r"""
import socket, time
lst = socket.socket()
lst.bind(("127.0.0.1", 0))
lst.listen(256)
addr = lst.getsockname()
while True:
    conns = [socket.create_connection(addr) for _ in range(50)]
    peers = [lst.accept()[0] for _ in conns]
    time.sleep(0.01)
    for s in conns + peers:
        s.close()
"""


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def connections(n: int) -> Iterator[None]:
    """n idle loopback connections (2n flows), gone on exit: one server and
    one client process per PER_ADDRESS of them, each on its own 127.0.0.N."""
    procs: list[subprocess.Popen[str]] = []
    try:
        for i, start in enumerate(range(0, n, PER_ADDRESS)):
            addr, count = f"127.0.0.{i + 1}", min(PER_ADDRESS, n - start)
            server = subprocess.Popen([sys.executable, "-c", SERVER, "0", str(PORT), addr],
                                      stdout=subprocess.PIPE, text=True)
            procs.append(server)
            assert server.stdout is not None
            if server.stdout.readline().strip() != "ready":
                raise SystemExit(f"the connection server on {addr} did not start")
            client = subprocess.Popen([sys.executable, "-c", CLIENT, "0", str(count),
                                       str(PORT), addr], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True)
            procs.append(client)
            assert client.stdout is not None
            if client.stdout.readline().strip() != "ready":
                raise SystemExit(f"could not open {count} connections to {addr}")
        yield
    finally:
        for proc in reversed(procs):
            proc.kill()
            proc.wait()


def timed(fn: Callable[[], object], repeat: int = 3) -> float:
    """Median seconds of fn() over repeat calls."""
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def tamebpf(*argv: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "tamebpf", *argv], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=True, timeout=300)
    return time.perf_counter() - t0


def exporter_numbers() -> tuple[float, float]:
    """(median scrape seconds, RSS MB) of a real `tamebpf export`."""
    proc = subprocess.Popen([sys.executable, "-m", "tamebpf", "export", "--listen",
                             f"127.0.0.1:{EXPORT_PORT}"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{EXPORT_PORT}/metrics"
    try:
        for _ in range(300):
            with contextlib.suppress(OSError):
                urllib.request.urlopen(url, timeout=60).read()
                break
            time.sleep(0.1)
        scrapes = []
        for _ in range(3):
            time.sleep(1.5)  # scrapes close together share one reading
            t0 = time.perf_counter()
            urllib.request.urlopen(url, timeout=60).read()
            scrapes.append(time.perf_counter() - t0)
        with open(f"/proc/{proc.pid}/status") as f:
            rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        return statistics.median(scrapes), rss / 1024
    finally:
        proc.terminate()
        proc.wait(10)


def measure(n: int) -> dict[str, float]:
    row: dict[str, float] = {"connections": n}
    with connections(n):
        log(f"{n} connections open")
        with FlowReader(command="bench") as reader:
            row["flows"] = len(reader.records())
            row["iterator"] = timed(reader.records)
            row["snapshot"] = timed(reader.snapshot)
        with FlowReader(command="bench") as reader:  # a reader of its own: changes()
            agg = Aggregator()
            refresh_groups(agg, reader)  # the baseline: every flow is new
            row["refresh"] = timed(lambda: refresh_groups(agg, reader))
        row["scrape"], row["rss_mb"] = exporter_numbers()
        # Whole processes, median of 3 like the rest: one run is at the
        # mercy of the VM's neighbours.
        row["watch"] = timed(lambda: tamebpf("watch", "--once"))
        row["flows_json"] = timed(lambda: tamebpf("flows", "--json"))
        t0 = time.perf_counter()
        subprocess.run(["ss", "-tin"], stdout=subprocess.DEVNULL, check=True, timeout=300)
        row["ss"] = time.perf_counter() - t0
    log(f"{n}: {row}")
    return row


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def leak_check(connections_open: int, scrapes: int) -> dict[str, float]:
    """The exporter's collector in this process, scraped `scrapes` times
    (each one reading the kernel) while connections open and close: RSS
    after the first tenth of the scrapes and at the end."""
    churn = subprocess.Popen([sys.executable, "-c", CHURN])
    try:
        with connections(connections_open), FlowReader(command="bench") as reader:
            col = TamebpfCollector(reader, Aggregator(retain_s=60.0))
            registry = make_registry(col)
            early = 0.0
            for i in range(scrapes):
                col.read(max_age_s=0.0)
                generate_latest(registry)
                if i == scrapes // 10:
                    early = rss_mb()
            return {"scrapes": scrapes, "flows": connections_open * 2, "early_mb": early,
                    "late_mb": rss_mb()}
    finally:
        churn.kill()
        churn.wait()


def section(rows: list[dict[str, float]], leak: dict[str, float] | None = None) -> str:
    def ms(x: float) -> str:
        return f"{x * 1000:.0f} ms" if x < 10 else f"{x:.1f} s"

    lines = [START, "## Scale: views and scrapes against the number of flows", "",
             "Idle loopback connections (each is two flows), made and removed by "
             "`tamebpf_bench.bench_scale` (`make bench`). *iterator*: one kernel read into "
             "Python records; *snapshot*: the same as Flow objects (what `flows` does for "
             "its table; `flows --json` writes the values without them); "
             "*refresh*: what watch and export do per refresh (the kernel read, the "
             "library's comparison with the last snapshot, Flow objects only for what "
             "changed, the group sums); *scrape*: GET /metrics from "
             "a running `tamebpf export` (median of 3, each reading the kernel); *watch* "
             "and *flows --json*: whole processes (median of 3); `ss -tin` on the same flows for "
             "comparison. Targets: at 10k flows scrape and refresh <= 50 ms; at "
             "100k <= 400 ms, `flows --json` <= 2 s, exporter RSS <= 100 MB.", "",
             f"Measured on this VM: Linux {platform.release()}, "
             f"{os.cpu_count()} CPUs.", "",
             "| flows | iterator | snapshot | refresh | scrape | watch --once | flows --json "
             "| ss -tin | exporter RSS |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {int(r['flows']):,} | {ms(r['iterator'])} | {ms(r['snapshot'])} "
                     f"| {ms(r['refresh'])} | {ms(r['scrape'])} | {ms(r['watch'])} "
                     f"| {ms(r['flows_json'])} | {ms(r['ss'])} | {r['rss_mb']:.0f} MB |")
    if leak:
        lines += ["", f"Leak check: the exporter's collector scraped {int(leak['scrapes'])} "
                  f"times (each reading the kernel) over {int(leak['flows']):,} idle flows "
                  "while 50 connections at a time opened and closed: RSS "
                  f"{leak['early_mb']:.1f} MB after the first tenth, {leak['late_mb']:.1f} MB "
                  f"at the end ({leak['late_mb'] - leak['early_mb']:+.1f} MB)."]
    return "\n".join(lines + [END, ""])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--connections", default="500,5000,50000",
                    help="sizes, in connections (each two flows; default %(default)s)")
    ap.add_argument("--scrapes", type=int, default=1000,
                    help="scrapes of the leak check (0: skip it; default %(default)s)")
    ap.add_argument("--write", metavar="FILE")
    a = ap.parse_args()
    # The leak check first: this process's RSS must not carry the big sizes' memory.
    leak = leak_check(500, a.scrapes) if a.scrapes > 0 else None
    rows = [measure(int(n)) for n in a.connections.split(",")]
    if leak:
        log(f"leak check: {leak}")
    text = section(rows, leak)
    sys.stdout.write(text)
    if a.write:
        write_section(a.write, "bench_scale", text, "Performance")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

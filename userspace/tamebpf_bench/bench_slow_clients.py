"""The exporter beside clients that hold connections with half a request
(make bench): its threads and memory, and how long a scrape takes, idle
and with N such connections open, and after their deadline has closed
them. Writes its section of docs/metrics.md with --write.
"""

from __future__ import annotations

import argparse
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from tamebpf.exporter.server import HEAD_TIMEOUT_S
from tamebpf_eval.docsection import markers, write_section

START, END = markers("bench_slow_clients")
HALF = b"GET /metrics HTTP/1.1\r\nHost: bench\r\n"


def status(pid: int) -> tuple[int, float]:
    """Threads and resident memory (MiB) of pid."""
    text = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    return int(fields["Threads"]), int(fields["VmRSS"].split()[0]) / 1024


def scrape_s(url: str, n: int) -> float:
    """The median time of n scrapes, one after another."""
    times = []
    for _ in range(n):
        t0 = time.monotonic()
        with urllib.request.urlopen(url, timeout=10) as r:  # noqa: S310 - loopback
            r.read()
        times.append(time.monotonic() - t0)
    return statistics.median(times)


def measure(clients: int, scrapes: int) -> list[tuple[str, int, float, float]]:
    rows = []
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, "-m", "tamebpf", "export", "--no-learn",
                                 "--listen", "127.0.0.1:0"], stdout=subprocess.DEVNULL,
                                stderr=err)
        try:
            url = ""
            for _ in range(150):
                err.seek(0)
                m = re.search(r"serving metrics on (\S+)", err.read())
                if m:
                    url = m.group(1)
                    break
                time.sleep(0.1)
            if not url:
                raise SystemExit(f"the exporter did not start: {err.read()}")
            port = int(url.rsplit(":", 1)[1].split("/")[0])
            scrape_s(url, 1)
            rows.append(("idle", *status(proc.pid), scrape_s(url, scrapes)))
            socks = []
            try:
                for _ in range(clients):
                    s = socket.create_connection(("127.0.0.1", port), timeout=5)
                    s.sendall(HALF)
                    socks.append(s)
                rows.append((f"{clients} held", *status(proc.pid), scrape_s(url, scrapes)))
                time.sleep(HEAD_TIMEOUT_S + 2)
                rows.append(("after their deadline", *status(proc.pid),
                             scrape_s(url, scrapes)))
            finally:
                for s in socks:
                    s.close()
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    return rows


def report(rows: list[tuple[str, int, float, float]], clients: int, scrapes: int) -> str:
    lines = [START, f"`make bench` (tamebpf_bench.bench_slow_clients): `tamebpf export`, "
             f"{clients} connections each sent half a request (no blank line), a scrape's "
             f"median of {scrapes}.", "",
             "| exporter | threads | RSS MiB | scrape ms |", "|---|---|---|---|"]
    for what, threads, rss, took in rows:
        lines.append(f"| {what} | {threads} | {rss:.1f} | {took * 1e3:.1f} |")
    return "\n".join([*lines, END]) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=500)
    ap.add_argument("--scrapes", type=int, default=10)
    ap.add_argument("--write", metavar="FILE", help="write the section into this Markdown file")
    args = ap.parse_args()
    text = report(measure(args.clients, args.scrapes), args.clients, args.scrapes)
    sys.stdout.write(text)
    if args.write:
        write_section(args.write, "bench_slow_clients", text, "Metrics")
    return 0


if __name__ == "__main__":
    sys.exit(main())

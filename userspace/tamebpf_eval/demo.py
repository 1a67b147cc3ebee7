"""The whole tool on an embedded default (make run): no network of yours.

1. a WAN testbed in network namespaces (50 Mbit/s, 40 ms, 50-packet queue);
2. cross traffic: 2 CUBIC flows that were there first;
3. `tamebpf advise` against the testbed's receiver (two probes, each until
   its share of the path has settled: seconds here, up to 15 s each on long
   crowded paths; the progress line shows them); the same again, answered
   from path memory at once without sending anything; then `--quick`;
4. a transfer that uses too many streams: 4 streams, then 16, while
5. `tamebpf watch` looks at the sender: live when run in a terminal (q quits),
   otherwise (or with --batch) a few printed refreshes.
Everything is torn down afterwards, also on Ctrl-C or an error; path memory
lives in a temporary directory that goes with it.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from types import FrameType

from tamebpf.common.errors import TamebpfError
from tamebpf_testbed import Testbed, iperf, teardown

PORT_GREEDY, PORT_CROSS, PORT_ADVISE = 5201, 5202, 5203
WATCH_START_S = 2.0


def say(step: str) -> None:
    print(f"\n== {step}", flush=True)


def tamebpf(*args: str) -> list[str]:
    return [sys.executable, "-m", "tamebpf", *args]


def greedy_transfer(tb: Testbed, rcv: str, procs: list[subprocess.Popen[bytes]]) -> None:
    time.sleep(WATCH_START_S)  # watch is loading its programs
    for streams, seconds in ((4, 6), (16, 600)):
        p = tb.popen("sender", iperf.client_argv(rcv, PORT_GREEDY, streams, seconds, "cubic",
                                                   json_out=False),
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(p)
        if seconds < 600:
            p.wait()


def _sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", action="store_true",
                    help="never open the live view: print refreshes and exit")
    ap.add_argument("--refreshes", type=int, default=16, help="refreshes printed in batch mode")
    args = ap.parse_args()
    live = sys.stdin.isatty() and sys.stdout.isatty() and not args.batch
    signal.signal(signal.SIGTERM, _sigterm)

    name = "demo" + secrets.token_hex(2)
    procs: list[subprocess.Popen[bytes]] = []
    memory = tempfile.TemporaryDirectory(prefix="tamebpf-demo-state-")
    os.environ["TAMEBPF_STATE_DIR"] = memory.name  # not the host's /var/lib/tamebpf
    try:
        say("1/5 testbed: 50 Mbit/s bottleneck, 40 ms RTT, 50-packet drop-tail queue, CUBIC")
        tb = Testbed.up(name, 50.0, 40.0, 50, cc="cubic")
        rcv = tb.addresses["receiver"]
        print(f"namespaces {', '.join(tb.namespaces.values())}; receiver {rcv}")
        for port in (PORT_GREEDY, PORT_CROSS, PORT_ADVISE):
            procs.append(iperf.start_server(tb, port))

        say("2/5 cross traffic: 2 flows from the cross-traffic host, started first")
        cross = tb.popen("cross", iperf.client_argv(rcv, PORT_CROSS, 2, 3600, "cubic",
                                                     json_out=False),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        procs.append(cross)
        # There first: both flows up and past slow start, the queue full.
        iperf.wait_past_slow_start(tb, "cross", PORT_CROSS, 2, cross)

        say(f"3/5 tamebpf advise {rcv}:{PORT_ADVISE} --max-impact 10% (two probes, each "
            "until its share has settled,\n    at most 15 s: the line below shows them)")
        advise = ["advise", f"{rcv}:{PORT_ADVISE}", "--max-impact", "10%", "--netns",
                  tb.namespaces["sender"], "--congestion", "cubic", "--max-streams", "16"]
        subprocess.run(tamebpf(*advise), check=True)
        say("    the same again: path memory answers at once and sends nothing (--fresh "
            "probes again)")
        start = time.monotonic()
        subprocess.run(tamebpf(*advise), check=True)
        print(f"(answered in {time.monotonic() - start:.2f} s)")
        say("    with --quick --fresh (two fixed 2-s probes: a quick look)")
        subprocess.run(tamebpf(*advise, "--quick", "--fresh"), check=True)

        say("4/5 a transfer that uses too many streams (iperf3 -P 4, then -P 16), and\n"
            "    5/5 tamebpf watch on the sender" + (" (q quits)" if live else ""))
        # One watch sees both phases, so its passive fit has two stream counts.
        phases = threading.Thread(target=greedy_transfer, args=(tb, rcv, procs), daemon=True)
        phases.start()
        watch_args = ["watch", "--netns", tb.namespaces["sender"], "--max-impact", "10%",
                      "--max-streams", "16"]
        if live:
            subprocess.run(tamebpf(*watch_args), check=False)
        else:
            subprocess.run(tamebpf(*watch_args, "--iterations", str(args.refreshes)),
                           check=True)
        return 0
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except TamebpfError as err:  # a testbed step failed (e.g. its cross traffic never started)
        print(f"demo: {err}", file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as err:
        print(f"demo: {' '.join(map(str, err.cmd[2:]))} failed with status {err.returncode}",
              file=sys.stderr)
        return 1
    finally:
        say("tearing down the testbed")
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        teardown(name)
        memory.cleanup()
        print("done: nothing left behind", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())

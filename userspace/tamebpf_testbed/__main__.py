"""CLI behind scripts/testbed and scripts/sweep.

    python -m tamebpf_testbed up NAME --rate MBIT --rtt MS --queue PKTS [--rate-back MBIT]
                                 [--senders 2] [...]
    python -m tamebpf_testbed down NAME
    python -m tamebpf_testbed exec NAME ROLE -- CMD...
    python -m tamebpf_testbed status NAME
    python -m tamebpf_testbed sweep NAME --streams 1,2,4 [...]   (see sweep --help)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from tamebpf.common.errors import TamebpfError
from tamebpf_testbed import config as C
from tamebpf_testbed.testbed import Testbed, teardown


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="testbed", description="emulated WAN testbed")
    sub = p.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="create a testbed and print it as JSON")
    up.add_argument("name")
    up.add_argument("--rate", type=float, required=True, help="bottleneck rate, Mbit/s")
    up.add_argument("--rtt", type=float, required=True, help="base RTT, ms")
    up.add_argument("--queue", type=int, required=True, help="bottleneck queue, packets")
    up.add_argument("--rate-back", type=float, default=None, metavar="MBIT",
                    help="receiver-to-sender rate, Mbit/s (default: --rate)")
    up.add_argument("--senders", type=int, default=1, choices=range(1, C.MAX_SENDERS + 1),
                    help="sender namespaces behind the bottleneck (2 adds sender2)")
    up.add_argument("--aqm", choices=C.AQMS, default="droptail")
    up.add_argument("--loss", type=float, default=0.0, help="random loss, percent")
    up.add_argument("--cross-rtt", type=float, default=None, help="cross traffic RTT, ms")
    up.add_argument("--cc", choices=C.CCS, default="cubic", help="default congestion control")
    up.add_argument("--seed", type=int, default=1, help="seed for loss and RED")
    down = sub.add_parser("down", help="remove a testbed (safe to repeat)")
    down.add_argument("name")
    ex = sub.add_parser("exec", help="run a command in one of the namespaces")
    ex.add_argument("name")
    ex.add_argument("role", choices=C.ROLES)
    ex.add_argument("argv", nargs=argparse.REMAINDER)
    st = sub.add_parser("status", help="print a testbed as JSON; exit 1 if unhealthy")
    st.add_argument("name")
    sw = sub.add_parser("sweep", help="measure throughput vs streams (see scripts/sweep)",
                        add_help=False)
    sw.add_argument("rest", nargs=argparse.REMAINDER)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["sweep"]:  # its own parser: argparse cannot pass options through
        from tamebpf_testbed.sweep import main as sweep_main

        try:
            return sweep_main(argv[1:])
        except TamebpfError as err:
            print(f"sweep: {err}", file=sys.stderr)
            return err.exit_code
    args = _parser().parse_args(argv)
    try:
        if args.cmd == "up":
            tb = Testbed.up(args.name, args.rate, args.rtt, args.queue, aqm=args.aqm,
                            loss_pct=args.loss, cross_rtt_ms=args.cross_rtt, cc=args.cc,
                            seed=args.seed, rate_back_mbit=args.rate_back,
                            senders=args.senders)
            print(json.dumps(tb.describe()))
        elif args.cmd == "down":
            teardown(args.name)
        elif args.cmd == "exec":
            cmd = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
            if not cmd:
                raise TamebpfError("exec needs a command", "testbed exec NAME ROLE -- CMD...")
            tb = Testbed.attach(args.name)
            sys.stdout.flush()
            os.execvp("ip", tb.argv(args.role, cmd))
        elif args.cmd == "status":
            tb = Testbed.attach(args.name)
            d = tb.describe()
            d["dead_delay_lines"] = tb.dead_delay_lines()
            print(json.dumps(d))
            return 1 if d["dead_delay_lines"] else 0
    except TamebpfError as err:
        print(f"testbed: {err}", file=sys.stderr)
        return err.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())

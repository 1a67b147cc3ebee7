"""A small ICMP echo client (this machine has no ping binary).

Run inside a namespace: ``python -m tamebpf_testbed.ping DST -c N -i S``;
prints JSON {"sent", "received", "rtt_ms": [...], "lost_seq": [...]} (one
RTT per reply, in order of sequence number; the sequence numbers lost). Raw sockets need root.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import struct
import sys
import time
from collections.abc import Sequence


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s: int = sum(struct.unpack(f"!{len(data) // 2}H", data))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # SCM_TIMESTAMPNS is the same


def _kernel_time_ns(ancillary: list[tuple[int, int, bytes]]) -> int | None:
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16:
            sec, nsec = struct.unpack("qq", data[:16])
            return int(sec * 1_000_000_000 + nsec)
    return None


def ping(dst: str, count: int, interval: float, size: int = 56,
         timeout: float = 2.0) -> dict[str, object]:
    v6 = ":" in dst
    fam, proto, req, rep = ((socket.AF_INET6, socket.IPPROTO_ICMPV6, 128, 129) if v6
                            else (socket.AF_INET, socket.IPPROTO_ICMP, 8, 0))
    ident = os.getpid() & 0xFFFF
    sent: dict[int, int] = {}
    rtts: dict[int, float] = {}
    with socket.socket(fam, socket.SOCK_RAW, proto) as sock:
        # Receive times from the kernel (SO_TIMESTAMPNS, wall clock), not from
        # when Python wakes up: a busy VM adds up to a few hundred us of
        # wake-up latency that is not the path's. Send times are taken on the
        # same clock just before sendto.
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        next_send = time.monotonic()
        seq = 0
        deadline = None
        while True:
            now = time.monotonic()
            if seq < count and now >= next_send:
                payload = b"\xa5" * size
                hdr = struct.pack("!BBHHH", req, 0, 0, ident, seq)
                csum = 0 if v6 else _checksum(hdr + payload)  # the kernel fills v6's
                pkt = struct.pack("!BBHHH", req, 0, csum, ident, seq) + payload
                sent[seq] = time.time_ns()
                sock.sendto(pkt, (dst, 0))
                seq += 1
                next_send += interval
                if seq == count:
                    deadline = time.monotonic() + timeout
            if deadline is not None and (time.monotonic() >= deadline or len(rtts) == count):
                break
            wait = (next_send if seq < count else (deadline or now)) - time.monotonic()
            ready, _, _ = select.select([sock], [], [], max(0.0, wait))
            if not ready:
                continue
            data, anc, _, _ = sock.recvmsg(65535, socket.CMSG_SPACE(16))
            t = _kernel_time_ns(anc) or time.time_ns()
            icmp = data if v6 else data[(data[0] & 0x0F) * 4:]
            typ, _, _, rid, rseq = struct.unpack("!BBHHH", icmp[:8])
            if typ == rep and rid == ident and rseq in sent and rseq not in rtts:
                rtts[rseq] = (t - sent[rseq]) / 1e6
    return {"sent": count, "received": len(rtts),
            "rtt_ms": [round(rtts[s], 4) for s in sorted(rtts)],
            "lost_seq": [s for s in range(count) if s not in rtts]}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tamebpf_testbed.ping")
    p.add_argument("dst")
    p.add_argument("-c", "--count", type=int, default=10)
    p.add_argument("-i", "--interval", type=float, default=0.1)
    p.add_argument("-s", "--size", type=int, default=56)
    p.add_argument("-W", "--timeout", type=float, default=2.0)
    a = p.parse_args(argv)
    json.dump(ping(a.dst, a.count, a.interval, a.size, a.timeout), sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())

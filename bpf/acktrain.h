/* SPDX-License-Identifier: GPL-2.0 */
/*
 * ACK arrival log of the advisor's probe connections (bpf/acktrain.bpf.c),
 * read by userspace/c/lib/acktrain.c and mirrored in
 * userspace/tamebpf/kernel/abi.py (tests/unit/test_abi.py checks them).
 */
#ifndef TAMEBPF_ACKTRAIN_H
#define TAMEBPF_ACKTRAIN_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* ACKs kept per probe: a 2 s probe at 150 Mbit/s with an ACK per two
 * segments brings about 13,000; later ACKs are counted, not kept. */
#define TB_ACKS_MAX (1U << 17)
/* Probe connections told apart (data streams and iperf3's control one). */
#define TB_ACK_FLOWS_MAX 256

/* One ACK that moved a probe connection's cumulative ACK forward; in
 * receive mode, one data segment that brought new data (beyond all data
 * received before), ack_seq then its end sequence. */
struct tb_ack {
	__u64 t_ns;    /* CLOCK_MONOTONIC when TCP received it */
	__u32 ack_seq; /* cumulative ACK (receive: end of the data), host order (wraps) */
	__u16 flow;    /* index into the cookie table */
	__u16 pad;
};

/* Receive mode: what one connection's data showed of the remote sender's
 * losses, as this end sees them. */
struct tb_rx_flow {
	__u64 segs;     /* data segments received */
	__u32 episodes; /* holes opened while none was open: the sender's loss events */
	__u32 fills;    /* segments that filled a hole: retransmissions (or reordering) */
	__u32 dups;     /* segments of data received already */
	__u32 pad;
};

#endif /* TAMEBPF_ACKTRAIN_H */

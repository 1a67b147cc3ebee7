/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Structures that cross the kernel/userspace boundary for flow telemetry.
 * Included by bpf/flows.bpf.c, the C library in userspace/c/lib/ and mirrored by
 * userspace/tamebpf/kernel/abi.py (tests/unit/test_abi.py checks all three
 * agree on sizes and offsets). Fixed-width types only, explicit padding.
 */
#ifndef TAMEBPF_FLOWS_H
#define TAMEBPF_FLOWS_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#define TB_COMM_LEN 16
#define TB_CC_LEN 16

/* tb_flow.flags */
#define TB_FLOW_CLOSED 0x1      /* final counters, taken as the socket closed */
#define TB_FLOW_START_KNOWN 0x2 /* start_ns is valid (we saw the handshake) */
#define TB_FLOW_OWNER_KNOWN 0x4 /* pid/comm are valid */

/* One TCP flow at one instant. Times are CLOCK_MONOTONIC nanoseconds. */
struct tb_flow {
	__u64 cookie;           /* socket cookie, stable for the socket's life */
	__u64 cgroup_id;        /* cgroup v2 id (inode number of its directory) */
	__u64 start_ns;         /* SYN sent / SYN received; valid if START_KNOWN */
	__u64 update_ns;        /* when these counters were read */
	__u64 bytes_acked;
	__u64 bytes_received;
	__u64 bytes_sent;
	__u64 bytes_retrans;
	__u32 segs_out;
	__u32 segs_in;
	__u32 data_segs_out;
	__u32 data_segs_in;
	__u32 total_retrans;    /* retransmitted segments, whole life */
	__u32 retrans_out;      /* retransmitted segments in flight */
	__u32 lost_out;
	__u32 srtt_us;          /* smoothed RTT, already divided by 8 */
	__u32 rttvar_us;        /* mdev / 4, as tcp_info reports it */
	__u32 min_rtt_us;
	__u32 snd_cwnd;
	__u32 snd_ssthresh;
	__u32 mss;
	__u32 rate_delivered;   /* delivery-rate sample: segments ... */
	__u32 rate_interval_us; /* ... over this interval */
	__u32 snd_wnd;          /* peer's advertised receive window, bytes */
	__u32 delivered;        /* segments the peer got (ACKed or SACKed), whole life */
	__u32 cong_events;      /* entries into CWR/Recovery/Loss seen since the
				 * flow started (0 if tamebpf was not loaded) */
	__u32 pid;              /* owning process (tgid); valid if OWNER_KNOWN */
	__u32 netns_ino;        /* network namespace inode */
	__u32 rcv_rtt_us;       /* RTT as this end receives data (tcp_info's
				 * rcv_rtt); 0 until data came */
	__u32 rcv_ooopack;      /* segments received out of order, whole life */
	__u16 family;           /* AF_INET or AF_INET6 */
	__u16 sport;            /* host byte order */
	__u16 dport;            /* host byte order */
	__u8 state;             /* TCP_ESTABLISHED, ... (include/net/tcp_states.h) */
	__u8 flags;             /* TB_FLOW_* */
	__u8 saddr[16];         /* IPv4 in the first 4 bytes, network order */
	__u8 daddr[16];
	char comm[TB_COMM_LEN];
	char cc[TB_CC_LEN];     /* congestion control name */
};

/* Counters the BPF side keeps about itself (global .bss, read via mmap). */
struct tb_flows_stats {
	__u64 closed_recorded;  /* flows whose final counters were kept */
	__u64 closed_dropped;   /* ... that did not fit in the closed map */
	__u64 owners_dropped;   /* socket storage could not be allocated */
};

#endif /* TAMEBPF_FLOWS_H */

// SPDX-License-Identifier: GPL-2.0
/*
 * SYN retransmission timeout for the advisor's probe connections.
 *
 * A probe opens its streams into a path that other traffic keeps congested,
 * and a full queue drops SYNs like any other packet. Linux resends a SYN
 * after 1 s (TCP_TIMEOUT_INIT), and the iperf3 server starts a test only
 * when every stream has connected, so one dropped SYN stalls the whole probe
 * for a second. Once the probe's control connection is up, the path's RTT is
 * known; this program answers BPF_SOCK_OPS_TIMEOUT_INIT for later sockets of
 * the same cgroup with the RTO TCP itself would use after that first sample
 * (RFC 6298: srtt + 4 * srtt / 2 = 3 srtt, at least TCP_RTO_MIN 200 ms),
 * and never more than the kernel's 1 s. Before any connection of the cgroup
 * is up, userspace may give a guess for the very first SYNs.
 *
 * Attached to the probe's own cgroup only: no other socket is touched.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

#define RTO_MIN_US 200000U
#define RTO_MAX_US 1000000U	/* the kernel's default: never slower */
#define SOCK_OPS_OK 1

/* The kernel's timer frequency: the reply is in jiffies. From the kernel's
 * config (libbpf reads /proc/config.gz or /boot/config-*); without one it
 * is 0 and the program leaves every SYN timeout at the default. */
extern unsigned int CONFIG_HZ __kconfig __weak;

/* Smoothed RTT in microseconds, from the first connection of the cgroup to
 * become established (userspace may seed it from an earlier probe). */
__u32 path_srtt_us = 0;
/* SYN timeout before any RTT is known, in microseconds (0: the kernel's). */
__u32 first_rto_us = 0;
/* SYN timeouts set (for tests and the curious). */
__u64 timeouts_set = 0;

SEC("sockops")
int set_syn_rto(struct bpf_sock_ops *skops)
{
	__u32 rto_us, srtt_us;

	switch (skops->op) {
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
		/* tcp_sock keeps srtt scaled by 8. A SYN that was resent gives
		 * no sample (Karn) without timestamps: srtt is then 0. */
		srtt_us = skops->srtt_us >> 3;
		if (srtt_us && !path_srtt_us)
			path_srtt_us = srtt_us;
		break;
	case BPF_SOCK_OPS_TIMEOUT_INIT:
		srtt_us = path_srtt_us;
		rto_us = srtt_us ? 3 * srtt_us : first_rto_us;
		if (!rto_us || !CONFIG_HZ)
			break; /* reply 0: the kernel's default */
		if (rto_us < RTO_MIN_US)
			rto_us = RTO_MIN_US;
		if (rto_us > RTO_MAX_US)
			rto_us = RTO_MAX_US;
		skops->reply = (rto_us * (__u64)CONFIG_HZ + 999999) / 1000000;
		__sync_fetch_and_add(&timeouts_set, 1);
		break;
	}
	return SOCK_OPS_OK;
}

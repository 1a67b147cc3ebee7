// SPDX-License-Identifier: GPL-2.0
/*
 * Per-flow TCP telemetry.
 *
 * Reading is pull-based and costs nothing between reads:
 *  - iter/tcp (dump_flows) writes one struct tb_flow per TCP socket when
 *    userspace reads the iterator; counters come straight from tcp_sock, so
 *    flows that existed before tamebpf started are covered.
 *  - tp_btf/inet_sock_set_state (on_state) fires only on state changes: it
 *    notes when a flow started and, when a socket reaches TCP_CLOSE, keeps its
 *    final counters in `closed` until userspace has read them.
 *  - iter/task_file (claim_owners) maps open sockets to the process holding
 *    them. The verifier does not trust the sock a file leads to, so the
 *    owner waits in `found_owners` by socket inode until the next iter/tcp
 *    pass moves it into socket storage, where it survives until close.
 *  - tp_btf/tcp_cong_state_set (on_cong_state) counts a flow's congestion
 *    events: each entry into CWR, Recovery or Loss from Open or Disorder is
 *    one window reduction, the step by which loss-based flows converge to
 *    their share (advise's stop rule counts them: docs/advise.md).
 * Nothing here runs per packet or per ACK: a congestion-state change happens
 * at most once per loss event.
 */
#include "common.bpf.h"
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_endian.h>
#include "flows.h"

char LICENSE[] SEC("license") = "GPL";

/* cgroup v2 subtree to report; 0 reports every cgroup. Set before load. */
const volatile __u64 target_cgid = 0;
const volatile __u32 target_level = 0;

struct tb_flows_stats stats = {};

/* What we learn about a socket outside the snapshot; freed with the socket. */
struct sk_info {
	__u64 start_ns;
	__u32 pid;
	__u32 flags; /* TB_FLOW_START_KNOWN | TB_FLOW_OWNER_KNOWN */
	char comm[TB_COMM_LEN];
	__u32 cong_events;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct sk_info);
} sk_info SEC(".maps");

/* Owners claim_owners found, by socket inode, for fill_flow to take.
 * Stamped with the scan that found them: one left by an earlier scan may
 * name a socket since closed whose inode number came back. */
struct found_owner {
	__u64 scan;
	__u32 pid;
	__u32 pad;
	char comm[TB_COMM_LEN];
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct found_owner);
} found_owners SEC(".maps");

/* Bumped by userspace before each claim_owners pass. */
__u64 owner_scan = 0;

/* Final counters of closed flows, by cookie; userspace deletes what it read.
 * Size is set by the loader; a full map counts stats.closed_dropped. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct tb_flow);
} closed SEC(".maps");

static __always_inline bool in_subtree(struct sock *sk)
{
	struct cgroup *cg;

	if (!target_cgid)
		return true;
	cg = sk->sk_cgrp_data.cgroup;
	if (!cg || cg->level < (int)target_level)
		return false;
	return tb_cgroup_ancestor_id(cg, target_level) == target_cgid;
}

/* The owner claim_owners found for sk in this scan, moved into its socket
 * storage `info` (made if NULL); `info` as it is when nothing was found. */
static __always_inline struct sk_info *take_owner(struct sock *sk, struct sk_info *info)
{
	__u64 ino = BPF_CORE_READ(sk, sk_socket, file, f_inode, i_ino);
	struct found_owner *found;

	if (!ino)
		return info;
	found = bpf_map_lookup_elem(&found_owners, &ino);
	if (!found)
		return info;
	if (found->scan == owner_scan) {
		if (!info)
			info = bpf_sk_storage_get(&sk_info, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
		if (!info) {
			__sync_fetch_and_add(&stats.owners_dropped, 1);
		} else {
			info->pid = found->pid;
			__builtin_memcpy(info->comm, found->comm, sizeof(info->comm));
			info->flags |= TB_FLOW_OWNER_KNOWN;
		}
	}
	bpf_map_delete_elem(&found_owners, &ino);
	return info;
}

static __always_inline void fill_flow(struct tb_flow *f, struct tcp_sock *tp,
				      __u64 now)
{
	struct sock *sk = (struct sock *)tp;
	struct sock_common *skc = &sk->__sk_common;
	struct cgroup *cg = sk->sk_cgrp_data.cgroup;
	const struct tcp_congestion_ops *ca = tp->inet_conn.icsk_ca_ops;
	struct sk_info *info;

	f->cookie = bpf_get_socket_cookie(sk);
	f->cgroup_id = cg ? BPF_CORE_READ(cg, kn, id) : 0;
	f->update_ns = now;
	f->bytes_acked = tp->bytes_acked;
	f->bytes_received = tp->bytes_received;
	f->bytes_sent = tp->bytes_sent;
	f->bytes_retrans = tp->bytes_retrans;
	f->segs_out = tp->segs_out;
	f->segs_in = tp->segs_in;
	f->data_segs_out = tp->data_segs_out;
	f->data_segs_in = tp->data_segs_in;
	f->total_retrans = tp->total_retrans;
	f->retrans_out = tp->retrans_out;
	f->lost_out = tp->lost_out;
	f->srtt_us = tp->srtt_us >> 3;
	f->rttvar_us = tp->mdev_us >> 2;
	f->min_rtt_us = tp->rtt_min.s[0].v;
	f->snd_cwnd = tp->snd_cwnd;
	f->snd_ssthresh = tp->snd_ssthresh;
	f->mss = tp->mss_cache;
	f->rate_delivered = tp->rate_delivered;
	f->rate_interval_us = tp->rate_interval_us;
	f->snd_wnd = tp->snd_wnd;
	f->delivered = tp->delivered;
	/* Kept << 3 as srtt_us is; a receiver's RTT, for flows that receive. */
	f->rcv_rtt_us = tp->rcv_rtt_est.rtt_us >> 3;
	f->rcv_ooopack = tp->rcv_ooopack;
	f->netns_ino = BPF_CORE_READ(skc, skc_net.net, ns.inum);
	f->family = skc->skc_family;
	f->sport = skc->skc_num;
	f->dport = bpf_ntohs(skc->skc_dport);
	f->state = skc->skc_state;
	if (f->family == AF_INET) {
		/* Four bytes, not sizeof(saddr): the rest stays zero instead of
		 * holding whatever follows the address in sock_common. */
		BPF_CORE_READ_INTO((__u32 *)f->saddr, skc, skc_rcv_saddr);
		BPF_CORE_READ_INTO((__u32 *)f->daddr, skc, skc_daddr);
	} else {
		BPF_CORE_READ_INTO(&f->saddr, skc, skc_v6_rcv_saddr);
		BPF_CORE_READ_INTO(&f->daddr, skc, skc_v6_daddr);
	}
	if (ca)
		bpf_probe_read_kernel_str(f->cc, sizeof(f->cc), ca->name);

	/* Only a flow whose owner is unknown looks for one: the one that
	 * connected wins, and most flows know theirs from the handshake. */
	info = bpf_sk_storage_get(&sk_info, sk, 0, 0);
	if (!info || !(info->flags & TB_FLOW_OWNER_KNOWN))
		info = take_owner(sk, info);
	if (info) {
		f->start_ns = info->start_ns;
		f->pid = info->pid;
		f->flags |= info->flags & (TB_FLOW_START_KNOWN | TB_FLOW_OWNER_KNOWN);
		__builtin_memcpy(f->comm, info->comm, sizeof(f->comm));
		f->cong_events = info->cong_events;
	}
}

SEC("iter/tcp")
int dump_flows(struct bpf_iter__tcp *ctx)
{
	struct sock_common *skc = ctx->sk_common;
	struct tcp_sock *tp;
	struct tb_flow f = {};

	if (!skc)
		return 0;
	/* NULL for time-wait and request sockets: they carry no counters. */
	tp = bpf_skc_to_tcp_sock(skc);
	if (!tp || tp->inet_conn.icsk_inet.sk.__sk_common.skc_state == TCP_LISTEN)
		return 0;
	if (!in_subtree((struct sock *)tp))
		return 0;
	fill_flow(&f, tp, bpf_ktime_get_ns());
	bpf_seq_write(ctx->meta->seq, &f, sizeof(f));
	return 0;
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(on_state, struct sock *sk, int oldstate, int newstate)
{
	struct sk_info *info;
	struct tcp_sock *tp;
	struct tb_flow f = {};

	if (sk->sk_protocol != IPPROTO_TCP)
		return 0;

	if (newstate == TCP_SYN_SENT || newstate == TCP_SYN_RECV) {
		if (!in_subtree(sk))
			return 0;
		info = bpf_sk_storage_get(&sk_info, sk, 0,
					  BPF_SK_STORAGE_GET_F_CREATE);
		if (!info) {
			__sync_fetch_and_add(&stats.owners_dropped, 1);
			return 0;
		}
		info->start_ns = bpf_ktime_get_ns();
		info->flags |= TB_FLOW_START_KNOWN;
		/* connect() runs in the caller's context, so current is the
		 * owner; a SYN_RECV child is made in softirq: owner unknown
		 * until claim_owners sees it in a file table. */
		if (newstate == TCP_SYN_SENT) {
			info->pid = bpf_get_current_pid_tgid() >> 32;
			bpf_get_current_comm(info->comm, sizeof(info->comm));
			info->flags |= TB_FLOW_OWNER_KNOWN;
		}
		return 0;
	}

	if (newstate != TCP_CLOSE || oldstate == TCP_LISTEN || oldstate == TCP_CLOSE)
		return 0;
	if (!in_subtree(sk))
		return 0;
	tp = bpf_skc_to_tcp_sock(sk);
	if (!tp)
		return 0;
	fill_flow(&f, tp, bpf_ktime_get_ns());
	f.state = TCP_CLOSE;
	f.flags |= TB_FLOW_CLOSED;
	if (bpf_map_update_elem(&closed, &f.cookie, &f, BPF_ANY))
		__sync_fetch_and_add(&stats.closed_dropped, 1);
	else
		__sync_fetch_and_add(&stats.closed_recorded, 1);
	return 0;
}

/* The tracepoint fires before icsk_ca_state takes the new value, so the
 * socket still shows the state it leaves. */
SEC("tp_btf/tcp_cong_state_set")
int BPF_PROG(on_cong_state, struct sock *sk, const u8 ca_state)
{
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	struct sk_info *info;

	if (!tp || ca_state < TCP_CA_CWR || tp->inet_conn.icsk_ca_state >= TCP_CA_CWR)
		return 0; /* not a new reduction (Recovery -> Loss is the same one) */
	if (!in_subtree(sk))
		return 0;
	info = bpf_sk_storage_get(&sk_info, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!info) {
		__sync_fetch_and_add(&stats.owners_dropped, 1);
		return 0;
	}
	info->cong_events++;
	return 0;
}

SEC("iter/task_file")
int claim_owners(struct bpf_iter__task_file *ctx)
{
	struct task_struct *task = ctx->task;
	struct file *file = ctx->file;
	struct found_owner found = {}, *prev;
	struct socket *sock;
	struct sock *sk;
	__u64 ino;
	int state;

	if (!task || !file)
		return 0;
	sock = bpf_sock_from_file(file);
	if (!sock)
		return 0;
	/* Read, not passed to a helper: an untrusted pointer allows that. */
	sk = sock->sk;
	if (!sk || sk->sk_protocol != IPPROTO_TCP || !in_subtree(sk))
		return 0;
	/* A listener has no flow; an unconnected socket never closes, so its
	 * entry would stay. */
	state = sk->__sk_common.skc_state;
	if (state == TCP_LISTEN || state == TCP_CLOSE)
		return 0;
	ino = BPF_CORE_READ(file, f_inode, i_ino);
	if (!ino)
		return 0;
	prev = bpf_map_lookup_elem(&found_owners, &ino);
	if (prev && prev->scan == owner_scan)
		return 0; /* the first file table to hold it wins */
	found.scan = owner_scan;
	found.pid = task->tgid;
	__builtin_memcpy(found.comm, task->comm, sizeof(found.comm));
	bpf_map_update_elem(&found_owners, &ino, &found, BPF_ANY);
	return 0;
}

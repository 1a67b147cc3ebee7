// SPDX-License-Identifier: GPL-2.0
/*
 * ACK arrival times of the advisor's probe connections, or of a few
 * established connections `export` samples, for the bottleneck capacity
 * estimate (userspace/tamebpf/estimate/acktrain.py).
 *
 * Segments a sender emits back to back queue together at the bottleneck and
 * leave it one transmission time apart; the receiver's ACKs keep that
 * spacing. Each ACK's arrival time and cumulative sequence is therefore a
 * sample of the link rate whenever nothing else queued between its segments.
 *
 * A connection is marked (socket storage) in one of two ways; the loader
 * loads only the program of the way it was asked for:
 *  - sockops `mark_probe`, attached to the probe's own cgroup only, marks
 *    each connection the probe opens and numbers it;
 *  - iter/tcp `mark_window`, run once when `export` opens a sampling window,
 *    marks the established connections whose cookies userspace wrote into
 *    cookies[0..flows_seen), numbered by their place there.
 * tp_btf/tcp_probe `log_ack` runs for each segment TCP receives on an
 * established socket, host-wide, but returns after one load for a segment
 * that carries data and after one storage lookup for an ACK unless its
 * socket was marked. It is attached only while probing or while a window
 * is open; the marks go with the object's storage map.
 *
 * Receive mode (`receive` set before load, for downloads): the marked
 * connections receive, and `log_data` takes `log_ack`'s place. The
 * bottleneck spaces the data segments themselves, so each segment that
 * brings new data is logged at its arrival, its end sequence in place of
 * the ACK; and since the sender's losses show only as gaps in what
 * arrives, each connection's holes, hole fills and duplicates are counted
 * (rx[]). It returns after one load for a pure ACK, after one storage
 * lookup for another socket's data.
 */
#include "common.bpf.h"
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_endian.h>
#include "acktrain.h"

char LICENSE[] SEC("license") = "GPL";

#define SOCK_OPS_OK 1
/* The longest TCP header (doff 15): a received segment longer than this
 * carries data. */
#define TCP_HDR_MAX 60

struct probe_sock {
	__u32 flow;     /* index into cookies[] */
	__u32 last_ack; /* highest cumulative ACK logged (receive: highest data end) */
};

/* Set before load: the marked connections receive (log_data), not send. */
const volatile __u32 receive = 0;

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct probe_sock);
} probe_socks SEC(".maps");

/* Read by userspace through the skeleton's mmap of .bss (a window's
 * cookies and flows_seen are written by userspace before mark_window runs). */
struct tb_ack acks[TB_ACKS_MAX] = {};
__u64 acks_seen = 0;        /* logged or not: > TB_ACKS_MAX means some lost */
__u64 cookies[TB_ACK_FLOWS_MAX] = {};
__u32 flows_seen = 0;
struct tb_rx_flow rx[TB_ACK_FLOWS_MAX] = {};

SEC("sockops")
int mark_probe(struct bpf_sock_ops *skops)
{
	struct bpf_sock *sk = skops->sk;
	struct probe_sock *ps;
	__u32 flow, una, nxt;

	if (skops->op != BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB || !sk)
		return SOCK_OPS_OK;
	flow = __sync_fetch_and_add(&flows_seen, 1);
	if (flow >= TB_ACK_FLOWS_MAX)
		return SOCK_OPS_OK;
	ps = bpf_sk_storage_get(&probe_socks, sk, NULL, BPF_SK_STORAGE_GET_F_CREATE);
	if (!ps)
		return SOCK_OPS_OK;
	ps->flow = flow;
	/* Both read as they are: a ctx field chosen by pointer is refused. */
	una = skops->snd_una;
	nxt = skops->rcv_nxt;
	ps->last_ack = receive ? nxt : una;
	cookies[flow] = bpf_get_socket_cookie(skops);
	return SOCK_OPS_OK;
}

SEC("iter/tcp")
int mark_window(struct bpf_iter__tcp *ctx)
{
	struct sock_common *skc = ctx->sk_common;
	struct probe_sock *ps;
	struct tcp_sock *tp;
	__u32 flow, n = flows_seen;
	__u64 cookie;

	if (!skc)
		return 0;
	/* NULL for time-wait and request sockets: no ACKs to log. */
	tp = bpf_skc_to_tcp_sock(skc);
	if (!tp || skc->skc_state != TCP_ESTABLISHED)
		return 0;
	cookie = bpf_get_socket_cookie(tp);
	for (flow = 0; flow < TB_ACK_FLOWS_MAX && flow < n; flow++)
		if (cookies[flow] == cookie)
			break;
	if (flow >= TB_ACK_FLOWS_MAX || flow >= n)
		return 0;
	ps = bpf_sk_storage_get(&probe_socks, tp, NULL, BPF_SK_STORAGE_GET_F_CREATE);
	if (!ps)
		return 0;
	ps->flow = flow;
	ps->last_ack = receive ? tp->rcv_nxt : tp->snd_una;
	return 0;
}

SEC("tp_btf/tcp_probe")
int BPF_PROG(log_ack, struct sock *sk, struct sk_buff *skb)
{
	struct probe_sock *ps;
	struct tcphdr th;
	__u64 idx;
	__u32 ack;

	/* The marked sockets send; what they log is the spacing of the
	 * receiver's pure ACKs (skb->len is the header and payload here, as
	 * tcp_rcv_established reads it). One load turns away each data
	 * segment the host receives before the lookup; an ACK riding on
	 * reverse data, given up with them, is spaced by the peer's sending
	 * rather than by our bottleneck. */
	if (skb->len > TCP_HDR_MAX)
		return 0;
	ps = bpf_sk_storage_get(&probe_socks, sk, NULL, 0);
	if (!ps)
		return 0;
	/* Full: nothing more is kept, so nothing more is read. Checked before
	 * the header: a busy window fills the log within its first seconds,
	 * and every segment after that would still pay for the read (and add
	 * to one shared counter from each CPU, a cache line moved per ACK).
	 * A count past TB_ACKS_MAX says that some were lost, which is all
	 * userspace reads of it; last_ack stops with the log, which is
	 * read no further. */
	if (*(volatile __u64 *)&acks_seen > TB_ACKS_MAX)
		return 0;
	if (bpf_probe_read_kernel(&th, sizeof(th), skb->head + skb->transport_header))
		return 0;
	ack = bpf_ntohl(th.ack_seq);
	/* Only ACKs that move the window: duplicates carry no spacing. */
	if (!th.ack || (__s32)(ack - ps->last_ack) <= 0)
		return 0;
	ps->last_ack = ack;
	idx = __sync_fetch_and_add(&acks_seen, 1);
	if (idx >= TB_ACKS_MAX)
		return 0;
	acks[idx].t_ns = bpf_ktime_get_ns();
	acks[idx].ack_seq = ack;
	acks[idx].flow = ps->flow;
	return 0;
}

/* Sequence arithmetic that wraps, as the kernel's before()/after(). */
static __always_inline bool seq_after(__u32 a, __u32 b)
{
	return (__s32)(a - b) > 0;
}

SEC("tp_btf/tcp_probe")
int BPF_PROG(log_data, struct sock *sk, struct sk_buff *skb)
{
	struct tcp_sock *tp;
	struct probe_sock *ps;
	struct tb_rx_flow *f;
	struct tcphdr th;
	__u32 seq, end, len, high, rcv_nxt, flow;
	__u64 idx;

	/* A pure ACK is turned away after one load: no data, no storage lookup. */
	if (skb->len <= TCP_HDR_MAX)
		return 0;
	ps = bpf_sk_storage_get(&probe_socks, sk, NULL, 0);
	if (!ps)
		return 0;
	flow = ps->flow; /* once, bounded: the verifier checks this copy */
	if (flow >= TB_ACK_FLOWS_MAX)
		return 0;
	if (bpf_probe_read_kernel(&th, sizeof(th), skb->head + skb->transport_header))
		return 0;
	len = skb->len - th.doff * 4;
	tp = bpf_skc_to_tcp_sock(sk);
	if (!len || !tp)
		return 0;
	seq = bpf_ntohl(th.seq);
	end = seq + len;
	/* tcp_probe fires before the segment is processed: rcv_nxt is the
	 * next byte in order so far, `high` the end of all data received. */
	rcv_nxt = tp->rcv_nxt;
	high = ps->last_ack;
	f = &rx[flow];
	f->segs++;
	if (!seq_after(end, rcv_nxt)) {
		f->dups++; /* received already: a spurious retransmission */
		return 0;
	}
	if (!seq_after(end, high)) {
		f->fills++; /* below the highest: fills a hole */
		return 0;
	}
	if (seq_after(seq, high) && high == rcv_nxt)
		f->episodes++; /* a gap opens where none was: a loss event */
	ps->last_ack = end;
	if (*(volatile __u64 *)&acks_seen > TB_ACKS_MAX)
		return 0; /* the log is full; the counts above go on */
	idx = __sync_fetch_and_add(&acks_seen, 1);
	if (idx >= TB_ACKS_MAX)
		return 0;
	acks[idx].t_ns = bpf_ktime_get_ns();
	acks[idx].ack_seq = end;
	acks[idx].flow = flow;
	return 0;
}

// SPDX-License-Identifier: GPL-2.0
/*
 * Stream caps: a cgroup (with its descendants) may have at most N TCP streams
 * to a destination prefix (and port). A connect() over the cap fails with
 * EPERM before any packet leaves.
 *
 * Programs
 *  - cgroup/connect4, cgroup/connect6 (tb_cap_connect4/6): one instance per
 *    capped cgroup, attached to it (bpf_link, so multi-attach: programs others
 *    attached keep running). `my_cgid` tells an instance whose caps it
 *    enforces; the kernel runs it for sockets in that cgroup's whole subtree.
 *  - tp_btf/inet_sock_set_state (tb_cap_state): one, global; counts a stream
 *    down when its socket reaches TCP_CLOSE. For sockets our connect hook
 *    charged, the cgroup's sock_ops program does too (tb_cap_pace's state
 *    callback): the tracepoint program can be skipped under load, the
 *    cgroup program cannot (see watch_state).
 *  - cgroup/sock_release (tb_cap_release): with each connect pair; counts
 *    down sockets closed without ever leaving TCP_CLOSE (connect() failed in
 *    the kernel after our hook said yes, e.g. ENETUNREACH).
 *  - iter/tcp (tb_cap_seed): run once when a cap is set, to count streams
 *    that already existed.
 *  - sockops (tb_cap_pace) and iter/tcp (tb_cap_unpace): pace mode, in
 *    cap_pace.bpf.h.
 *
 * Why the count is exact
 *  - Charging: the check and the increment happen under the cap's
 *    bpf_spin_lock, so a burst of parallel connect()s on every CPU cannot
 *    let more than N through (no read-then-add window). (Atomic fetch-add
 *    and roll back would need -mcpu=v3, and would refuse spuriously at the
 *    boundary under contention.)
 *  - Which caps a socket was charged to is kept in socket-local storage
 *    (cap_socks): a count-down releases exactly those ids and empties the
 *    list, so a second count-down finds nothing: each charge is released
 *    once. Every writer of that storage holds the socket lock (connect runs
 *    under lock_sock, tcp_set_state is always called with the socket locked,
 *    iter/tcp locks each socket it shows) or owns a socket nobody else can
 *    reach (sock_release acts only on a socket in TCP_CLOSE, which is in no
 *    hash table and has no timers), so plain stores suffice.
 *  - Every way a stream ends passes through TCP_CLOSE: close() (directly,
 *    after FIN_WAIT/TIME_WAIT hand-off, or for an orphan), RST, a failed or
 *    timed-out handshake, the process being killed (its files are closed).
 *    A socket whose connect() failed before SYN_SENT never changes state:
 *    it stays charged until it is closed (sock_release) or connect()ed again
 *    (the new attempt first releases the old charges).
 *  - Nested caps: for a socket in cgroup C the kernel runs the instances of
 *    C first, then its ancestors' (deepest first). If a later instance
 *    refuses, it rolls back every charge of this attempt, so a refused
 *    connect() is charged nowhere. An instance at depth L that finds charges
 *    made at depth <= L knows they belong to an earlier connect() on the
 *    same socket, and releases them first.
 *  - Removed caps: a count-down for an id no longer in cap_counts is a
 *    no-op; ids are never reused while the maps exist.
 */
#include "common.bpf.h"
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_endian.h>
#include "cap.h"
#define ALLOW 1
#define REFUSE 0 /* the kernel turns this into EPERM */

char LICENSE[] SEC("license") = "GPL";

/* Set per loaded instance, before load. */
const volatile __u64 my_cgid = 0;  /* connect/release: the capped cgroup */
const volatile __u32 my_level = 0; /* ... and its depth */
const volatile __u64 seed_id = 0;  /* seed: the new cap, its cgroup ... */
const volatile __u64 seed_cgid = 0;
const volatile __u32 seed_level = 0;
const volatile struct tb_cap_rule seed_rule = {}; /* ... and destination */
const volatile __u64 unpace_id = 0; /* unpace: the pace cap being removed */

/* Maps are pinned by name in the pin directory the loader gives libbpf, and
 * shared by every instance. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 2 * TB_CAP_CGROUPS_MAX); /* both generations */
	__type(key, struct tb_cap_key);
	__type(value, struct tb_cap_cgroup);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} cap_rules SEC(".maps");

/* The generation of cap_rules in force (see struct tb_cap_key); written by
 * userspace only, one 4-byte store: the switch to a new set of caps. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} cap_gen SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096 * TB_CAP_RULES_MAX);
	__type(key, __u64);                 /* cap id */
	__type(value, struct tb_cap_count);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} cap_counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tb_cap_state);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} cap_state SEC(".maps");

/* The next cap id; written by userspace only (under its lock on the pin
 * directory). Ids are never reused while the maps exist. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} cap_ids SEC(".maps");

/* The caps a socket is charged to; freed with the socket. */
struct tb_cap_sock {
	__u64 ids[TB_CAP_SOCK_MAX];
	__u32 n;
	__u32 last_level; /* depth of the last instance that ran on connect */
	__u64 epoch;      /* pace: epoch_start_ns of the epoch it checked in to */
	__u32 applied;    /* pace: SO_MAX_PACING_RATE it set, bytes/s */
	__u32 clamped;    /* pace: TCP_WINDOW_CLAMP it set, bytes (0: none) */
	__u64 checked_ns; /* pace: when it last recomputed its pacing rate */
	__u64 rcv_checked_ns; /* pace: when it last recomputed its receive window */
	__u32 carry;      /* pace: receive window owed by earlier recomputes, bytes */
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct tb_cap_sock);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} cap_socks SEC(".maps");

static __always_inline void note(__u32 which)
{
	__u32 zero = 0;
	struct tb_cap_state *s = bpf_map_lookup_elem(&cap_state, &zero);

	if (!s)
		return;
	if (which == 0)
		__sync_fetch_and_add(&s->nomem, 1);
	else if (which == 1)
		__sync_fetch_and_add(&s->overflow, 1);
	else
		__sync_fetch_and_add(&s->seed_skipped, 1);
}

/* Count down every cap this socket is charged to; the list empties, so a
 * second call does nothing. */
static __always_inline void release_all(struct tb_cap_sock *st)
{
	struct tb_cap_count *c;
	__u64 id;
	int i;

	for (i = 0; i < TB_CAP_SOCK_MAX; i++) {
		if (i >= st->n)
			break;
		id = st->ids[i];
		c = bpf_map_lookup_elem(&cap_counts, &id);
		if (!c)
			continue; /* cap removed since */
		bpf_spin_lock(&c->lock);
		if (c->count)
			c->count--;
		c->released++;
		bpf_spin_unlock(&c->lock);
	}
	st->n = 0;
}

static __always_inline bool rule_matches(const struct tb_cap_rule *r,
					 const __u32 *dst, __u16 family,
					 __u16 port)
{
	if (r->family != family ||
	    (r->port && (port < r->port || port > r->port_end)))
		return false;
	if ((dst[0] & r->mask[0]) != r->addr[0])
		return false;
	if (family == AF_INET)
		return true;
	return (dst[1] & r->mask[1]) == r->addr[1] &&
	       (dst[2] & r->mask[2]) == r->addr[2] &&
	       (dst[3] & r->mask[3]) == r->addr[3];
}

static __always_inline int charge(struct bpf_sock_addr *ctx, __u32 *dst,
				  __u16 family)
{
	__u16 port = bpf_ntohs((__u16)ctx->user_port);
	struct tb_cap_key key = { .cgid = my_cgid };
	struct tb_cap_cgroup *cg;
	struct tb_cap_sock *st;
	struct tb_cap_count *c;
	struct bpf_sock *sk;
	__u32 zero = 0, *gen;
	bool ok;
	int i;

	if (ctx->type != SOCK_STREAM || ctx->protocol != IPPROTO_TCP)
		return ALLOW;
	gen = bpf_map_lookup_elem(&cap_gen, &zero);
	if (!gen)
		return ALLOW;
	key.gen = *gen & 1;
	cg = bpf_map_lookup_elem(&cap_rules, &key);
	if (!cg)
		return ALLOW;
	/* A program before us (a deeper cap, or someone else's) refused:
	 * this connect() fails anyway, charge nothing. */
	if (bpf_get_retval() < 0)
		return ALLOW;
	sk = ctx->sk;
	if (!sk)
		return ALLOW;
	/* Storage is made only for a socket we charge: most connect()s of a
	 * capped cgroup go elsewhere, and making it costs an allocation. */
	st = bpf_sk_storage_get(&cap_socks, sk, 0, 0);
	if (st) {
		if (st->n && st->last_level <= my_level)
			release_all(st); /* left from an earlier connect() */
		st->last_level = my_level;
	}

	for (i = 0; i < TB_CAP_RULES_MAX; i++) {
		struct tb_cap_rule *r;
		__u64 id;

		if (i >= cg->n)
			break;
		r = &cg->rules[i];
		if (!rule_matches(r, dst, family, port))
			continue;
		id = r->id;
		c = bpf_map_lookup_elem(&cap_counts, &id);
		if (!c)
			continue;
		if (!st) {
			st = bpf_sk_storage_get(&cap_socks, sk, 0,
						BPF_SK_STORAGE_GET_F_CREATE);
			if (!st) {
				note(0);
				return REFUSE; /* cannot track it: fail closed */
			}
			st->last_level = my_level;
		}
		if (st->n >= TB_CAP_SOCK_MAX) {
			note(1);
			release_all(st);
			return REFUSE;
		}
		bpf_spin_lock(&c->lock);
		/* pace mode charges every connect() and never refuses one */
		ok = c->mode == TB_CAP_MODE_PACE || c->count < c->max;
		if (ok) {
			c->count++;
			c->charged++;
		} else {
			c->refused++;
		}
		bpf_spin_unlock(&c->lock);
		if (!ok) {
			release_all(st); /* including deeper caps' charges */
			return REFUSE;
		}
		st->ids[st->n & (TB_CAP_SOCK_MAX - 1)] = id;
		st->n++;
	}
	return ALLOW;
}

SEC("cgroup/connect4")
int tb_cap_connect4(struct bpf_sock_addr *ctx)
{
	__u32 dst[4] = { ctx->user_ip4, 0, 0, 0 };

	return charge(ctx, dst, AF_INET);
}

SEC("cgroup/connect6")
int tb_cap_connect6(struct bpf_sock_addr *ctx)
{
	__u32 dst[4];

	dst[0] = ctx->user_ip6[0];
	dst[1] = ctx->user_ip6[1];
	dst[2] = ctx->user_ip6[2];
	dst[3] = ctx->user_ip6[3];
	/* ::ffff:a.b.c.d reaches an IPv4 host: IPv4 caps apply. */
	if (!dst[0] && !dst[1] && dst[2] == bpf_htonl(0xffff)) {
		dst[0] = dst[3];
		dst[1] = dst[2] = dst[3] = 0;
		return charge(ctx, dst, AF_INET);
	}
	return charge(ctx, dst, AF_INET6);
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(tb_cap_state, struct sock *sk, int oldstate, int newstate)
{
	struct tb_cap_sock *st;

	if (newstate != TCP_CLOSE || sk->sk_protocol != IPPROTO_TCP)
		return 0;
	st = bpf_sk_storage_get(&cap_socks, sk, 0, 0);
	if (st && st->n)
		release_all(st);
	return 0;
}

/* The count-down that cannot be missed, for sockets our connect hook
 * charged (the capped cgroup's sock_ops program calls these). tb_cap_state
 * alone lost about 1 count in 200 under a connect/close storm: a raw
 * tracepoint program is skipped (its recursion_misses counter goes up) when
 * a softirq's state change runs on a CPU where it is already running.
 * Cgroup programs have no such guard. Both paths release through the same
 * list, so whichever runs second finds nothing. */
static __always_inline void watch_state(struct bpf_sock_ops *skops)
{
	struct bpf_sock *sk = skops->sk; /* read once: the verifier checks this copy */
	struct tb_cap_sock *st;

	if (!sk)
		return;
	st = bpf_sk_storage_get(&cap_socks, sk, 0, 0);
	if (st && st->n)
		bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags |
					  BPF_SOCK_OPS_STATE_CB_FLAG);
}

static __always_inline void state_changed(struct bpf_sock_ops *skops)
{
	struct bpf_sock *sk = skops->sk;
	struct tb_cap_sock *st;

	/* args[0]: the old state, args[1]: the new one */
	if (skops->args[1] != BPF_TCP_CLOSE || !sk)
		return;
	st = bpf_sk_storage_get(&cap_socks, sk, 0, 0);
	if (st && st->n)
		release_all(st);
}

SEC("cgroup/sock_release")
int tb_cap_release(struct bpf_sock *ctx)
{
	struct tb_cap_sock *st;

	/* Only a socket still in TCP_CLOSE: any other is counted down by
	 * tb_cap_state when tcp_close() brings it there. */
	if (ctx->protocol != IPPROTO_TCP || ctx->state != TCP_CLOSE)
		return 1;
	st = bpf_sk_storage_get(&cap_socks, ctx, 0, 0);
	if (st && st->n)
		release_all(st);
	return 1;
}

static __always_inline bool in_seed_subtree(struct sock *sk)
{
	struct cgroup *cg;

	cg = sk->sk_cgrp_data.cgroup;
	if (!cg || cg->level < (int)seed_level)
		return false;
	return tb_cgroup_ancestor_id(cg, seed_level) == seed_cgid;
}

SEC("iter/tcp")
int tb_cap_seed(struct bpf_iter__tcp *ctx)
{
	struct sock_common *skc = ctx->sk_common;
	struct tb_cap_rule rule = seed_rule;
	struct tb_cap_sock *st;
	struct tb_cap_count *c;
	struct tcp_sock *tp;
	struct sock *sk;
	__u64 id = seed_id;
	__u32 dst[4] = {};
	__u16 family;
	int i;

	if (!skc)
		return 0;
	tp = bpf_skc_to_tcp_sock(skc); /* NULL for time-wait and requests */
	if (!tp)
		return 0;
	sk = (struct sock *)tp;
	if (sk->__sk_common.skc_state == TCP_LISTEN ||
	    sk->__sk_common.skc_state == TCP_CLOSE ||
	    sk->sk_protocol != IPPROTO_TCP || !in_seed_subtree(sk))
		return 0;
	family = sk->__sk_common.skc_family;
	if (family == AF_INET) {
		dst[0] = sk->__sk_common.skc_daddr;
	} else {
		BPF_CORE_READ_INTO(&dst, &sk->__sk_common, skc_v6_daddr);
		if (!dst[0] && !dst[1] && dst[2] == bpf_htonl(0xffff)) {
			family = AF_INET;
			dst[0] = dst[3];
		}
	}
	if (!rule_matches(&rule, dst, family,
			  bpf_ntohs(sk->__sk_common.skc_dport)))
		return 0;

	st = bpf_sk_storage_get(&cap_socks, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!st) {
		note(2);
		return 0;
	}
	for (i = 0; i < TB_CAP_SOCK_MAX; i++) {
		if (i >= st->n)
			break;
		if (st->ids[i] == id)
			return 0; /* connect()ed after the cap was set */
	}
	if (st->n >= TB_CAP_SOCK_MAX) {
		note(2);
		return 0;
	}
	c = bpf_map_lookup_elem(&cap_counts, &id);
	if (!c)
		return 0;
	bpf_spin_lock(&c->lock);
	c->count++;
	c->seeded++;
	bpf_spin_unlock(&c->lock);
	st->ids[st->n & (TB_CAP_SOCK_MAX - 1)] = id;
	st->n++;
	return 0;
}

/* Pace mode: its programs, in a file of their own (see there for why they
 * are built into this object). */
#include "cap_pace.bpf.h"

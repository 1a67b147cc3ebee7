/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Pace mode of stream caps (docs/cap.md, "Pace mode"): the programs that
 * set each paced socket's SO_MAX_PACING_RATE, the iterator that lifts it
 * when the cap is removed, and the map of caps that follow their path.
 *
 * Built into cap.bpf.c's object on purpose, not an object of its own: they
 * read the same per-socket charges (cap_socks) and counters (cap_counts) the
 * connect programs write, under the same locks, and are pinned and attached
 * with them by one loader path (userspace/c/lib/cap_pins.c). Only cap.bpf.c
 * includes this file.
 */
#ifndef TAMEBPF_CAP_PACE_BPF_H
#define TAMEBPF_CAP_PACE_BPF_H

/* Pace mode (docs/cap.md): a charged socket of a pace cap sends at most
 * rate / active, where active counts the cap's streams that checked in from
 * their RTT callback in this or the previous epoch. A stream that just opened
 * has not checked in yet and takes rate / (active + 1). Sockets of the cgroup
 * not charged to a pace cap return after one storage lookup.
 *
 * What a stream receives is paced by its receive window: the sender can
 * have no more in flight than the window, so a window of share x RTT holds
 * it to its share. A receiver's RTT callback never comes (it acknowledges
 * no data of ours), so a receiving stream recomputes its window from the
 * callback that each segment it sends (its ACKs) makes when the cap paces
 * receiving, at most once per RTT, on the RTT the receiver measures. */
#define SOL_SOCKET 1          /* uapi asm-generic/socket.h; not in vmlinux.h */
#define SO_MAX_PACING_RATE 47
#define SOL_TCP 6
#define TCP_WINDOW_CLAMP 10   /* uapi linux/tcp.h */
#define PACE_EPOCH_NS (250ULL * 1000 * 1000)
#define PACE_RATE_MAX 0xfffffffeU /* bpf_setsockopt takes an int: ~34 Gbit/s */
/* The RTT callback comes with every ACK that carries an RTT sample; a share
 * is recomputed about once per smoothed RTT, and at most this often. */
#define PACE_MIN_GAP_NS (1000ULL * 1000)
/* A receive window never below this many segments: with fewer, a delayed
 * ACK can hold the sender for its whole timeout. */
#define CLAMP_MIN_SEGS 2
#define CLAMP_MAX 0x3fffffffU /* "no clamp": far above any receive buffer */
#define PACE_SCALE_S 1 /* see scale_window */
/* Only for userspace/tamebpf_bench/bench_cap.py's "before": the RTT callback for every
 * socket of a capped cgroup, as an earlier tb_cap_pace did. Never set
 * by the loader otherwise. */
const volatile __u32 rtt_for_all = 0;

/* Caps that follow their path (docs/cap.md, "Scout and follow rate"): per
 * pace cap, the socket left unpaced to measure the path and the rate the
 * others share instead of the cap's own. Written by userspace only
 * (cap_follow.c). Few caps have an entry: nothing is preallocated. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 4096 * TB_CAP_RULES_MAX); /* as cap_counts */
	__type(key, __u64);                 /* cap id */
	__type(value, struct tb_cap_follow);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} cap_follow SEC(".maps");

/* The scout sends as an unpaced stream would, and does not check in, so
 * `active` counts the paced streams only. A rate set before it became the
 * scout is lifted once; st->applied 0 then says "none of ours", as after
 * tb_cap_unpace (~0U is unlimited, see there). */
static __always_inline int scout(struct bpf_sock_ops *skops, struct tb_cap_sock *st)
{
	__u32 unlimited = ~0U;

	if (st->applied &&
	    !bpf_setsockopt(skops, SOL_SOCKET, SO_MAX_PACING_RATE, &unlimited,
			    sizeof(unlimited)))
		st->applied = 0;
	return 1;
}

/* The receive window that holds a stream to `rate` bytes/s: share x the
 * RTT the receiver measures (the handshake's before any data came), at
 * least CLAMP_MIN_SEGS segments. The sender sends whole segments only, so
 * a window of k.f segments carries k an RTT: the window is a whole number
 * of segments, and what the rounding leaves is carried to the next
 * recompute (once an RTT), so over RTTs the windows average the share.
 * Set again whenever the socket's clamp is not it: receive buffer
 * autotuning raises the clamp with the buffer (it makes "the window clamp
 * follow along"), so a value of ours is not remembered as set. */
static __always_inline int clamp(struct bpf_sock_ops *skops, struct tb_cap_sock *st,
				 __u64 rate)
{
	struct bpf_sock *sk = skops->sk;
	struct tcp_sock *tp = sk ? bpf_skc_to_tcp_sock(sk) : NULL;
	__u64 rtt_us = tp ? tp->rcv_rtt_est.rtt_us >> 3 : 0;
	__u64 mss = skops->mss_cache;
	__u64 least = (__u64)CLAMP_MIN_SEGS * mss;
	__u64 want, window;
	__u32 val;

	if (!rtt_us)
		rtt_us = skops->srtt_us >> 3;
	want = rate * rtt_us / 1000000 + st->carry;
	window = mss ? want / mss * mss : want;
	if (window < least)
		window = least;
	st->carry = want > window && want - window < mss ? want - window : 0;
	val = window > CLAMP_MAX ? CLAMP_MAX : (__u32)window;
	if (tp && tp->window_clamp == val)
		return 1;
	if (!bpf_setsockopt(skops, SOL_TCP, TCP_WINDOW_CLAMP, &val, sizeof(val)))
		st->clamped = val;
	return 1;
}

/* Between two recomputes too, receive buffer autotuning raises the clamp
 * with the buffer, each segment received then grows the window by two
 * segments, and a window once advertised is never taken back: a stream
 * let out for one RTT receives more the next, and autotuning raises the
 * clamp again. So every segment we send restores the clamp last computed
 * first, before its window is chosen. */
static __always_inline void keep_clamp(struct bpf_sock_ops *skops, struct tb_cap_sock *st)
{
	struct bpf_sock *sk = skops->sk;
	struct tcp_sock *tp = sk ? bpf_skc_to_tcp_sock(sk) : NULL;
	__u32 val = st->clamped;

	if (val && tp && tp->window_clamp != val)
		bpf_setsockopt(skops, SOL_TCP, TCP_WINDOW_CLAMP, &val, sizeof(val));
}

/* The first pace cap the socket is charged to, and its id; NULL if none. */
static __always_inline struct tb_cap_count *pace_cap(struct tb_cap_sock *st, __u64 *id)
{
	struct tb_cap_count *c;
	__u32 i;

	for (i = 0; i < TB_CAP_SOCK_MAX; i++) {
		if (i >= st->n)
			return NULL;
		*id = st->ids[i];
		c = bpf_map_lookup_elem(&cap_counts, id);
		if (c && c->mode == TB_CAP_MODE_PACE)
			return c;
	}
	return NULL;
}

/* The SYN fixes the window scale from the largest window the socket may
 * ever offer, and every window offered is rounded up to a multiple of
 * 2^scale: 1 kB with 32 MB receive buffers, a third more than a stream's
 * share of 20 Mbit/s among 8 over 10 ms. So a stream whose cap paces what
 * it receives is clamped before its SYN to what the whole cap receives in
 * PACE_SCALE_S: a scale that suits the cap's rate, and windows for one
 * stream to take all of it at RTTs up to that. */
static __always_inline void scale_window(struct bpf_sock_ops *skops)
{
	struct bpf_sock *sk = skops->sk;
	struct tb_cap_follow *f;
	struct tb_cap_count *c;
	struct tb_cap_sock *st;
	__u64 id = 0, rate;
	__u32 val;

	if (!sk)
		return;
	st = bpf_sk_storage_get(&cap_socks, sk, 0, 0);
	if (!st)
		return;
	c = pace_cap(st, &id);
	if (!c || !(c->dirs & TB_CAP_DIR_RECEIVE))
		return;
	rate = c->rate_bytes_per_s;
	f = bpf_map_lookup_elem(&cap_follow, &id);
	if (f && f->rate_bytes_per_s > rate)
		rate = f->rate_bytes_per_s;
	rate *= PACE_SCALE_S;
	val = rate > CLAMP_MAX ? CLAMP_MAX : (__u32)rate;
	if (!bpf_setsockopt(skops, SOL_TCP, TCP_WINDOW_CLAMP, &val, sizeof(val)))
		st->clamped = val;
}

/* The receiver's RTT in microseconds, for how often to recompute. */
static __always_inline __u64 receiver_rtt_us(struct bpf_sock_ops *skops)
{
	struct bpf_sock *sk = skops->sk;
	struct tcp_sock *tp = sk ? bpf_skc_to_tcp_sock(sk) : NULL;
	__u32 rtt = tp ? tp->rcv_rtt_est.rtt_us >> 3 : 0;

	return rtt ? rtt : skops->srtt_us >> 3;
}

/* Returns 0 when the socket is charged to no pace cap, else the directions
 * (TB_CAP_DIR_*) its cap paces, having applied the share of the one this
 * call is for: `receiving` the receive window (a segment we send), else
 * the pacing rate (an RTT callback, or the connection opening: both). */
static __always_inline __u32 pace(struct bpf_sock_ops *skops, int opening, int receiving)
{
	struct tb_cap_count *c = NULL;
	struct tb_cap_follow *f;
	struct tb_cap_sock *st;
	struct bpf_sock *sk = skops->sk;
	__u64 id, now, rate, scout_cookie = 0, follow_rate = 0;
	__u32 active, rate32, dirs;
	bool counted;

	if (!sk)
		return 0;
	st = bpf_sk_storage_get(&cap_socks, sk, 0, 0);
	if (!st)
		return 0;
	now = bpf_ktime_get_ns();
	if (!opening) {
		/* sock_ops' srtt_us is tcp_sock's: microseconds << 3 */
		__u64 gap = (receiving ? receiver_rtt_us(skops) : skops->srtt_us >> 3) * 1000;

		if (gap < PACE_MIN_GAP_NS)
			gap = PACE_MIN_GAP_NS;
		/* A clock for each direction: under a cap that paces both
		 * ways every segment a sender sends comes here as receiving
		 * too, far more often than its RTT callbacks, which alone
		 * apply the pacing rate, and would take every recompute. */
		if (now - (receiving ? st->rcv_checked_ns : st->checked_ns) < gap) {
			if (receiving)
				keep_clamp(skops, st);
			return 1;
		}
	}
	if (opening || !receiving)
		st->checked_ns = now;
	if (opening || receiving)
		st->rcv_checked_ns = now;
	c = pace_cap(st, &id);
	if (!c)
		return 0;
	dirs = c->dirs ? c->dirs : TB_CAP_DIR_SEND;
	/* Copied out once: userspace may replace the entry meanwhile, and a
	 * hash map can reuse a replaced element at once. A torn read lasts
	 * one recompute. */
	f = bpf_map_lookup_elem(&cap_follow, &id);
	if (f) {
		scout_cookie = f->scout_cookie;
		follow_rate = f->rate_bytes_per_s;
	}
	if (scout_cookie && scout_cookie == bpf_get_socket_cookie(skops)) {
		/* not counted in `active` from either direction's callback */
		if (!receiving)
			scout(skops, st);
		return dirs;
	}
	bpf_spin_lock(&c->lock);
	if (now - c->epoch_start_ns >= PACE_EPOCH_NS) {
		/* an epoch nobody checked in to leaves no history */
		c->prev_checkins = now - c->epoch_start_ns < 2 * PACE_EPOCH_NS ?
			c->epoch_checkins : 0;
		c->epoch_checkins = 0;
		c->epoch_start_ns = now;
	}
	/* Checked in to this epoch or the one before: a stream in the count. */
	counted = st->epoch && c->epoch_start_ns - st->epoch < 2 * PACE_EPOCH_NS;
	if (!opening && st->epoch != c->epoch_start_ns) {
		st->epoch = c->epoch_start_ns;
		c->epoch_checkins++;
	}
	active = c->epoch_checkins > c->prev_checkins ?
		c->epoch_checkins : c->prev_checkins;
	if (!counted && c->count > active)
		/* A stream new to the count (just opened, or busy again after
		 * a pause) takes the share of every live stream until the
		 * epochs count it: streams starting together would otherwise
		 * each take the share of the few counted so far, for an RTT. */
		active = c->count;
	else if (opening || !active)
		/* one more than those sending (the first alone gets it all) */
		active++;
	rate = (follow_rate ? follow_rate : c->rate_bytes_per_s) / active;
	bpf_spin_unlock(&c->lock);
	if (!rate)
		rate = 1;
	if ((opening || receiving) && (dirs & TB_CAP_DIR_RECEIVE))
		clamp(skops, st, rate);
	if (receiving || !(dirs & TB_CAP_DIR_SEND))
		return dirs;
	rate32 = rate > PACE_RATE_MAX ? PACE_RATE_MAX : (__u32)rate;
	if (rate32 == st->applied)
		return dirs;
	if (!bpf_setsockopt(skops, SOL_SOCKET, SO_MAX_PACING_RATE, &rate32, sizeof(rate32)))
		st->applied = rate32;
	return dirs;
}

SEC("sockops")
int tb_cap_pace(struct bpf_sock_ops *skops)
{
	__u32 dirs, flags;

	switch (skops->op) {
	case BPF_SOCK_OPS_TCP_CONNECT_CB:
		watch_state(skops); /* every charged socket, pace cap or not */
		scale_window(skops);
		break;
	case BPF_SOCK_OPS_STATE_CB:
		state_changed(skops);
		break;
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
		/* Per-ACK work only for a socket a pace cap paces, and only the
		 * callback its direction needs: a refuse cap's sockets (and the
		 * cgroup's others) never get one from us. */
		dirs = pace(skops, 1, 0);
		flags = skops->bpf_sock_ops_cb_flags;
		if ((dirs & TB_CAP_DIR_SEND) || rtt_for_all)
			flags |= BPF_SOCK_OPS_RTT_CB_FLAG;
		if (dirs & TB_CAP_DIR_RECEIVE)
			flags |= BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG;
		if (flags != skops->bpf_sock_ops_cb_flags)
			bpf_sock_ops_cb_flags_set(skops, flags);
		break;
	case BPF_SOCK_OPS_RTT_CB:
		pace(skops, 0, 0);
		break;
	case BPF_SOCK_OPS_HDR_OPT_LEN_CB:
		/* A segment we send (on a receiver: an ACK); no option is
		 * reserved, so no WRITE_HDR_OPT callback follows. */
		pace(skops, 0, 1);
		break;
	}
	return 1;
}

/* Removing a pace cap (docs/cap.md): the sockets it paced that are still
 * open send unpaced again, and receive with their window unclamped. Userspace deletes the cap's counters first, so
 * no RTT callback re-applies a rate after this; ~0U is "unlimited" to the
 * kernel (sk_setsockopt widens it to ~0UL). */
SEC("iter/tcp")
int tb_cap_unpace(struct bpf_iter__tcp *ctx)
{
	struct sock_common *skc = ctx->sk_common;
	__u32 unlimited = ~0U, no_clamp = CLAMP_MAX;
	struct tb_cap_sock *st;
	struct tcp_sock *tp;
	int i;

	if (!skc)
		return 0;
	tp = bpf_skc_to_tcp_sock(skc);
	if (!tp)
		return 0;
	st = bpf_sk_storage_get(&cap_socks, (struct sock *)tp, 0, 0);
	if (!st || (!st->applied && !st->clamped))
		return 0;
	for (i = 0; i < TB_CAP_SOCK_MAX; i++) {
		if (i >= st->n)
			return 0;
		if (st->ids[i] == unpace_id)
			break;
	}
	if (i == TB_CAP_SOCK_MAX)
		return 0;
	if (st->applied &&
	    !bpf_setsockopt(tp, SOL_SOCKET, SO_MAX_PACING_RATE, &unlimited, sizeof(unlimited)))
		st->applied = 0;
	if (st->clamped &&
	    !bpf_setsockopt(tp, SOL_TCP, TCP_WINDOW_CLAMP, &no_clamp, sizeof(no_clamp)))
		st->clamped = 0;
	return 0;
}

#endif /* TAMEBPF_CAP_PACE_BPF_H */

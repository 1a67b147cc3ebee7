/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Structures that cross the kernel/userspace boundary for stream caps
 * ("this cgroup may have at most N TCP streams to that destination").
 * Included by bpf/cap.bpf.c and userspace/c/lib/cap_*.c, mirrored by
 * userspace/tamebpf/kernel/abi.py (tests/unit/test_abi.py checks all three
 * agree). Fixed-width types only, explicit padding.
 */
#ifndef TAMEBPF_CAP_H
#define TAMEBPF_CAP_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#include <linux/bpf.h> /* struct bpf_spin_lock */
#endif

#define TB_CAP_RULES_MAX 16  /* caps on one cgroup */
#define TB_CAP_CGROUPS_MAX 4096 /* capped cgroups */
#define TB_CAP_SOCK_MAX 8    /* caps one socket can be charged to (power of 2) */
#define TB_CAP_PATH_LEN 256

/* tb_cap_count.mode */
#define TB_CAP_MODE_REFUSE 0 /* connect()s over max fail with EPERM */
#define TB_CAP_MODE_PACE 1   /* never refused; the streams share rate_bytes_per_s */

/* tb_cap_count.dirs: what a pace cap paces (0, as caps from before
 * directions have it, is TB_CAP_DIR_SEND) */
#define TB_CAP_DIR_SEND 0x1    /* what the streams send: SO_MAX_PACING_RATE */
#define TB_CAP_DIR_RECEIVE 0x2 /* what they receive: their receive window */

/* One destination a cgroup is capped toward. */
struct tb_cap_rule {
	__u64 id;               /* key of the cap's counters in cap_counts */
	__u32 addr[4];          /* prefix, network order, already masked;
				 * IPv4 uses addr[0] only */
	__u32 mask[4];          /* prefix mask, network order */
	__u16 family;           /* AF_INET or AF_INET6 */
	__u16 port;             /* first destination port, host order; 0: any */
	__u16 port_end;         /* last destination port (== port: just one) */
	__u16 pad;
	__u32 prefix_len;
	__u32 pad2;
};

/* Key of cap_rules. The rules in force are those of generation *cap_gen
 * (0 or 1): a new set of rules is written under the other generation and
 * switched in by one update of cap_gen, so a connect() sees the old caps
 * or the new ones, never a mix (docs/design.md, "Atomic changes"). */
struct tb_cap_key {
	__u64 cgid;             /* cgroup id */
	__u32 gen;              /* generation, 0 or 1 */
	__u32 pad;
};

/* Value of cap_rules, keyed by tb_cap_key: every cap on that cgroup. */
struct tb_cap_cgroup {
	__u32 n;                /* rules[0..n) are in use */
	__u32 level;            /* depth below the cgroup v2 root */
	char path[TB_CAP_PATH_LEN]; /* below the cgroup v2 root, for list/rm */
	struct tb_cap_rule rules[TB_CAP_RULES_MAX];
};

/* Value of cap_counts, keyed by cap id. `count` is changed only under
 * `lock`; the totals obey count == charged + seeded - released. */
struct tb_cap_count {
	struct bpf_spin_lock lock;
	__u32 max;              /* N: streams allowed at once */
	__u64 count;            /* live streams now */
	__u64 charged;          /* connect()s let through (charged), total */
	__u64 refused;          /* connect()s refused, total */
	__u64 seeded;           /* streams that existed when the cap was set */
	__u64 released;         /* streams counted down, total */
	/* Pace mode (TB_CAP_MODE_PACE): the cap's sending streams together
	 * send at most rate_bytes_per_s, each rate / active (docs/cap.md). */
	__u32 mode;             /* TB_CAP_MODE_* */
	__u32 epoch_checkins;   /* streams that checked in this epoch */
	__u64 rate_bytes_per_s; /* target of the whole group; 0 in refuse mode */
	__u64 epoch_start_ns;   /* start of the current check-in epoch */
	__u32 prev_checkins;    /* check-ins of the previous epoch */
	__u32 dirs;             /* pace mode: TB_CAP_DIR_* it paces */
};

/* Value of cap_follow, keyed by cap id: a pace cap that follows its path
 * (docs/cap.md, "Scout and follow rate"). Written by userspace only, whole
 * values at a time; no entry is the same as all zeros. */
struct tb_cap_follow {
	__u64 scout_cookie;     /* socket left unpaced to measure the path; 0: none */
	__u64 rate_bytes_per_s; /* target of the paced streams; 0: the cap's own */
};

/* The single value of cap_state: the BPF side's health counters. (The next
 * cap id lives apart, in cap_ids, as only userspace writes it.) */
struct tb_cap_state {
	__u64 nomem;            /* connect()s refused: no socket storage */
	__u64 overflow;         /* connect()s refused: > TB_CAP_SOCK_MAX caps */
	__u64 seed_skipped;     /* sockets not seeded (storage or overflow) */
};

#endif /* TAMEBPF_CAP_H */

/* SPDX-License-Identifier: GPL-2.0 */
/*
 * libtamebpf: the C API the Python package calls through ctypes.
 * Functions return 0 or a negative errno; tb_last_error() then says what
 * failed in one line. Structs that cross the boundary live in bpf/flows.h.
 */
#ifndef TAMEBPF_LIB_H
#define TAMEBPF_LIB_H

#include <stddef.h>
#include <linux/types.h>
#include "flows.h"
#include "acktrain.h"

struct tb_flows;

/* Load and attach flow telemetry for cgroup subtree `cgid` at depth `level`
 * below the cgroup v2 root (cgid 0: every cgroup). Flows are read in the
 * network namespaces given as open fds (none: the caller's own). The closed
 * map holds `closed_max` flows between two reads (0: the default). */
int tb_flows_open(struct tb_flows **out, __u64 cgid, __u32 level,
		  __u32 closed_max, const int *netns_fds, int n_netns);

/* One snapshot: open flows, then flows that closed since the last snapshot
 * (flag TB_FLOW_CLOSED), each cookie once. *records stays valid until the
 * next call on the same handle. */
int tb_flows_snapshot(struct tb_flows *h, const struct tb_flow **records,
		      size_t *count);

/* Health counters of the BPF side, and how full the closed map was at the
 * last snapshot. */
int tb_flows_stats(struct tb_flows *h, struct tb_flows_stats *stats,
		   __u32 *closed_fill, __u32 *closed_max);

void tb_flows_close(struct tb_flows *h);

/* What changed between snapshots (flowdiff.c): give each snapshot's records
 * in turn; get the indices of the records that are new, changed in anything
 * but their read time, or closed, the cookies of the last snapshot's open
 * flows that are gone (both valid until the next update), and the latest
 * read time of an open flow (0: none open). */
struct tb_flowdiff;

struct tb_flowdiff *tb_flowdiff_new(void);
int tb_flowdiff_update(struct tb_flowdiff *d, const struct tb_flow *recs, size_t n,
		       const __u32 **changed, size_t *n_changed,
		       const __u64 **vanished, size_t *n_vanished, __u64 *read_ns);
void tb_flowdiff_free(struct tb_flowdiff *d);

/* What the last failed call of this thread said, in one line; libbpf's
 * debug log on stderr when verbose (common.c). */
const char *tb_last_error(void);
void tb_set_verbose(int verbose);

/* Layout of the boundary structs as this compiler sees them, for the test
 * that compares it with Python's ctypes and the BPF object's BTF.
 * Returns -1 for an unknown name. */
long tb_abi_sizeof(const char *type);
long tb_abi_offsetof(const char *type, const char *field);

/* cap: at most N TCP streams from a cgroup subtree to a destination
 * (cap_*.c, bpf/cap.bpf.c). Everything is pinned in `pin_dir` (a bpffs
 * directory) and outlives the calling process. */
#include "cap.h"

/* One change of a cap plan (tb_cap_commit). Library API only (BPF never
 * sees it); mirrored by userspace/tamebpf/kernel/abi.py. */
#define TB_CAP_OP_ADD 1
#define TB_CAP_OP_REMOVE 2
struct tb_cap_change {
	struct tb_cap_rule rule; /* destination; for an add the new cap's id
				  * is written back (on -EEXIST: the cap there) */
	__u64 cgid;              /* remove: the capped cgroup (it may be gone) */
	__u64 rate;              /* add, pace mode: target bytes/s; else 0 */
	__u32 op;                /* TB_CAP_OP_* */
	__u32 max;               /* add: N (pace mode: any, never refuses) */
	__u32 mode;              /* add: TB_CAP_MODE_* */
	__u32 level;             /* add: depth below the cgroup v2 root */
	__u32 dirs;              /* add, pace mode: TB_CAP_DIR_* it paces */
	__u32 pad;
	const char *cg_path;     /* add: the cgroup directory, absolute */
	const char *rel_path;    /* add: below the cgroup v2 root, for list */
};

/* Make a set of changes (removes and adds, in that order) be in force
 * all at once, or none of them. Every change is checked against the caps
 * in force and the limits (TB_CAP_RULES_MAX per cgroup, TB_CAP_CGROUPS_MAX
 * cgroups) before anything is written; the new rules are staged under the
 * generation of cap_rules not in force and switched in with one update of
 * cap_gen; a failure before the switch undoes the staging. A command
 * killed at any point leaves the old caps or the new ones in force, and
 * the next command (tb_cap_commit, tb_cap_tidy) removes what it left.
 * Streams that already exist are counted for each new cap by the TCP
 * iterator in each namespace given (none: ours); a removed pace cap's
 * sockets get their pacing rate back to unlimited. On an error *failed is
 * the index of the change that caused it (n when none did): -EEXIST (that
 * destination is already capped there), -ENOENT (no such cap), -ENOSPC (a
 * limit), -EINVAL (a bad change). */
int tb_cap_commit(const char *pin_dir, struct tb_cap_change *changes, size_t n,
		  size_t *failed, const int *netns_fds, int n_netns);

/* Remove what a command killed midway left in pin_dir (see tb_cap_commit);
 * `cap list` calls it first, so what it lists is exactly what is pinned. */
int tb_cap_tidy(const char *pin_dir, const int *netns_fds, int n_netns);

/* The capped cgroups: up to `max` of them into cgids[] and cgs[]; *n is
 * how many there are (0, and success, when no cap is set). */
int tb_cap_list(const char *pin_dir, __u64 *cgids, struct tb_cap_cgroup *cgs,
		size_t max, size_t *n);

/* One cap's counters (a consistent copy, taken under its lock). */
int tb_cap_read_count(const char *pin_dir, __u64 id, struct tb_cap_count *out);

/* The BPF side's health counters. */
int tb_cap_read_state(const char *pin_dir, struct tb_cap_state *out);

/* Pace caps that follow their path (cap_follow.c, docs/cap.md "Scout and
 * follow rate"): how pace cap `id` is followed, in force from each paced
 * socket's next share recompute, without a commit. Set: -ENOENT when there
 * is no such cap, -EINVAL when it is not a pace cap. Clear: 0 also when
 * there was nothing to clear. Read: -ENOENT when the cap has no entry (or
 * no cap is set). Removing the cap removes its entry. */
int tb_cap_follow_set(const char *pin_dir, __u64 id, const struct tb_cap_follow *f);
int tb_cap_follow_clear(const char *pin_dir, __u64 id);
int tb_cap_follow_read(const char *pin_dir, __u64 id, struct tb_cap_follow *out);

/* Probe SYN timeout (synrto.c, bpf/synrto.bpf.c): sockets of the cgroup at
 * `cg_path` resend an unanswered SYN after 3 x the path's smoothed RTT
 * (200 ms to 1 s) instead of 1 s. The RTT is learned from the cgroup's first
 * established connection, or seeded with `srtt_us` (0: not known yet);
 * until then SYNs are resent after `first_rto_us` (0: the kernel's 1 s).
 * Closing the handle detaches the program. */
struct tb_synrto;

int tb_synrto_open(struct tb_synrto **out, const char *cg_path, __u32 srtt_us,
		   __u32 first_rto_us);
/* The RTT in use (0: none yet) and how many SYN timeouts were set. */
void tb_synrto_read(const struct tb_synrto *h, __u32 *srtt_us, __u64 *timeouts_set);
void tb_synrto_close(struct tb_synrto *h);

/* ACK log (acktrain.c, bpf/acktrain.bpf.c): every ACK that advances a
 * connection opened from cgroup `cg_path` (tb_acktrain_open), or one of the
 * `n` established connections of network namespace `netns_fd` (-1: ours)
 * with these cookies (tb_acktrain_window_open: a sampling window), with its
 * arrival time, until closed. tb_acktrain_read points into the live log:
 * `seen` ACKs so far (the first TB_ACKS_MAX kept; once over TB_ACKS_MAX
 * it stops counting: some were lost), `flows` connections
 * numbered by `cookies`. With `receive`, the connections receive: the log
 * holds their data segments' arrivals instead (each that brought new
 * data, its end sequence for the ACK), and tb_acktrain_rx points to each
 * connection's counts of holes, fills and duplicates (struct tb_rx_flow,
 * by the cookies' numbering). */
struct tb_acktrain;

int tb_acktrain_open(struct tb_acktrain **out, const char *cg_path, int receive);
int tb_acktrain_window_open(struct tb_acktrain **out, const __u64 *cookies, __u32 n,
			    int netns_fd, int receive);
int tb_acktrain_read(const struct tb_acktrain *h, const struct tb_ack **acks, __u64 *seen,
		     const __u64 **cookies, __u32 *flows);
const struct tb_rx_flow *tb_acktrain_rx(const struct tb_acktrain *h);
void tb_acktrain_close(struct tb_acktrain *h);

#endif /* TAMEBPF_LIB_H */

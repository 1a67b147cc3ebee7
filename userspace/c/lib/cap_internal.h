/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the parts of the cap loader share, one job each: cap_pins.c has the
 * pin directory and its lock, loading instances of cap.bpf.o, and
 * attaching and pinning links; cap_seed.c the TCP iterators that count a
 * new cap's existing streams and unpace a removed cap's sockets;
 * cap_rules.c the maps of the caps in force, their read side and tidying
 * up after a killed command; cap_commit.c plans a set of changes and
 * switches it in at once; cap_follow.c keeps how pace caps follow their
 * path.
 */
#ifndef TAMEBPF_CAP_INTERNAL_H
#define TAMEBPF_CAP_INTERNAL_H

#include <linux/types.h>
#include "internal.h"

struct cap_bpf;

enum { P_CONNECT = 1, P_STATE = 2, P_SEED = 4, P_UNPACE = 8 };

struct instance_cfg {
	unsigned progs;
	__u64 cgid;
	__u32 level;
	const struct tb_cap_rule *seed; /* with P_SEED */
	__u64 seed_cgid;
	__u32 seed_level;
	__u64 unpace_id; /* with P_UNPACE */
};

/* The pinned maps of a locked pin directory (fds, or -errno; follow may
 * be missing, see cap_open_maps). */
struct cap_maps {
	int rules, counts, ids, gen, follow;
};

/* The caps of one generation of cap_rules, in memory. */
struct cap_table {
	size_t n;
	__u64 cgids[TB_CAP_CGROUPS_MAX];
	struct tb_cap_cgroup cgs[TB_CAP_CGROUPS_MAX];
};

int cap_pin_path(char *out, const char *dir, const char *name);
int cap_lock_dir(const char *dir, int create, int how);
int cap_exists(const char *dir, const char *name);
int cap_open_pinned(const char *dir, const char *name);
struct cap_bpf *cap_load_instance(const char *dir, const struct instance_cfg *cfg,
				  int *err);
int cap_attach_state(struct cap_bpf *skel, const char *dir);
int cap_attach_cgroup(struct cap_bpf *skel, const char *dir, __u64 cgid, int cgfd);
int cap_cgroup_attached(const char *dir, __u64 cgid);
void cap_unpin_cgroup(const char *dir, __u64 cgid);
/* Unpin the links of every cgroup without caps in `keep` (NULL: all). */
void cap_unpin_cgroups_except(const char *dir, const struct cap_table *keep);
void cap_teardown(const char *dir);
int cap_same_dest(const struct tb_cap_rule *a, const struct tb_cap_rule *b);
int cap_seed(const char *dir, const struct tb_cap_rule *rule, __u64 cgid,
	     __u32 level, const int *netns_fds, int n_netns);
int cap_unpace(const char *dir, __u64 id, const int *netns_fds, int n_netns);
/* 0, or -EPROTO (error text set) when the pinned maps are of another
 * layout (an older tamebpf): they are never reused nor torn down. */
int cap_check_layout(const char *dir);
/* Open the pinned maps (all must be there); 0 or -errno. */
int cap_open_maps(const char *dir, struct cap_maps *m);
void cap_close_maps(struct cap_maps *m);
/* The generation in force (0 when unreadable). */
__u32 cap_live_gen(const struct cap_maps *m);
/* Read generation `gen` of cap_rules into t. */
void cap_read_table(const struct cap_maps *m, __u32 gen, struct cap_table *t);
/* How many caps t holds, over all its cgroups. */
size_t cap_table_caps(const struct cap_table *t);
/* With the directory locked: remove it all if no cap is in force (or its
 * maps are not all there). */
void cap_teardown_if_none(const char *dir);
/* With the directory locked: remove what a killed command left (rules of
 * the other generation, counters no rule names, links of cgroups without
 * caps; with teardown_if_empty everything, if no cap is in force). Returns
 * 1 when the directory was removed, 0 otherwise. */
int cap_tidy_locked(const char *dir, const int *netns_fds, int n_netns,
		    int teardown_if_empty);
/* cap_follow.c, with the directory locked: forget how a removed cap
 * followed its path, and what a killed command left (entries of caps
 * without counters). */
void cap_follow_forget(const struct cap_maps *m, __u64 id);
void cap_follow_tidy(const struct cap_maps *m);

#endif /* TAMEBPF_CAP_INTERNAL_H */

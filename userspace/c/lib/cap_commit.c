// SPDX-License-Identifier: GPL-2.0
/*
 * Changing caps all at once (tb_cap_commit, see tamebpf.h and docs/design.md,
 * "Atomic changes"):
 *
 *   1. plan:   the caps in force (generation G of cap_rules) are read into
 *              memory and every change is applied there and checked (no
 *              such cap, already capped, 16 per cgroup, 4096 cgroups, a
 *              bad cgroup). Nothing is written until all of them pass.
 *   2. stage:  counters for the new caps; programs attached to the cgroups
 *              capped for the first time (they find no rules yet: a lookup
 *              and ALLOW); the streams that already exist counted; the new
 *              rules written under generation G^1, which no program reads.
 *   3. switch: one update of cap_gen to G^1: from here every connect()
 *              sees the new caps.
 *   4. after:  the streams connected between the counting and the switch
 *              counted too; removed caps' counters deleted (their paced
 *              sockets unpaced); links of cgroups left without caps
 *              unpinned; everything removed if no cap is left.
 *
 * A failure in 2 undoes 2. A process killed in 1 or 2 leaves G in force,
 * killed in 4 leaves G^1; what it left (rules of the other generation,
 * counters no rule names, links of cgroups without caps) is removed by the
 * next command (cap_tidy_locked). The rules of G stay until then: a
 * connect() that read G just before the switch still finds them.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <linux/magic.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "cap_internal.h"
#include "cap.skel.h"

#ifndef AF_INET
#define AF_INET 2
#define AF_INET6 10
#endif

struct plan {
	struct cap_table t;                     /* the caps after the changes */
	const char *open_path[TB_CAP_CGROUPS_MAX]; /* cgroup dir, if an add names it */
	unsigned char attached[TB_CAP_CGROUPS_MAX]; /* links made by this commit */
	unsigned char staged[TB_CAP_CGROUPS_MAX];   /* written under the new gen */
};

static long find_cgroup(const struct cap_table *t, __u64 cgid)
{
	for (size_t i = 0; i < t->n; i++)
		if (t->cgids[i] == cgid)
			return (long)i;
	return -1;
}

static int check_add(const struct tb_cap_change *c)
{
	const struct tb_cap_rule *r = &c->rule;

	if (!c->max || (r->family != AF_INET && r->family != AF_INET6) ||
	    r->prefix_len > (r->family == AF_INET ? 32u : 128u) ||
	    (r->port && r->port_end < r->port) || (!r->port && r->port_end)) {
		tb_set_error("invalid cap (max %u, family %u, prefix /%u, ports %u-%u)",
			     c->max, r->family, r->prefix_len, r->port, r->port_end);
		return -EINVAL;
	}
	if (c->mode > TB_CAP_MODE_PACE || (c->mode == TB_CAP_MODE_PACE) != (c->rate != 0)) {
		tb_set_error("invalid cap mode %u with rate %llu", c->mode,
			     (unsigned long long)c->rate);
		return -EINVAL;
	}
	if (!c->rel_path || strlen(c->rel_path) >= TB_CAP_PATH_LEN) {
		tb_set_error("cgroup path %s is longer than %d characters",
			     c->rel_path ? c->rel_path : "(none)", TB_CAP_PATH_LEN - 1);
		return -ENAMETOOLONG;
	}
	return 0;
}

/* The id of the cgroup directory of an add, checked to be cgroup v2. */
static int cgroup_id(const char *path, __u64 *cgid)
{
	struct statfs fs;
	struct stat st;
	int fd, err = 0;

	fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		err = -errno;
		tb_set_error("cannot open cgroup %s: %s", path, strerror(-err));
		return err;
	}
	if (fstatfs(fd, &fs) || fs.f_type != CGROUP2_SUPER_MAGIC || fstat(fd, &st)) {
		tb_set_error("%s is not a cgroup v2 directory", path);
		err = -ENOTDIR;
	} else {
		*cgid = st.st_ino;
	}
	close(fd);
	return err;
}

static int plan_remove(struct plan *p, struct tb_cap_change *c)
{
	long i = find_cgroup(&p->t, c->cgid);
	struct tb_cap_cgroup *cg;
	__u32 j;

	if (i < 0) {
		tb_set_error("no caps on that cgroup");
		return -ENOENT;
	}
	cg = &p->t.cgs[i];
	for (j = 0; j < cg->n && j < TB_CAP_RULES_MAX; j++)
		if (cap_same_dest(&cg->rules[j], &c->rule))
			break;
	if (j >= cg->n || j >= TB_CAP_RULES_MAX) {
		tb_set_error("no cap for that destination on that cgroup");
		return -ENOENT;
	}
	c->rule.id = cg->rules[j].id;
	memmove(&cg->rules[j], &cg->rules[j + 1], (cg->n - j - 1) * sizeof(cg->rules[0]));
	cg->n--;
	memset(&cg->rules[cg->n], 0, sizeof(cg->rules[0]));
	return 0;
}

static int plan_add(struct plan *p, struct tb_cap_change *c, __u64 *next_id)
{
	struct tb_cap_cgroup *cg;
	long i;
	int err;

	err = check_add(c);
	if (!err)
		err = cgroup_id(c->cg_path, &c->cgid);
	if (err)
		return err;
	i = find_cgroup(&p->t, c->cgid);
	if (i < 0) {
		if (p->t.n >= TB_CAP_CGROUPS_MAX) {
			tb_set_error("%d cgroups are capped already, the most there can be",
				     TB_CAP_CGROUPS_MAX);
			return -ENOSPC;
		}
		i = (long)p->t.n++;
		p->t.cgids[i] = c->cgid;
		memset(&p->t.cgs[i], 0, sizeof(p->t.cgs[i]));
	}
	cg = &p->t.cgs[i];
	for (__u32 j = 0; j < cg->n && j < TB_CAP_RULES_MAX; j++) {
		if (cap_same_dest(&cg->rules[j], &c->rule)) {
			c->rule = cg->rules[j];
			tb_set_error("that destination is already capped on this cgroup");
			return -EEXIST;
		}
	}
	if (cg->n >= TB_CAP_RULES_MAX) {
		tb_set_error("cgroup %s would have more than %d caps, the most it can have",
			     c->rel_path, TB_CAP_RULES_MAX);
		return -ENOSPC;
	}
	cg->level = c->level;
	snprintf(cg->path, sizeof(cg->path), "%s", c->rel_path);
	c->rule.id = ++*next_id;
	cg->rules[cg->n++] = c->rule;
	p->open_path[i] = c->cg_path;
	return 0;
}

/* 1. plan: every change applied to p and checked before anything is
 * written; on the first that fails, *failed is its index. */
static int plan_all(struct plan *p, struct tb_cap_change *ch, size_t n,
		    __u64 *next_id, size_t *failed)
{
	int err = 0;

	for (size_t i = 0; i < n && !err; i++) {
		if (ch[i].op == TB_CAP_OP_REMOVE) {
			err = plan_remove(p, &ch[i]);
		} else if (ch[i].op == TB_CAP_OP_ADD) {
			err = plan_add(p, &ch[i], next_id);
		} else {
			tb_set_error("unknown cap change %u", ch[i].op);
			err = -EINVAL;
		}
		if (err)
			*failed = i;
	}
	return err;
}

static int attach_new_cgroups(struct plan *p, const char *dir)
{
	struct instance_cfg cfg = { .progs = P_CONNECT };
	struct cap_bpf *skel;
	int err, fd;

	for (size_t i = 0; i < p->t.n; i++) {
		if (!p->t.cgs[i].n || !p->open_path[i] ||
		    cap_cgroup_attached(dir, p->t.cgids[i]))
			continue;
		cap_unpin_cgroup(dir, p->t.cgids[i]); /* a part left by a killed command */
		cfg.cgid = p->t.cgids[i];
		cfg.level = p->t.cgs[i].level;
		skel = cap_load_instance(dir, &cfg, &err);
		if (!skel)
			return err;
		fd = open(p->open_path[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0) {
			err = -errno;
			tb_set_error("cannot open cgroup %s: %s", p->open_path[i], strerror(-err));
		} else {
			err = cap_attach_cgroup(skel, dir, cfg.cgid, fd);
			close(fd);
		}
		cap_bpf__destroy(skel);
		if (err)
			return err;
		p->attached[i] = 1;
	}
	return 0;
}

static int seed_adds(const char *dir, const struct tb_cap_change *ch, size_t n,
		     const int *netns_fds, int n_netns)
{
	int err;

	for (size_t i = 0; i < n; i++) {
		if (ch[i].op != TB_CAP_OP_ADD)
			continue;
		err = cap_seed(dir, &ch[i].rule, ch[i].cgid, ch[i].level, netns_fds, n_netns);
		if (err)
			return err;
	}
	return 0;
}

static int stage_counters(const struct cap_maps *m, const struct tb_cap_change *ch,
			  size_t n, __u64 next_id)
{
	__u32 zero = 0;

	for (size_t i = 0; i < n; i++) {
		/* Mode and target go in with the counters: the cap is whole
		 * from the moment any program can see it. */
		struct tb_cap_count count = {
			.max = ch[i].max, .mode = ch[i].mode,
			.rate_bytes_per_s = ch[i].rate, .dirs = ch[i].dirs,
		};

		if (ch[i].op != TB_CAP_OP_ADD)
			continue;
		if (bpf_map_update_elem(m->counts, &ch[i].rule.id, &count, BPF_NOEXIST)) {
			int err = -errno;

			tb_set_error("cannot create the cap's counters: %s", strerror(-err));
			return err;
		}
	}
	/* ids are never reused while the maps exist */
	if (bpf_map_update_elem(m->ids, &zero, &next_id, BPF_ANY)) {
		int err = -errno;

		tb_set_error("cannot store the next cap id: %s", strerror(-err));
		return err;
	}
	return 0;
}

static int stage_rules(struct plan *p, const struct cap_maps *m, __u32 gen)
{
	for (size_t i = 0; i < p->t.n; i++) {
		struct tb_cap_key key = { .cgid = p->t.cgids[i], .gen = gen };

		if (!p->t.cgs[i].n)
			continue;
		if (bpf_map_update_elem(m->rules, &key, &p->t.cgs[i], BPF_ANY)) {
			int err = -errno;

			tb_set_error("cannot store the caps: %s", strerror(-err));
			return err;
		}
		p->staged[i] = 1;
	}
	return 0;
}

static void unstage(struct plan *p, const struct cap_maps *m, const char *dir,
		    const struct tb_cap_change *ch, size_t n, __u32 gen)
{
	for (size_t i = 0; i < p->t.n; i++) {
		struct tb_cap_key key = { .cgid = p->t.cgids[i], .gen = gen };

		if (p->staged[i])
			bpf_map_delete_elem(m->rules, &key);
		if (p->attached[i])
			cap_unpin_cgroup(dir, p->t.cgids[i]);
	}
	for (size_t i = 0; i < n; i++)
		if (ch[i].op == TB_CAP_OP_ADD && ch[i].rule.id)
			bpf_map_delete_elem(m->counts, &ch[i].rule.id);
}

/* After the switch: the removed caps' counters go, with how they followed
 * their path, then their paced sockets are unpaced (no RTT callback can put
 * a rate back by then; the scout is unpaced with the others). */
static int retire_removed(const struct cap_maps *m, const char *dir,
			  const struct tb_cap_change *ch, size_t n,
			  const int *netns_fds, int n_netns)
{
	int err = 0;

	for (size_t i = 0; i < n; i++) {
		struct tb_cap_count count = {};

		if (ch[i].op != TB_CAP_OP_REMOVE)
			continue;
		bpf_map_lookup_elem_flags(m->counts, &ch[i].rule.id, &count, BPF_F_LOCK);
		bpf_map_delete_elem(m->counts, &ch[i].rule.id);
		cap_follow_forget(m, ch[i].rule.id);
		if (count.mode == TB_CAP_MODE_PACE && !err)
			err = cap_unpace(dir, ch[i].rule.id, netns_fds, n_netns);
	}
	return err;
}

int tb_cap_commit(const char *pin_dir, struct tb_cap_change *ch, size_t n,
		  size_t *failed, const int *netns_fds, int n_netns)
{
	struct instance_cfg base_cfg = { 0 };
	struct cap_maps m = { -1, -1, -1, -1, -1 };
	struct cap_bpf *base = NULL;
	struct plan *p = NULL;
	int lock, err = 0, adding = 0, switched = 0, retired, ours = 0;
	__u32 gen, zero = 0;
	__u64 next_id = 0;

	tb_libbpf_logging();
	*failed = n;
	for (size_t i = 0; i < n; i++)
		adding |= ch[i].op == TB_CAP_OP_ADD;
	lock = cap_lock_dir(pin_dir, adding, LOCK_EX);
	if (lock < 0) {
		if (lock == -ENOENT) {
			*failed = 0;
			tb_set_error("no caps are set");
		}
		return lock;
	}
	/* From the lock on, every way out is the one below `out:`. */
	err = cap_check_layout(pin_dir);
	if (err)
		goto out;
	p = calloc(1, sizeof(*p));
	if (!p) {
		tb_set_error("out of memory");
		err = -ENOMEM;
		goto out;
	}
	/* The layout is ours: from here a directory left without caps is
	 * removed on the way out (one of another layout never is). */
	ours = 1;
	/* The maps (pinned by this load if they are not yet) and, the first
	 * time, the global count-down program. */
	base_cfg.progs = adding && !cap_exists(pin_dir, "state") ? P_STATE : 0;
	base = cap_load_instance(pin_dir, &base_cfg, &err);
	if (!base)
		goto out;
	err = cap_open_maps(pin_dir, &m);
	if (err) {
		tb_set_error("cannot open the pinned cap maps in %s: %s", pin_dir,
			     strerror(-err));
		goto out;
	}
	cap_tidy_locked(pin_dir, netns_fds, n_netns, 0);
	gen = cap_live_gen(&m);
	cap_read_table(&m, gen, &p->t);
	if (bpf_map_lookup_elem(m.ids, &zero, &next_id))
		next_id = 0;

	/* 1. plan */
	err = plan_all(p, ch, n, &next_id, failed);
	if (err)
		goto out;

	/* 2. stage */
	err = stage_counters(&m, ch, n, next_id);
	if (!err && base_cfg.progs & P_STATE)
		err = cap_attach_state(base, pin_dir);
	if (!err)
		err = attach_new_cgroups(p, pin_dir);
	if (!err)
		err = seed_adds(pin_dir, ch, n, netns_fds, n_netns);
	if (!err)
		err = stage_rules(p, &m, gen ^ 1);
	/* 3. switch */
	if (!err) {
		__u32 next_gen = gen ^ 1;

		if (bpf_map_update_elem(m.gen, &zero, &next_gen, BPF_ANY)) {
			err = -errno;
			tb_set_error("cannot switch to the new caps: %s", strerror(-err));
		} else {
			switched = 1;
		}
	}
	if (!switched) {
		unstage(p, &m, pin_dir, ch, n, gen ^ 1);
		goto out;
	}
	/* 4. after: the new caps are in force; what fails now is reported,
	 * and what is left is removed by the next command. */
	err = seed_adds(pin_dir, ch, n, netns_fds, n_netns);
	retired = retire_removed(&m, pin_dir, ch, n, netns_fds, n_netns);
	if (!err)
		err = retired;
	for (size_t i = 0; i < p->t.n; i++)
		if (!p->t.cgs[i].n)
			cap_unpin_cgroup(pin_dir, p->t.cgids[i]);

out:
	if (base)
		cap_bpf__destroy(base);
	cap_close_maps(&m);
	/* No cap in force (a failed first cap, or the last one removed):
	 * nothing stays behind. */
	if (ours)
		cap_teardown_if_none(pin_dir);
	free(p);
	close(lock);
	return err;
}

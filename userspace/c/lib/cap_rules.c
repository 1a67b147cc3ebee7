// SPDX-License-Identifier: GPL-2.0
/*
 * The cap loader's rules: the pinned maps that say which caps are in force
 * (cap_rules under the generation cap_gen names, their counters in
 * cap_counts), read by tb_cap_list and tb_cap_read_*, and tidied after a
 * killed command. The pins and links are in cap_pins.c; changes go through
 * cap_commit.c.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/file.h>
#include <bpf/bpf.h>
#include "cap_internal.h"

int cap_same_dest(const struct tb_cap_rule *a, const struct tb_cap_rule *b)
{
	return a->family == b->family && a->port == b->port &&
	       a->port_end == b->port_end && a->prefix_len == b->prefix_len &&
	       !memcmp(a->addr, b->addr, sizeof(a->addr));
}

int cap_open_maps(const char *dir, struct cap_maps *m)
{
	m->rules = cap_open_pinned(dir, "cap_rules");
	m->counts = cap_open_pinned(dir, "cap_counts");
	m->ids = cap_open_pinned(dir, "cap_ids");
	m->gen = cap_open_pinned(dir, "cap_gen");
	/* Optional: caps pinned by a tamebpf older than it lack it until the
	 * next load pins it (cap_load_instance). */
	m->follow = cap_open_pinned(dir, "cap_follow");
	if (m->rules >= 0 && m->counts >= 0 && m->ids >= 0 && m->gen >= 0)
		return 0;
	int err = m->rules < 0 ? m->rules : m->counts < 0 ? m->counts :
		  m->ids < 0 ? m->ids : m->gen;
	cap_close_maps(m);
	return err;
}

void cap_close_maps(struct cap_maps *m)
{
	int *fds[] = { &m->rules, &m->counts, &m->ids, &m->gen, &m->follow };

	for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++) {
		if (*fds[i] >= 0)
			close(*fds[i]);
		*fds[i] = -1;
	}
}

__u32 cap_live_gen(const struct cap_maps *m)
{
	__u32 zero = 0, gen = 0;

	if (bpf_map_lookup_elem(m->gen, &zero, &gen))
		return 0;
	return gen & 1;
}

void cap_read_table(const struct cap_maps *m, __u32 gen, struct cap_table *t)
{
	struct tb_cap_key key, next;
	void *prev = NULL;

	t->n = 0;
	while (!bpf_map_get_next_key(m->rules, prev, &next)) {
		key = next;
		prev = &key;
		if (key.gen != gen || t->n >= TB_CAP_CGROUPS_MAX)
			continue;
		if (bpf_map_lookup_elem(m->rules, &key, &t->cgs[t->n]))
			continue; /* deleted while we walked */
		t->cgids[t->n++] = key.cgid;
	}
}

size_t cap_table_caps(const struct cap_table *t)
{
	size_t caps = 0;

	for (size_t i = 0; i < t->n; i++)
		caps += t->cgs[i].n;
	return caps;
}

void cap_teardown_if_none(const char *dir)
{
	struct cap_table *live;
	struct cap_maps m;

	if (cap_open_maps(dir, &m)) {
		cap_teardown(dir);
		return;
	}
	live = calloc(1, sizeof(*live));
	if (live) {
		cap_read_table(&m, cap_live_gen(&m), live);
		if (!cap_table_caps(live)) {
			cap_close_maps(&m);
			cap_teardown(dir);
		}
		free(live);
	}
	cap_close_maps(&m);
}

static int table_has_id(const struct cap_table *t, __u64 id)
{
	for (size_t i = 0; i < t->n; i++)
		for (__u32 j = 0; j < t->cgs[i].n && j < TB_CAP_RULES_MAX; j++)
			if (t->cgs[i].rules[j].id == id)
				return 1;
	return 0;
}

/* Delete the rules of the generation not in force (collected first:
 * deleting while walking a hash map can restart the walk). */
static void delete_stale_rules(int fd, __u32 live)
{
	static struct tb_cap_key keys[2 * TB_CAP_CGROUPS_MAX];
	struct tb_cap_key key, next;
	void *prev = NULL;
	size_t n = 0;

	while (n < 2 * TB_CAP_CGROUPS_MAX && !bpf_map_get_next_key(fd, prev, &next)) {
		key = next;
		prev = &key;
		if (key.gen != live)
			keys[n++] = key;
	}
	for (size_t i = 0; i < n; i++)
		bpf_map_delete_elem(fd, &keys[i]);
}

static void delete_orphan_counts(const char *dir, const struct cap_maps *m,
				 const struct cap_table *live, const int *netns_fds,
				 int n_netns)
{
	static __u64 ids[TB_CAP_CGROUPS_MAX * TB_CAP_RULES_MAX];
	struct tb_cap_count count;
	__u64 key, next;
	void *prev = NULL;
	size_t n = 0;

	while (n < sizeof(ids) / sizeof(ids[0]) &&
	       !bpf_map_get_next_key(m->counts, prev, &next)) {
		key = next;
		prev = &key;
		if (!table_has_id(live, key))
			ids[n++] = key;
	}
	for (size_t i = 0; i < n; i++) {
		memset(&count, 0, sizeof(count));
		bpf_map_lookup_elem_flags(m->counts, &ids[i], &count, BPF_F_LOCK);
		bpf_map_delete_elem(m->counts, &ids[i]);
		if (count.mode == TB_CAP_MODE_PACE)
			cap_unpace(dir, ids[i], netns_fds, n_netns);
	}
}

int cap_check_layout(const char *dir)
{
	struct bpf_map_info info = {};
	__u32 len = sizeof(info);
	int fd, err = 0;

	fd = cap_open_pinned(dir, "cap_rules");
	if (fd < 0)
		return 0; /* nothing pinned yet */
	if (!bpf_obj_get_info_by_fd(fd, &info, &len) &&
	    info.key_size != sizeof(struct tb_cap_key)) {
		tb_set_error("the caps in %s were set by an older tamebpf (another map layout); "
			     "remove them with that version ('cap apply --prune /dev/null'), or "
			     "remove the directory to drop them", dir);
		err = -EPROTO;
	}
	close(fd);
	return err;
}

int cap_tidy_locked(const char *dir, const int *netns_fds, int n_netns,
		    int teardown_if_empty)
{
	struct cap_table *live;
	struct cap_maps m;
	size_t caps;

	if (cap_check_layout(dir))
		return 0; /* not ours to tidy: never tear down another layout */
	if (cap_open_maps(dir, &m)) {
		/* a first command killed before its maps were all pinned */
		if (teardown_if_empty)
			cap_teardown(dir);
		return teardown_if_empty;
	}
	live = calloc(1, sizeof(*live));
	if (!live) {
		cap_close_maps(&m);
		return 0;
	}
	cap_read_table(&m, cap_live_gen(&m), live);
	delete_stale_rules(m.rules, cap_live_gen(&m));
	delete_orphan_counts(dir, &m, live, netns_fds, n_netns);
	cap_follow_tidy(&m);
	cap_unpin_cgroups_except(dir, live);
	caps = cap_table_caps(live);
	cap_close_maps(&m);
	free(live);
	if (caps || !teardown_if_empty)
		return 0;
	cap_teardown(dir);
	return 1;
}

int tb_cap_tidy(const char *pin_dir, const int *netns_fds, int n_netns)
{
	int lock, err;

	tb_libbpf_logging();
	lock = cap_lock_dir(pin_dir, 0, LOCK_EX);
	if (lock < 0)
		return lock == -ENOENT ? 0 : lock; /* ENOENT: no caps */
	err = cap_check_layout(pin_dir);
	if (!err)
		cap_tidy_locked(pin_dir, netns_fds, n_netns, 1);
	close(lock);
	return err;
}

int tb_cap_list(const char *pin_dir, __u64 *cgids, struct tb_cap_cgroup *cgs,
		size_t max, size_t *n)
{
	struct tb_cap_key key, next;
	struct tb_cap_cgroup cg;
	struct cap_maps m;
	void *prev = NULL;
	int lock, err;
	__u32 gen;

	tb_libbpf_logging();
	*n = 0;
	lock = cap_lock_dir(pin_dir, 0, LOCK_SH);
	if (lock < 0)
		return lock == -ENOENT ? 0 : lock; /* ENOENT: no caps */
	err = cap_open_maps(pin_dir, &m);
	if (err) {
		close(lock);
		if (err == -ENOENT)
			return 0; /* half made or half removed: no cap is in force */
		tb_set_error("cannot open the pinned cap maps in %s: %s", pin_dir,
			     strerror(-err));
		return err;
	}
	gen = cap_live_gen(&m);
	while (!bpf_map_get_next_key(m.rules, prev, &next)) {
		key = next;
		prev = &key;
		if (key.gen != gen || bpf_map_lookup_elem(m.rules, &key, &cg) || !cg.n)
			continue;
		if (*n < max) {
			cgs[*n] = cg;
			cgids[*n] = key.cgid;
		}
		(*n)++;
	}
	cap_close_maps(&m);
	close(lock);
	return 0;
}

static int read_one(const char *pin_dir, const char *map, const void *key,
		    void *value, __u64 flags)
{
	int fd, err = 0;

	fd = cap_open_pinned(pin_dir, map);
	if (fd < 0) {
		tb_set_error("cannot open %s/%s: %s", pin_dir, map, strerror(-fd));
		return fd;
	}
	if (bpf_map_lookup_elem_flags(fd, key, value, flags)) {
		err = -errno;
		tb_set_error("cannot read %s: %s", map, strerror(-err));
	}
	close(fd);
	return err;
}

int tb_cap_read_count(const char *pin_dir, __u64 id, struct tb_cap_count *out)
{
	tb_libbpf_logging();
	return read_one(pin_dir, "cap_counts", &id, out, BPF_F_LOCK);
}

int tb_cap_read_state(const char *pin_dir, struct tb_cap_state *out)
{
	__u32 zero = 0;

	tb_libbpf_logging();
	return read_one(pin_dir, "cap_state", &zero, out, 0);
}

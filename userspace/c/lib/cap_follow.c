// SPDX-License-Identifier: GPL-2.0
/*
 * Pace caps that follow their path (docs/cap.md, "Scout and follow rate"):
 * per cap, the socket left unpaced to measure the path (the scout) and the
 * rate the paced streams share instead of the cap's own. tb_cap_pace reads
 * cap_follow from each paced socket's next share recompute on; a change
 * needs no commit.
 *
 * Entries are written whole with plain map updates: there is one writer
 * (the agent of `tamebpf export`), and the BPF side copies the two fields
 * out once per recompute. A set holds the pin directory's lock shared, so
 * it cannot land between a commit removing the cap and that commit
 * deleting the entry: no entry outlives its cap (cap_follow_forget, and
 * cap_follow_tidy after a killed command).
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <sys/file.h>
#include <bpf/bpf.h>
#include "cap_internal.h"

#define FOLLOW_MAX (TB_CAP_CGROUPS_MAX * TB_CAP_RULES_MAX) /* as cap_counts */

/* The pinned cap_follow, or -errno with the error text set. */
static int open_follow(const char *pin_dir)
{
	int fd = cap_open_pinned(pin_dir, "cap_follow");

	if (fd == -ENOENT)
		tb_set_error("%s/cap_follow is not pinned: no caps are set, or they were "
			     "set by an older tamebpf", pin_dir);
	else if (fd < 0)
		tb_set_error("cannot open %s/cap_follow: %s", pin_dir, strerror(-fd));
	return fd;
}

/* 0 when cap `id` is a pace cap; the scout and follow rate mean nothing
 * to a refuse cap, whose sockets are never paced. */
static int check_pace_cap(const char *pin_dir, __u64 id)
{
	struct tb_cap_count count = {};
	int fd, err = 0;

	fd = cap_open_pinned(pin_dir, "cap_counts");
	if (fd < 0) {
		tb_set_error("no caps are set in %s", pin_dir);
		return fd;
	}
	if (bpf_map_lookup_elem(fd, &id, &count)) {
		err = -errno;
		tb_set_error(err == -ENOENT ? "no cap with id %llu" : "cannot read cap %llu",
			     (unsigned long long)id);
	} else if (count.mode != TB_CAP_MODE_PACE) {
		tb_set_error("cap %llu is not a pace cap: only pace caps follow their path",
			     (unsigned long long)id);
		err = -EINVAL;
	}
	close(fd);
	return err;
}

int tb_cap_follow_set(const char *pin_dir, __u64 id, const struct tb_cap_follow *f)
{
	int lock, fd = -1, err;

	tb_libbpf_logging();
	lock = cap_lock_dir(pin_dir, 0, LOCK_SH);
	if (lock < 0) {
		if (lock == -ENOENT)
			tb_set_error("no caps are set in %s", pin_dir);
		return lock;
	}
	err = check_pace_cap(pin_dir, id);
	if (!err) {
		fd = open_follow(pin_dir);
		err = fd < 0 ? fd : 0;
	}
	if (!err) {
		if (bpf_map_update_elem(fd, &id, f, BPF_ANY)) {
			err = -errno;
			tb_set_error("cannot store how cap %llu follows its path: %s",
				     (unsigned long long)id, strerror(-err));
		}
		close(fd);
	}
	close(lock);
	return err;
}

int tb_cap_follow_clear(const char *pin_dir, __u64 id)
{
	int fd, err = 0;

	tb_libbpf_logging();
	fd = cap_open_pinned(pin_dir, "cap_follow");
	if (fd == -ENOENT)
		return 0; /* no caps, so nothing follows */
	if (fd < 0) {
		tb_set_error("cannot open %s/cap_follow: %s", pin_dir, strerror(-fd));
		return fd;
	}
	if (bpf_map_delete_elem(fd, &id) && errno != ENOENT) {
		err = -errno;
		tb_set_error("cannot clear how cap %llu follows its path: %s",
			     (unsigned long long)id, strerror(-err));
	}
	close(fd);
	return err;
}

int tb_cap_follow_read(const char *pin_dir, __u64 id, struct tb_cap_follow *out)
{
	int fd, err = 0;

	tb_libbpf_logging();
	fd = open_follow(pin_dir);
	if (fd < 0)
		return fd;
	if (bpf_map_lookup_elem(fd, &id, out)) {
		err = -errno;
		if (err == -ENOENT)
			tb_set_error("cap %llu does not follow its path", (unsigned long long)id);
		else
			tb_set_error("cannot read cap_follow: %s", strerror(-err));
	}
	close(fd);
	return err;
}

void cap_follow_forget(const struct cap_maps *m, __u64 id)
{
	if (m->follow >= 0)
		bpf_map_delete_elem(m->follow, &id);
}

void cap_follow_tidy(const struct cap_maps *m)
{
	static __u64 ids[FOLLOW_MAX];
	struct tb_cap_count count;
	__u64 key, next;
	void *prev = NULL;
	size_t n = 0;

	if (m->follow < 0)
		return;
	/* collected first: deleting while walking a hash map can restart it */
	while (n < FOLLOW_MAX && !bpf_map_get_next_key(m->follow, prev, &next)) {
		key = next;
		prev = &key;
		if (bpf_map_lookup_elem(m->counts, &key, &count) && errno == ENOENT)
			ids[n++] = key;
	}
	for (size_t i = 0; i < n; i++)
		bpf_map_delete_elem(m->follow, &ids[i]);
}

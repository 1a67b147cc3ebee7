// SPDX-License-Identifier: GPL-2.0
/*
 * Stream caps loader: sets and removes caps, and reads them back, from any
 * process. Everything lives in one bpffs directory so caps outlive us:
 *
 *   cap_rules cap_counts cap_state cap_ids cap_socks   maps (pinned by name)
 *   state                     link of tb_cap_state (tp_btf), one for all
 *   cg<ID>_c4 cg<ID>_c6 cg<ID>_rel   links of one capped cgroup
 *
 * Each operation takes an exclusive flock on the directory, so two tamebpf
 * processes never interleave. Removing a pin of a link detaches it; removing
 * the last cap removes every pin and the directory.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <linux/magic.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "internal.h"
#include "cap.skel.h"

#ifndef AF_INET
#define AF_INET 2
#define AF_INET6 10
#endif

static const char *const MAP_PINS[] = {
	"cap_rules", "cap_counts", "cap_state", "cap_ids", "cap_socks",
};
/* Links pinned per capped cgroup. "pace" (sock_ops) is attached with the
 * others: it does work only for sockets charged to a pace-mode cap. */
static const char *const CG_LINKS[] = { "c4", "c6", "rel", "pace" };
#define N_CG_LINKS 4

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

static int pin_path(char *out, const char *dir, const char *name)
{
	if (snprintf(out, PATH_MAX, "%s/%s", dir, name) >= PATH_MAX)
		return -ENAMETOOLONG;
	return 0;
}

static int cg_link_path(char *out, const char *dir, __u64 cgid, int i)
{
	char name[64];

	snprintf(name, sizeof(name), "cg%llu_%s", (unsigned long long)cgid,
		 CG_LINKS[i]);
	return pin_path(out, dir, name);
}

static int mkdirs(const char *dir)
{
	char buf[PATH_MAX];
	char *p;

	if (snprintf(buf, sizeof(buf), "%s", dir) >= (int)sizeof(buf))
		return -ENAMETOOLONG;
	for (p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0700) && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, 0700) && errno != EEXIST)
		return -errno;
	return 0;
}

/* Lock the pin directory (creating it when asked). A process that waited
 * for the lock while the last cap was removed holds a deleted directory:
 * it starts again. Returns the locked fd, or -errno. */
static int lock_dir(const char *dir, int create, int how)
{
	struct stat held, now;
	struct statfs fs;
	int fd, err;

	for (;;) {
		if (create && (err = mkdirs(dir))) {
			tb_set_error("cannot create pin directory %s: %s", dir,
				     strerror(-err));
			return err;
		}
		fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0)
			return -errno; /* ENOENT: no caps */
		if (fstatfs(fd, &fs) || fs.f_type != BPF_FS_MAGIC) {
			close(fd);
			tb_set_error("%s is not on a BPF filesystem (mount -t bpf bpf /sys/fs/bpf)",
				     dir);
			return -ENOTSUP;
		}
		if (flock(fd, how)) {
			err = -errno;
			close(fd);
			return err;
		}
		if (!fstat(fd, &held) && !stat(dir, &now) &&
		    held.st_ino == now.st_ino && held.st_dev == now.st_dev)
			return fd;
		close(fd);
		if (!create)
			return -ENOENT;
	}
}

static int exists(const char *dir, const char *name)
{
	char path[PATH_MAX];

	return !pin_path(path, dir, name) && !access(path, F_OK);
}

static int open_pinned(const char *dir, const char *name)
{
	char path[PATH_MAX];
	int fd, err;

	err = pin_path(path, dir, name);
	if (err)
		return err;
	fd = bpf_obj_get(path);
	return fd < 0 ? -errno : fd;
}

/* Load one instance of the object. Its maps come from (or are pinned into)
 * the directory; only the programs asked for are loaded. */
static struct cap_bpf *load_instance(const char *dir,
				     const struct instance_cfg *cfg, int *err)
{
	LIBBPF_OPTS(bpf_object_open_opts, opts, .pin_root_path = dir);
	struct cap_bpf *skel;

	skel = cap_bpf__open_opts(&opts);
	if (!skel) {
		*err = -errno;
		tb_set_error("cannot open the cap BPF object: %s", strerror(-*err));
		return NULL;
	}
	skel->rodata->my_cgid = cfg->cgid;
	skel->rodata->my_level = cfg->level;
	if (cfg->seed) {
		skel->rodata->seed_id = cfg->seed->id;
		skel->rodata->seed_cgid = cfg->seed_cgid;
		skel->rodata->seed_level = cfg->seed_level;
		memcpy((void *)&skel->rodata->seed_rule, cfg->seed,
		       sizeof(*cfg->seed));
	}
	skel->rodata->unpace_id = cfg->unpace_id;
	bpf_program__set_autoload(skel->progs.tb_cap_connect4, cfg->progs & P_CONNECT);
	bpf_program__set_autoload(skel->progs.tb_cap_connect6, cfg->progs & P_CONNECT);
	bpf_program__set_autoload(skel->progs.tb_cap_release, cfg->progs & P_CONNECT);
	bpf_program__set_autoload(skel->progs.tb_cap_pace, cfg->progs & P_CONNECT);
	bpf_program__set_autoload(skel->progs.tb_cap_state, cfg->progs & P_STATE);
	bpf_program__set_autoload(skel->progs.tb_cap_seed, cfg->progs & P_SEED);
	bpf_program__set_autoload(skel->progs.tb_cap_unpace, cfg->progs & P_UNPACE);
	*err = cap_bpf__load(skel);
	if (*err) {
		tb_set_error("cannot load the cap BPF programs: %s", strerror(-*err));
		cap_bpf__destroy(skel);
		return NULL;
	}
	return skel;
}

static int attach_pinned(struct bpf_link *link, const char *path,
			 const char *what)
{
	int err;

	if (!link) {
		err = -errno;
		tb_set_error("cannot attach %s: %s", what, strerror(-err));
		return err;
	}
	err = bpf_link__pin(link, path);
	if (err)
		tb_set_error("cannot pin %s at %s: %s", what, path, strerror(-err));
	bpf_link__destroy(link); /* closes our fd; the pin (if any) holds it */
	return err;
}

static void unpin_cgroup(const char *dir, __u64 cgid)
{
	char path[PATH_MAX];

	for (int i = 0; i < N_CG_LINKS; i++)
		if (!cg_link_path(path, dir, cgid, i))
			unlink(path);
}

static int attach_cgroup(struct cap_bpf *skel, const char *dir, __u64 cgid,
			 int cgfd)
{
	struct bpf_program *progs[N_CG_LINKS] = {
		skel->progs.tb_cap_connect4, skel->progs.tb_cap_connect6,
		skel->progs.tb_cap_release, skel->progs.tb_cap_pace,
	};
	char path[PATH_MAX];
	int err;

	for (int i = 0; i < N_CG_LINKS; i++) {
		err = cg_link_path(path, dir, cgid, i);
		if (!err)
			err = attach_pinned(bpf_program__attach_cgroup(progs[i], cgfd),
					    path, bpf_program__name(progs[i]));
		if (err) {
			unpin_cgroup(dir, cgid);
			return err;
		}
	}
	return 0;
}

/* Remove every pin we make, then the directory (and a parent named
 * "tamebpf" left empty). Names we did not make are left alone. */
static void teardown(const char *dir)
{
	char path[PATH_MAX], parent[PATH_MAX];
	int fd;

	fd = open_pinned(dir, "cap_rules");
	if (fd >= 0) {
		__u64 key, next;
		void *prev = NULL;

		while (!bpf_map_get_next_key(fd, prev, &next)) {
			unpin_cgroup(dir, next);
			key = next;
			prev = &key;
		}
		close(fd);
	}
	if (!pin_path(path, dir, "state"))
		unlink(path);
	for (size_t i = 0; i < sizeof(MAP_PINS) / sizeof(MAP_PINS[0]); i++)
		if (!pin_path(path, dir, MAP_PINS[i]))
			unlink(path);
	if (rmdir(dir))
		return;
	snprintf(parent, sizeof(parent), "%s", dir);
	if (!strcmp(basename(dirname(parent)), "tamebpf")) {
		snprintf(parent, sizeof(parent), "%s", dir);
		rmdir(dirname(parent));
	}
}

static int map_empty(int fd)
{
	__u64 next;

	return bpf_map_get_next_key(fd, NULL, &next) != 0;
}

static int same_dest(const struct tb_cap_rule *a, const struct tb_cap_rule *b)
{
	return a->family == b->family && a->port == b->port &&
	       a->prefix_len == b->prefix_len &&
	       !memcmp(a->addr, b->addr, sizeof(a->addr));
}

/* Read a TCP iterator once in each namespace (our own when n_netns is 0):
 * iter/tcp walks the namespace of the process that creates it. */
static int run_iter(struct bpf_link *link, const int *netns_fds, int n_netns)
{
	char buf[4096];
	int self, fd, err = 0;
	int n = n_netns > 0 ? n_netns : 1;

	self = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	if (self < 0)
		return -errno;
	for (int i = 0; i < n && !err; i++) {
		ssize_t r;

		fd = tb_iter_create_in(link, n_netns > 0 ? netns_fds[i] : -1, self);
		if (fd < 0) {
			err = fd;
			break;
		}
		while ((r = read(fd, buf, sizeof(buf))) > 0 || (r < 0 && errno == EINTR))
			;
		if (r < 0)
			err = -errno;
		close(fd);
	}
	close(self);
	return err;
}

/* Load an instance with one TCP iterator (P_SEED or P_UNPACE, set in cfg)
 * and read it in every namespace. */
static int iterate(const char *dir, const struct instance_cfg *cfg,
		   struct bpf_program *(*prog)(struct cap_bpf *), const char *what,
		   const int *netns_fds, int n_netns)
{
	struct cap_bpf *skel;
	struct bpf_link *link;
	int err;

	skel = load_instance(dir, cfg, &err);
	if (!skel)
		return err;
	link = bpf_program__attach_iter(prog(skel), NULL);
	if (!link) {
		err = -errno;
		tb_set_error("cannot create the TCP iterator: %s", strerror(-err));
	} else {
		err = run_iter(link, netns_fds, n_netns);
		if (err)
			tb_set_error("%s failed: %s", what, strerror(-err));
		bpf_link__destroy(link);
	}
	cap_bpf__destroy(skel);
	return err;
}

static struct bpf_program *seed_prog(struct cap_bpf *skel)
{
	return skel->progs.tb_cap_seed;
}

static struct bpf_program *unpace_prog(struct cap_bpf *skel)
{
	return skel->progs.tb_cap_unpace;
}

static int seed(const char *dir, const struct tb_cap_rule *rule, __u64 cgid,
		__u32 level, const int *netns_fds, int n_netns)
{
	struct instance_cfg cfg = {
		.progs = P_SEED, .seed = rule, .seed_cgid = cgid,
		.seed_level = level,
	};

	return iterate(dir, &cfg, seed_prog, "counting existing streams",
		       netns_fds, n_netns);
}

static int unpace(const char *dir, __u64 id, const int *netns_fds, int n_netns)
{
	struct instance_cfg cfg = { .progs = P_UNPACE, .unpace_id = id };

	return iterate(dir, &cfg, unpace_prog, "restoring unpaced sockets",
		       netns_fds, n_netns);
}

int tb_cap_add(const char *pin_dir, const char *cg_path, const char *rel_path,
	       __u32 level, struct tb_cap_rule *rule, __u32 max, __u32 mode,
	       __u64 rate, const int *netns_fds, int n_netns)
{
	struct instance_cfg cfg = { .level = level };
	struct tb_cap_cgroup cg, old;
	/* Mode and target go in with the counters: the cap is whole from the
	 * moment any program can see it. */
	struct tb_cap_count count = {
		.max = max, .mode = mode, .rate_bytes_per_s = rate,
	};
	struct cap_bpf *skel = NULL;
	char path[PATH_MAX];
	int lock = -1, cgfd, err, had_old = 0, new_state = 0, new_cg = 0;
	int rules_fd, counts_fd, ids_fd;
	__u32 zero = 0;
	struct statfs fs;
	struct stat st;
	__u64 id;

	tb_libbpf_logging();
	if (strlen(rel_path) >= TB_CAP_PATH_LEN) {
		tb_set_error("cgroup path %s is longer than %d characters",
			     rel_path, TB_CAP_PATH_LEN - 1);
		return -ENAMETOOLONG;
	}
	if (!max || (rule->family != AF_INET && rule->family != AF_INET6) ||
	    rule->prefix_len > (rule->family == AF_INET ? 32u : 128u)) {
		tb_set_error("invalid cap (max %u, family %u, prefix /%u)", max,
			     rule->family, rule->prefix_len);
		return -EINVAL;
	}
	if (mode > TB_CAP_MODE_PACE || (mode == TB_CAP_MODE_PACE) != (rate != 0)) {
		tb_set_error("invalid cap mode %u with rate %llu", mode,
			     (unsigned long long)rate);
		return -EINVAL;
	}
	cgfd = open(cg_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (cgfd < 0) {
		err = -errno;
		tb_set_error("cannot open cgroup %s: %s", cg_path, strerror(-err));
		return err;
	}
	if (fstatfs(cgfd, &fs) || fs.f_type != CGROUP2_SUPER_MAGIC || fstat(cgfd, &st)) {
		tb_set_error("%s is not a cgroup v2 directory", cg_path);
		close(cgfd);
		return -ENOTDIR;
	}
	cfg.cgid = st.st_ino;
	lock = lock_dir(pin_dir, 1, LOCK_EX);
	if (lock < 0) {
		close(cgfd);
		return lock;
	}
	new_state = !exists(pin_dir, "state");
	cg_link_path(path, pin_dir, cfg.cgid, 0);
	new_cg = access(path, F_OK) != 0;
	cfg.progs = (new_state ? P_STATE : 0) | (new_cg ? P_CONNECT : 0);
	skel = load_instance(pin_dir, &cfg, &err);
	if (!skel)
		goto out;
	rules_fd = bpf_map__fd(skel->maps.cap_rules);
	counts_fd = bpf_map__fd(skel->maps.cap_counts);
	ids_fd = bpf_map__fd(skel->maps.cap_ids);

	memset(&cg, 0, sizeof(cg));
	if (!bpf_map_lookup_elem(rules_fd, &cfg.cgid, &old)) {
		had_old = 1;
		cg = old;
	}
	for (__u32 i = 0; i < cg.n && i < TB_CAP_RULES_MAX; i++) {
		if (same_dest(&cg.rules[i], rule)) {
			*rule = cg.rules[i];
			err = -EEXIST;
			tb_set_error("that destination is already capped on this cgroup");
			goto out;
		}
	}
	if (cg.n >= TB_CAP_RULES_MAX) {
		err = -ENOSPC;
		tb_set_error("cgroup %s already has %d caps, the most it can have",
			     rel_path, TB_CAP_RULES_MAX);
		goto out;
	}
	if (bpf_map_lookup_elem(ids_fd, &zero, &id))
		id = 0;
	id++;
	rule->id = id;
	err = bpf_map_update_elem(ids_fd, &zero, &id, BPF_ANY);
	if (!err)
		err = bpf_map_update_elem(counts_fd, &id, &count, BPF_NOEXIST);
	if (err) {
		err = -errno;
		tb_set_error("cannot create the cap's counters: %s", strerror(-err));
		goto out;
	}
	cg.level = level;
	snprintf(cg.path, sizeof(cg.path), "%s", rel_path);
	cg.rules[cg.n++] = *rule;
	if (bpf_map_update_elem(rules_fd, &cfg.cgid, &cg, BPF_ANY)) {
		err = -errno;
		tb_set_error("cannot store the cap: %s", strerror(-err));
		goto undo_count;
	}
	if (new_state) {
		err = pin_path(path, pin_dir, "state");
		if (!err)
			err = attach_pinned(bpf_program__attach(skel->progs.tb_cap_state),
					    path, "tb_cap_state");
		if (err)
			goto undo_rule;
	}
	if (new_cg) {
		err = attach_cgroup(skel, pin_dir, cfg.cgid, cgfd);
		if (err)
			goto undo_rule;
	}
	/* Programs are in force from here: whatever connects now is charged
	 * by them, and the iterator skips it (same id in its storage). */
	err = seed(pin_dir, rule, cfg.cgid, level, netns_fds, n_netns);
	if (err)
		goto undo_rule;
	goto out;

undo_rule:
	if (new_cg)
		unpin_cgroup(pin_dir, cfg.cgid);
	if (had_old)
		bpf_map_update_elem(rules_fd, &cfg.cgid, &old, BPF_ANY);
	else
		bpf_map_delete_elem(rules_fd, &cfg.cgid);
undo_count:
	bpf_map_delete_elem(counts_fd, &id);
out:
	cap_bpf__destroy(skel);
	if (err) {
		/* A failed first cap leaves nothing behind. */
		int fd = open_pinned(pin_dir, "cap_rules");

		if (fd < 0 || map_empty(fd))
			teardown(pin_dir);
		if (fd >= 0)
			close(fd);
	}
	close(cgfd);
	close(lock);
	return err;
}

int tb_cap_remove(const char *pin_dir, __u64 cgid, const struct tb_cap_rule *rule,
		  const int *netns_fds, int n_netns)
{
	struct tb_cap_count count = {};
	struct tb_cap_cgroup cg;
	int lock, rules_fd = -1, counts_fd = -1, err = 0;
	__u32 i, found = TB_CAP_RULES_MAX;
	__u64 id;

	tb_libbpf_logging();
	lock = lock_dir(pin_dir, 0, LOCK_EX);
	if (lock < 0) {
		if (lock == -ENOENT)
			tb_set_error("no caps are set");
		return lock;
	}
	rules_fd = open_pinned(pin_dir, "cap_rules");
	counts_fd = open_pinned(pin_dir, "cap_counts");
	if (rules_fd < 0 || counts_fd < 0) {
		err = rules_fd < 0 ? rules_fd : counts_fd;
		tb_set_error("cannot open the pinned cap maps in %s: %s", pin_dir,
			     strerror(-err));
		goto out;
	}
	if (bpf_map_lookup_elem(rules_fd, &cgid, &cg)) {
		err = -ENOENT;
		tb_set_error("no caps on that cgroup");
		goto out;
	}
	for (i = 0; i < cg.n && i < TB_CAP_RULES_MAX; i++)
		if (same_dest(&cg.rules[i], rule))
			found = i;
	if (found == TB_CAP_RULES_MAX) {
		err = -ENOENT;
		tb_set_error("no cap for that destination on that cgroup");
		goto out;
	}
	id = cg.rules[found].id;
	if (cg.n == 1) {
		/* Detach first: no connect() is charged to a cap in removal. */
		unpin_cgroup(pin_dir, cgid);
		bpf_map_delete_elem(rules_fd, &cgid);
	} else {
		memmove(&cg.rules[found], &cg.rules[found + 1],
			(cg.n - found - 1) * sizeof(cg.rules[0]));
		cg.n--;
		memset(&cg.rules[cg.n], 0, sizeof(cg.rules[0]));
		if (bpf_map_update_elem(rules_fd, &cgid, &cg, BPF_ANY)) {
			err = -errno;
			tb_set_error("cannot update the caps: %s", strerror(-err));
			goto out;
		}
	}
	bpf_map_lookup_elem_flags(counts_fd, &id, &count, BPF_F_LOCK);
	bpf_map_delete_elem(counts_fd, &id);
	/* The cap is gone; its paced sockets that are still open send unpaced
	 * again (the maps are still pinned: this runs before any teardown). */
	if (count.mode == TB_CAP_MODE_PACE)
		err = unpace(pin_dir, id, netns_fds, n_netns);
	if (map_empty(rules_fd)) {
		close(rules_fd);
		close(counts_fd);
		rules_fd = counts_fd = -1;
		teardown(pin_dir);
	}
out:
	if (rules_fd >= 0)
		close(rules_fd);
	if (counts_fd >= 0)
		close(counts_fd);
	close(lock);
	return err;
}

int tb_cap_list(const char *pin_dir, __u64 *cgids, struct tb_cap_cgroup *cgs,
		size_t max, size_t *n)
{
	__u64 key, next;
	void *prev = NULL;
	int lock, fd;

	tb_libbpf_logging();
	*n = 0;
	lock = lock_dir(pin_dir, 0, LOCK_SH);
	if (lock == -ENOENT)
		return 0;
	if (lock < 0)
		return lock;
	fd = open_pinned(pin_dir, "cap_rules");
	if (fd < 0) {
		close(lock);
		if (fd == -ENOENT)
			return 0;
		tb_set_error("cannot open %s/cap_rules: %s", pin_dir, strerror(-fd));
		return fd;
	}
	while (!bpf_map_get_next_key(fd, prev, &next)) {
		key = next;
		prev = &key;
		if (*n < max && !bpf_map_lookup_elem(fd, &key, &cgs[*n]))
			cgids[*n] = key;
		else if (*n < max)
			continue;
		(*n)++;
	}
	close(fd);
	close(lock);
	return 0;
}

static int read_one(const char *pin_dir, const char *map, const void *key,
		    void *value, __u64 flags)
{
	int fd, err = 0;

	fd = open_pinned(pin_dir, map);
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

// SPDX-License-Identifier: GPL-2.0
/*
 * Stream caps loader: sets and removes caps, and reads them back, from any
 * process. Everything lives in one bpffs directory so caps outlive us:
 *
 *   cap_rules cap_gen cap_counts cap_state cap_ids cap_socks cap_follow
 *                             maps (pinned by name)
 *   state                     link of tb_cap_state (tp_btf), one for all
 *   cg<ID>_c4 cg<ID>_c6 cg<ID>_rel cg<ID>_pace  links of one capped cgroup
 *
 * Each operation takes an exclusive flock on the directory, so two tamebpf
 * processes never interleave. Removing a pin of a link detaches it; removing
 * the last cap removes every pin and the directory. This file has the
 * mechanics and the read side; changes go through cap_commit.c.
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
#include <dirent.h>
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

static const char *const MAP_PINS[] = {
	"cap_rules", "cap_gen", "cap_counts", "cap_state", "cap_ids", "cap_socks",
	"cap_follow",
};
/* Links pinned per capped cgroup. "pace" (sock_ops) is attached with the
 * others: it does work only for sockets charged to a pace-mode cap. */
static const char *const CG_LINKS[] = { "c4", "c6", "rel", "pace" };
#define N_CG_LINKS 4

int cap_pin_path(char *out, const char *dir, const char *name)
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
	return cap_pin_path(out, dir, name);
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
int cap_lock_dir(const char *dir, int create, int how)
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

int cap_exists(const char *dir, const char *name)
{
	char path[PATH_MAX];

	return !cap_pin_path(path, dir, name) && !access(path, F_OK);
}

int cap_open_pinned(const char *dir, const char *name)
{
	char path[PATH_MAX];
	int fd, err;

	err = cap_pin_path(path, dir, name);
	if (err)
		return err;
	fd = bpf_obj_get(path);
	return fd < 0 ? -errno : fd;
}

/* Load one instance of the object. Its maps come from (or are pinned into)
 * the directory; only the programs asked for are loaded. */
struct cap_bpf *cap_load_instance(const char *dir,
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
	/* userspace/tamebpf_eval/bench_cap.py's "before" (cap_pace.bpf.h): never set else */
	skel->rodata->rtt_for_all = getenv("TAMEBPF_BENCH_RTT_FOR_ALL") != NULL;
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

int cap_cgroup_attached(const char *dir, __u64 cgid)
{
	char path[PATH_MAX];

	for (int i = 0; i < N_CG_LINKS; i++)
		if (cg_link_path(path, dir, cgid, i) || access(path, F_OK))
			return 0;
	return 1;
}

int cap_attach_state(struct cap_bpf *skel, const char *dir)
{
	char path[PATH_MAX];
	int err;

	err = cap_pin_path(path, dir, "state");
	if (!err)
		err = attach_pinned(bpf_program__attach(skel->progs.tb_cap_state),
				    path, "tb_cap_state");
	return err;
}

void cap_unpin_cgroup(const char *dir, __u64 cgid)
{
	char path[PATH_MAX];

	for (int i = 0; i < N_CG_LINKS; i++)
		if (!cg_link_path(path, dir, cgid, i))
			unlink(path);
}

int cap_attach_cgroup(struct cap_bpf *skel, const char *dir, __u64 cgid,
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
			cap_unpin_cgroup(dir, cgid);
			return err;
		}
	}
	return 0;
}

/* Unpin the links of every cgroup whose id is not in `keep` (NULL: of
 * all), found by name in the directory: also those a killed command left. */
static void unpin_cgroups_except(const char *dir, const struct cap_table *keep)
{
	unsigned long long cgid;
	struct dirent *e;
	char path[PATH_MAX], link[16];
	DIR *d;
	size_t i;

	d = opendir(dir);
	if (!d)
		return;
	while ((e = readdir(d))) {
		if (sscanf(e->d_name, "cg%llu_%15s", &cgid, link) != 2)
			continue;
		for (i = 0; keep && i < keep->n; i++)
			if (keep->cgids[i] == cgid && keep->cgs[i].n)
				break;
		if (keep && i < keep->n)
			continue;
		if (!cap_pin_path(path, dir, e->d_name))
			unlink(path);
	}
	closedir(d);
}

/* Remove every pin we make, then the directory (and a parent named
 * "tamebpf" left empty). Names we did not make are left alone. */
void cap_teardown(const char *dir)
{
	char path[PATH_MAX], parent[PATH_MAX];

	unpin_cgroups_except(dir, NULL);
	if (!cap_pin_path(path, dir, "state"))
		unlink(path);
	for (size_t i = 0; i < sizeof(MAP_PINS) / sizeof(MAP_PINS[0]); i++)
		if (!cap_pin_path(path, dir, MAP_PINS[i]))
			unlink(path);
	if (rmdir(dir))
		return;
	snprintf(parent, sizeof(parent), "%s", dir);
	if (!strcmp(basename(dirname(parent)), "tamebpf")) {
		snprintf(parent, sizeof(parent), "%s", dir);
		rmdir(dirname(parent));
	}
}

int cap_same_dest(const struct tb_cap_rule *a, const struct tb_cap_rule *b)
{
	return a->family == b->family && a->port == b->port &&
	       a->port_end == b->port_end && a->prefix_len == b->prefix_len &&
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

	skel = cap_load_instance(dir, cfg, &err);
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

int cap_seed(const char *dir, const struct tb_cap_rule *rule, __u64 cgid,
		__u32 level, const int *netns_fds, int n_netns)
{
	struct instance_cfg cfg = {
		.progs = P_SEED, .seed = rule, .seed_cgid = cgid,
		.seed_level = level,
	};

	return iterate(dir, &cfg, seed_prog, "counting existing streams",
		       netns_fds, n_netns);
}

int cap_unpace(const char *dir, __u64 id, const int *netns_fds, int n_netns)
{
	struct instance_cfg cfg = { .progs = P_UNPACE, .unpace_id = id };

	return iterate(dir, &cfg, unpace_prog, "restoring unpaced sockets",
		       netns_fds, n_netns);
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
	size_t caps = 0;

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
	unpin_cgroups_except(dir, live);
	for (size_t i = 0; i < live->n; i++)
		caps += live->cgs[i].n;
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
	if (lock == -ENOENT)
		return 0;
	if (lock < 0)
		return lock;
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
	if (lock == -ENOENT)
		return 0;
	if (lock < 0)
		return lock;
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

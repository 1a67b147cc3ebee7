// SPDX-License-Identifier: GPL-2.0
/*
 * The cap loader's pins: the one bpffs directory where caps outlive us,
 * its lock, loading instances of cap.bpf.o, and the links they pin.
 *
 *   cap_rules cap_gen cap_counts cap_state cap_ids cap_socks cap_follow
 *                             maps (pinned by name)
 *   state                     link of tb_cap_state (tp_btf), one for all
 *   cg<ID>_c4 cg<ID>_c6 cg<ID>_rel cg<ID>_pace  links of one capped cgroup
 *
 * Each operation takes an exclusive flock on the directory, so two tamebpf
 * processes never interleave. Removing a pin of a link detaches it; removing
 * the last cap removes every pin and the directory. What caps are in force
 * is read in cap_rules.c, streams are counted in cap_seed.c, changes go
 * through cap_commit.c.
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
	/* tamebpf_bench/bench_cap.py's "before" (cap_pace.bpf.h): never set else */
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
void cap_unpin_cgroups_except(const char *dir, const struct cap_table *keep)
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

	cap_unpin_cgroups_except(dir, NULL);
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

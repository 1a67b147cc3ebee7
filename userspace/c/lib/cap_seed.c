// SPDX-License-Identifier: GPL-2.0
/*
 * The cap loader's TCP iterators: a new cap's count is seeded with the
 * streams that already exist (tb_cap_seed), and a removed pace cap's
 * sockets get their pacing back (tb_cap_unpace). Each loads its own
 * instance of cap.bpf.o, reads the iterator once per network namespace,
 * and destroys the instance: nothing is pinned.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include <bpf/libbpf.h>
#include "cap_internal.h"
#include "cap.skel.h"

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

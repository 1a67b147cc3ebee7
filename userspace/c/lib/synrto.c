// SPDX-License-Identifier: GPL-2.0
/*
 * Probe SYN timeout (bpf/synrto.bpf.c): load the program and attach it to
 * one cgroup; closing the handle detaches it. The link is not pinned, so it
 * also goes away when the process dies.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <bpf/libbpf.h>
#include "internal.h"
#include "synrto.skel.h"

struct tb_synrto {
	struct synrto_bpf *skel;
	struct bpf_link *link;
};

/* tb_synrto_open's arguments, for synrto_setup. */
struct synrto_args {
	const char *cg_path;
	__u32 srtt_us, first_rto_us;
};

static int synrto_setup(void *handle, const void *args)
{
	const struct synrto_args *a = args;
	struct tb_synrto *h = handle;
	int err;

	h->skel = synrto_bpf__open();
	if (!h->skel)
		return tb_errno_error("cannot open the SYN timeout BPF object");
	err = synrto_bpf__load(h->skel);
	if (err) {
		tb_set_error("cannot load the SYN timeout BPF program: %s", strerror(-err));
		return err;
	}
	h->skel->bss->path_srtt_us = a->srtt_us;
	h->skel->bss->first_rto_us = a->first_rto_us;
	h->link = tb_attach_cgroup_path(h->skel->progs.set_syn_rto, a->cg_path,
					"SYN timeout program");
	return h->link ? 0 : -errno;
}

static void synrto_teardown(void *handle)
{
	struct tb_synrto *h = handle;

	bpf_link__destroy(h->link);
	synrto_bpf__destroy(h->skel);
}

int tb_synrto_open(struct tb_synrto **out, const char *cg_path, __u32 srtt_us,
		   __u32 first_rto_us)
{
	const struct synrto_args args = { cg_path, srtt_us, first_rto_us };
	int err;

	*out = tb_handle_open(sizeof(**out), synrto_setup, synrto_teardown, &args, &err);
	return err;
}

void tb_synrto_close(struct tb_synrto *h)
{
	tb_handle_close(h, synrto_teardown);
}

void tb_synrto_read(const struct tb_synrto *h, __u32 *srtt_us, __u64 *timeouts_set)
{
	*srtt_us = h->skel->bss->path_srtt_us;
	*timeouts_set = h->skel->bss->timeouts_set;
}

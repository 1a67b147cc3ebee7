// SPDX-License-Identifier: GPL-2.0
/*
 * Probe SYN timeout (bpf/synrto.bpf.c): load the program and attach it to
 * one cgroup; closing the handle detaches it. The link is not pinned, so it
 * also goes away when the process dies.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <bpf/libbpf.h>
#include "internal.h"
#include "synrto.skel.h"

struct tb_synrto {
	struct synrto_bpf *skel;
	struct bpf_link *link;
};

void tb_synrto_close(struct tb_synrto *h)
{
	if (!h)
		return;
	bpf_link__destroy(h->link);
	synrto_bpf__destroy(h->skel);
	free(h);
}

int tb_synrto_open(struct tb_synrto **out, const char *cg_path, __u32 srtt_us,
		   __u32 first_rto_us)
{
	struct tb_synrto *h;
	int err;

	tb_libbpf_logging();
	*out = NULL;
	h = calloc(1, sizeof(*h));
	if (!h) {
		tb_set_error("out of memory");
		return -ENOMEM;
	}
	h->skel = synrto_bpf__open();
	if (!h->skel) {
		err = -errno;
		tb_set_error("cannot open the SYN timeout BPF object: %s", strerror(-err));
		goto fail;
	}
	err = synrto_bpf__load(h->skel);
	if (err) {
		tb_set_error("cannot load the SYN timeout BPF program: %s", strerror(-err));
		goto fail;
	}
	h->skel->bss->path_srtt_us = srtt_us;
	h->skel->bss->first_rto_us = first_rto_us;
	h->link = tb_attach_cgroup_path(h->skel->progs.set_syn_rto, cg_path,
					"SYN timeout program");
	if (!h->link) {
		err = -errno;
		goto fail;
	}
	*out = h;
	return 0;
fail:
	tb_synrto_close(h);
	return err;
}

void tb_synrto_read(const struct tb_synrto *h, __u32 *srtt_us, __u64 *timeouts_set)
{
	*srtt_us = h->skel->bss->path_srtt_us;
	*timeouts_set = h->skel->bss->timeouts_set;
}

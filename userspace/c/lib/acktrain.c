// SPDX-License-Identifier: GPL-2.0
/*
 * Probe ACK log (bpf/acktrain.bpf.c): load, mark the sockets of one cgroup,
 * log their ACKs until closed. Nothing is pinned: the programs go away with
 * the handle or the process.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <bpf/libbpf.h>
#include "internal.h"
#include "tamebpf.h"
#include "acktrain.skel.h"

struct tb_acktrain {
	struct acktrain_bpf *skel;
	struct bpf_link *mark;
	struct bpf_link *log;
};

void tb_acktrain_close(struct tb_acktrain *h)
{
	if (!h)
		return;
	/* The ACK hook first: it is the one that runs host-wide. */
	bpf_link__destroy(h->log);
	bpf_link__destroy(h->mark);
	acktrain_bpf__destroy(h->skel);
	free(h);
}

int tb_acktrain_open(struct tb_acktrain **out, const char *cg_path)
{
	struct tb_acktrain *h;
	int err;

	tb_libbpf_logging();
	*out = NULL;
	h = calloc(1, sizeof(*h));
	if (!h) {
		tb_set_error("out of memory");
		return -ENOMEM;
	}
	h->skel = acktrain_bpf__open_and_load();
	if (!h->skel) {
		err = -errno;
		tb_set_error("cannot load the probe ACK log BPF programs: %s", strerror(-err));
		goto fail;
	}
	h->mark = tb_attach_cgroup_path(h->skel->progs.mark_probe, cg_path, "probe ACK log");
	if (!h->mark) {
		err = -errno;
		goto fail;
	}
	h->log = bpf_program__attach(h->skel->progs.log_ack);
	if (!h->log) {
		err = -errno;
		tb_set_error("cannot attach the probe ACK log to tcp_probe: %s", strerror(-err));
		goto fail;
	}
	*out = h;
	return 0;
fail:
	tb_acktrain_close(h);
	return err;
}

int tb_acktrain_read(const struct tb_acktrain *h, const struct tb_ack **acks, __u64 *seen,
		     const __u64 **cookies, __u32 *flows)
{
	const struct acktrain_bpf__bss *bss = h->skel->bss;

	*acks = bss->acks;
	*seen = __atomic_load_n(&bss->acks_seen, __ATOMIC_ACQUIRE);
	*cookies = bss->cookies;
	*flows = __atomic_load_n(&bss->flows_seen, __ATOMIC_ACQUIRE);
	if (*flows > TB_ACK_FLOWS_MAX)
		*flows = TB_ACK_FLOWS_MAX;
	return 0;
}

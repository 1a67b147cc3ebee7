// SPDX-License-Identifier: GPL-2.0
/*
 * Probe ACK log (bpf/acktrain.bpf.c): load, mark the sockets of one cgroup,
 * log their ACKs until closed. Nothing is pinned: the programs go away with
 * the handle or the process.
 */
#include <errno.h>
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

static int acktrain_setup(void *handle, const void *cg_path)
{
	struct tb_acktrain *h = handle;

	h->skel = acktrain_bpf__open_and_load();
	if (!h->skel)
		return tb_errno_error("cannot load the probe ACK log BPF programs");
	h->mark = tb_attach_cgroup_path(h->skel->progs.mark_probe, cg_path, "probe ACK log");
	if (!h->mark)
		return -errno;
	h->log = bpf_program__attach(h->skel->progs.log_ack);
	if (!h->log)
		return tb_errno_error("cannot attach the probe ACK log to tcp_probe");
	return 0;
}

static void acktrain_teardown(void *handle)
{
	struct tb_acktrain *h = handle;

	/* The ACK hook first: it is the one that runs host-wide. */
	bpf_link__destroy(h->log);
	bpf_link__destroy(h->mark);
	acktrain_bpf__destroy(h->skel);
}

int tb_acktrain_open(struct tb_acktrain **out, const char *cg_path)
{
	int err;

	*out = tb_handle_open(sizeof(**out), acktrain_setup, acktrain_teardown, cg_path, &err);
	return err;
}

void tb_acktrain_close(struct tb_acktrain *h)
{
	tb_handle_close(h, acktrain_teardown);
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

// SPDX-License-Identifier: GPL-2.0
/*
 * ACK log (bpf/acktrain.bpf.c): load, mark the sockets of one cgroup (a
 * probe's) or a few established ones by cookie (export's sampling window),
 * log their ACKs until closed. Nothing is pinned: the programs and the marks
 * go away with the handle or the process.
 */
#include <errno.h>
#include <fcntl.h>
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

/* The program that logs: ACKs of senders, or data of receivers. */
static struct bpf_program *logger(const struct tb_acktrain *h)
{
	return h->skel->rodata->receive ? h->skel->progs.log_data : h->skel->progs.log_ack;
}

/* What to mark: the connections a cgroup opens (cg_path), or else the
 * established ones of network namespace netns_fd (-1: ours) whose cookies
 * are given. */
struct acktrain_args {
	const char *cg_path;
	const __u64 *cookies;
	__u32 n;
	int netns_fd;
	int receive;
};

/* Open and load the object with only the marking and logging programs this
 * handle uses. */
static int acktrain_load(struct tb_acktrain *h, struct bpf_program *unused)
{
	int err;

	bpf_program__set_autoload(unused, false);
	bpf_program__set_autoload(h->skel->rodata->receive ? h->skel->progs.log_ack
							   : h->skel->progs.log_data, false);
	err = acktrain_bpf__load(h->skel);
	if (err) {
		errno = -err;
		return tb_errno_error("cannot load the ACK log BPF programs");
	}
	return 0;
}

/* Run mark_window once over the TCP sockets of netns_fd's namespace. */
static int mark_established(struct tb_acktrain *h, int netns_fd)
{
	struct bpf_link *iter;
	char buf[64];
	int self = -1, fd, err = 0;
	ssize_t got;

	iter = bpf_program__attach_iter(h->skel->progs.mark_window, NULL);
	if (!iter)
		return tb_errno_error("cannot attach the ACK log's socket marker");
	if (netns_fd >= 0) {
		self = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
		if (self < 0) {
			err = tb_errno_error("cannot open /proc/self/ns/net");
			goto cleanup;
		}
	}
	fd = tb_iter_create_in(iter, netns_fd, self);
	if (fd < 0) {
		errno = -fd;
		err = tb_errno_error("cannot walk the TCP sockets to mark");
		goto cleanup;
	}
	/* mark_window writes nothing: reading to the end runs it on every socket. */
	while ((got = read(fd, buf, sizeof(buf))) > 0)
		;
	if (got < 0)
		err = tb_errno_error("cannot walk the TCP sockets to mark");
	close(fd);
cleanup:
	if (self >= 0)
		close(self);
	bpf_link__destroy(iter);
	return err;
}

static int acktrain_setup(void *handle, const void *args)
{
	const struct acktrain_args *a = args;
	struct tb_acktrain *h = handle;
	int err;

	h->skel = acktrain_bpf__open();
	if (!h->skel)
		return tb_errno_error("cannot open the ACK log BPF programs");
	h->skel->rodata->receive = a->receive ? 1 : 0;
	if (!a->cg_path) {
		err = acktrain_load(h, h->skel->progs.mark_probe);
		if (err)
			return err;
		memcpy(h->skel->bss->cookies, a->cookies, a->n * sizeof(*a->cookies));
		h->skel->bss->flows_seen = a->n;
		/* The log first: a socket is logged from the moment it is marked. */
		h->log = bpf_program__attach(logger(h));
		if (!h->log)
			return tb_errno_error("cannot attach the ACK log to tcp_probe");
		return mark_established(h, a->netns_fd);
	}
	err = acktrain_load(h, h->skel->progs.mark_window);
	if (err)
		return err;
	h->mark = tb_attach_cgroup_path(h->skel->progs.mark_probe, a->cg_path, "probe ACK log");
	if (!h->mark)
		return -errno;
	h->log = bpf_program__attach(logger(h));
	if (!h->log)
		return tb_errno_error("cannot attach the probe ACK log to tcp_probe");
	return 0;
}

static void acktrain_teardown(void *handle)
{
	struct tb_acktrain *h = handle;

	/* The ACK hook first: it is the one that runs host-wide. The marks
	 * (socket storage) go with the object's map. */
	bpf_link__destroy(h->log);
	bpf_link__destroy(h->mark);
	acktrain_bpf__destroy(h->skel);
}

int tb_acktrain_open(struct tb_acktrain **out, const char *cg_path, int receive)
{
	int err;

	const struct acktrain_args args = { .cg_path = cg_path, .receive = receive };

	*out = tb_handle_open(sizeof(**out), acktrain_setup, acktrain_teardown, &args, &err);
	return err;
}

int tb_acktrain_window_open(struct tb_acktrain **out, const __u64 *cookies, __u32 n,
			    int netns_fd, int receive)
{
	const struct acktrain_args args = { .cookies = cookies, .n = n, .netns_fd = netns_fd,
					    .receive = receive };
	int err;

	if (n == 0 || n > TB_ACK_FLOWS_MAX) {
		tb_set_error("an ACK window samples 1 to %u connections, not %u",
			     (unsigned int)TB_ACK_FLOWS_MAX, n);
		*out = NULL;
		return -EINVAL;
	}
	*out = tb_handle_open(sizeof(**out), acktrain_setup, acktrain_teardown, &args, &err);
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

const struct tb_rx_flow *tb_acktrain_rx(const struct tb_acktrain *h)
{
	return h->skel->bss->rx;
}

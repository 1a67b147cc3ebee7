// SPDX-License-Identifier: GPL-2.0
/* Error reporting, libbpf logging, opening and closing handles, iterators
 * in other network namespaces and ABI layout export for libtamebpf. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "internal.h"

/* Per thread: the exporter calls the library from several threads, and an
 * error must be read by the thread whose call failed, not overwritten by
 * another thread's failure in between. */
static __thread char last_error[512];
/* libbpf's last warning: when a load fails, the reason (verifier message,
 * missing BTF) is only in its log, so we keep the last line for the error.
 * libbpf logs from the thread that made the failing call, so per thread too. */
static __thread char last_libbpf_warning[256];
static int verbose;

const char *tb_last_error(void)
{
	return last_error;
}

void tb_set_verbose(int v)
{
	verbose = v;
}

void tb_set_error(const char *fmt, ...)
{
	va_list ap;
	size_t n;

	va_start(ap, fmt);
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
	n = strlen(last_error);
	if (last_libbpf_warning[0] && n + 4 < sizeof(last_error))
		snprintf(last_error + n, sizeof(last_error) - n, " (libbpf: %s)",
			 last_libbpf_warning);
}

static int print_libbpf(enum libbpf_print_level level, const char *fmt,
			va_list ap)
{
	va_list copy;
	size_t n;

	if (level == LIBBPF_WARN) {
		va_copy(copy, ap);
		vsnprintf(last_libbpf_warning, sizeof(last_libbpf_warning), fmt,
			  copy);
		va_end(copy);
		n = strlen(last_libbpf_warning);
		while (n && (last_libbpf_warning[n - 1] == '\n'))
			last_libbpf_warning[--n] = '\0';
	}
	if (level == LIBBPF_DEBUG && !verbose)
		return 0;
	if (!verbose)
		return 0;
	return vfprintf(stderr, fmt, ap);
}

void tb_libbpf_logging(void)
{
	last_libbpf_warning[0] = '\0';
	last_error[0] = '\0';
	libbpf_set_print(print_libbpf);
}

#define FIELD(type, field) { #type, #field, offsetof(struct type, field) }
#define SIZE(type) { #type, NULL, sizeof(struct type) }

static const struct {
	const char *type;
	const char *field; /* NULL: the size of the type */
	size_t value;
} layout[] = {
	SIZE(tb_flow),
	FIELD(tb_flow, cookie), FIELD(tb_flow, cgroup_id),
	FIELD(tb_flow, start_ns), FIELD(tb_flow, update_ns),
	FIELD(tb_flow, bytes_acked), FIELD(tb_flow, bytes_received),
	FIELD(tb_flow, bytes_sent), FIELD(tb_flow, bytes_retrans),
	FIELD(tb_flow, segs_out), FIELD(tb_flow, segs_in),
	FIELD(tb_flow, data_segs_out), FIELD(tb_flow, data_segs_in),
	FIELD(tb_flow, total_retrans), FIELD(tb_flow, retrans_out),
	FIELD(tb_flow, lost_out), FIELD(tb_flow, srtt_us),
	FIELD(tb_flow, rttvar_us), FIELD(tb_flow, min_rtt_us),
	FIELD(tb_flow, snd_cwnd), FIELD(tb_flow, snd_ssthresh),
	FIELD(tb_flow, mss), FIELD(tb_flow, rate_delivered),
	FIELD(tb_flow, rate_interval_us), FIELD(tb_flow, snd_wnd),
	FIELD(tb_flow, delivered), FIELD(tb_flow, cong_events),
	FIELD(tb_flow, pid), FIELD(tb_flow, netns_ino),
	FIELD(tb_flow, rcv_rtt_us), FIELD(tb_flow, rcv_ooopack),
	FIELD(tb_flow, family), FIELD(tb_flow, sport), FIELD(tb_flow, dport),
	FIELD(tb_flow, state), FIELD(tb_flow, flags),
	FIELD(tb_flow, saddr), FIELD(tb_flow, daddr),
	FIELD(tb_flow, comm), FIELD(tb_flow, cc),
	SIZE(tb_flows_stats),
	FIELD(tb_flows_stats, closed_recorded),
	FIELD(tb_flows_stats, closed_dropped),
	FIELD(tb_flows_stats, owners_dropped),
	/* cap */
	SIZE(tb_cap_rule),
	FIELD(tb_cap_rule, id), FIELD(tb_cap_rule, addr), FIELD(tb_cap_rule, mask),
	FIELD(tb_cap_rule, family), FIELD(tb_cap_rule, port),
	FIELD(tb_cap_rule, port_end), FIELD(tb_cap_rule, pad),
	FIELD(tb_cap_rule, prefix_len), FIELD(tb_cap_rule, pad2),
	SIZE(tb_cap_key),
	FIELD(tb_cap_key, cgid), FIELD(tb_cap_key, gen), FIELD(tb_cap_key, pad),
	SIZE(tb_cap_change),
	FIELD(tb_cap_change, rule), FIELD(tb_cap_change, cgid),
	FIELD(tb_cap_change, rate), FIELD(tb_cap_change, op),
	FIELD(tb_cap_change, max), FIELD(tb_cap_change, mode),
	FIELD(tb_cap_change, level), FIELD(tb_cap_change, dirs),
	FIELD(tb_cap_change, pad), FIELD(tb_cap_change, cg_path),
	FIELD(tb_cap_change, rel_path),
	SIZE(tb_cap_cgroup),
	FIELD(tb_cap_cgroup, n), FIELD(tb_cap_cgroup, level),
	FIELD(tb_cap_cgroup, path), FIELD(tb_cap_cgroup, rules),
	SIZE(tb_cap_count),
	FIELD(tb_cap_count, lock), FIELD(tb_cap_count, max),
	FIELD(tb_cap_count, count), FIELD(tb_cap_count, charged),
	FIELD(tb_cap_count, refused), FIELD(tb_cap_count, seeded),
	FIELD(tb_cap_count, released),
	FIELD(tb_cap_count, mode),
	FIELD(tb_cap_count, epoch_checkins),
	FIELD(tb_cap_count, rate_bytes_per_s),
	FIELD(tb_cap_count, epoch_start_ns),
	FIELD(tb_cap_count, prev_checkins),
	FIELD(tb_cap_count, dirs),
	SIZE(tb_cap_state),
	FIELD(tb_cap_state, nomem), FIELD(tb_cap_state, overflow),
	FIELD(tb_cap_state, seed_skipped),
	SIZE(tb_cap_follow),
	FIELD(tb_cap_follow, scout_cookie), FIELD(tb_cap_follow, rate_bytes_per_s),
	/* acktrain */
	SIZE(tb_ack),
	FIELD(tb_ack, t_ns), FIELD(tb_ack, ack_seq), FIELD(tb_ack, flow), FIELD(tb_ack, pad),
	SIZE(tb_rx_flow),
	FIELD(tb_rx_flow, segs), FIELD(tb_rx_flow, episodes), FIELD(tb_rx_flow, fills),
	FIELD(tb_rx_flow, dups), FIELD(tb_rx_flow, pad),
};

static long lookup_layout(const char *type, const char *field)
{
	for (size_t i = 0; i < sizeof(layout) / sizeof(layout[0]); i++) {
		if (strcmp(layout[i].type, type))
			continue;
		if (!field && !layout[i].field)
			return (long)layout[i].value;
		if (field && layout[i].field && !strcmp(layout[i].field, field))
			return (long)layout[i].value;
	}
	return -1;
}

long tb_abi_sizeof(const char *type)
{
	return lookup_layout(type, NULL);
}

long tb_abi_offsetof(const char *type, const char *field)
{
	return lookup_layout(type, field);
}

int tb_iter_create_in(struct bpf_link *link, int netns_fd, int self_netns_fd)
{
	int fd, err;

	if (netns_fd >= 0 && setns(netns_fd, CLONE_NEWNET))
		return -errno;
	fd = bpf_iter_create(bpf_link__fd(link));
	err = fd < 0 ? -errno : 0;
	if (netns_fd >= 0 && setns(self_netns_fd, CLONE_NEWNET)) {
		/* cannot happen short of a kernel bug; never stay elsewhere */
		err = -errno;
		if (fd >= 0)
			close(fd);
		return err;
	}
	return fd < 0 ? err : fd;
}

struct bpf_link *tb_attach_cgroup_path(struct bpf_program *prog, const char *cg_path,
				       const char *what)
{
	struct bpf_link *link;
	int cgfd, err;

	cgfd = open(cg_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (cgfd < 0) {
		err = errno;
		tb_set_error("cannot open cgroup %s: %s", cg_path, strerror(err));
		errno = err;
		return NULL;
	}
	link = bpf_program__attach_cgroup(prog, cgfd);
	err = link ? 0 : errno;
	close(cgfd);
	if (!link) {
		tb_set_error("cannot attach the %s to %s: %s", what, cg_path, strerror(err));
		errno = err;
	}
	return link;
}

int tb_errno_error(const char *what)
{
	int err = errno; /* before anything can change it */

	tb_set_error("%s: %s", what, strerror(err));
	return -err;
}

void *tb_handle_open(size_t size, tb_setup_fn *setup, tb_teardown_fn *teardown,
		     const void *args, int *err)
{
	void *h;

	tb_libbpf_logging();
	h = calloc(1, size);
	if (!h) {
		tb_set_error("out of memory");
		*err = -ENOMEM;
		return NULL;
	}
	*err = setup(h, args);
	if (*err) {
		tb_handle_close(h, teardown);
		return NULL;
	}
	return h;
}

void tb_handle_close(void *h, tb_teardown_fn *teardown)
{
	if (!h)
		return;
	teardown(h);
	free(h);
}

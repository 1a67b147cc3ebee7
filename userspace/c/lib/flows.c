// SPDX-License-Identifier: GPL-2.0
/*
 * Flow telemetry loader and reader: open -> configure rodata -> load ->
 * attach; each snapshot reads the iter/tcp iterator (once per network
 * namespace asked for) and drains the map of closed flows.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "internal.h"
#include "flows.skel.h"

#define DEFAULT_CLOSED_MAX 16384
/* Owner lookup walks every process's file table: do it at most this often,
 * and only while some flow's owner is still unknown. A socket no process
 * holds (an orphan, or one still in a listener's accept queue) stays
 * unknown; while the same ones are all that is left, the wait doubles up to
 * the maximum, so one orphan does not cost every reading a walk of every
 * file on the host (12 ms at 10,000 sockets). Any new unknown flow brings
 * the wait back to the interval. */
#define OWNER_SCAN_INTERVAL_NS 1000000000ULL
#define OWNER_SCAN_MAX_NS (16 * OWNER_SCAN_INTERVAL_NS)

struct tb_flows {
	struct flows_bpf *skel;
	int self_netns;         /* to return to after reading another netns */
	int *netns_fds;         /* namespaces to read; n_netns == 0: our own */
	__u32 *netns_inos;
	int n_netns;
	__u32 own_netns_ino;
	struct tb_flow *recs;   /* the last snapshot */
	size_t len, cap;
	__u64 last_owner_scan;
	__u64 owner_scan_wait;  /* before the next scan, while unknown_sig holds */
	size_t unknown_owners;  /* open flows without an owner, last snapshot */
	__u64 unknown_sig;      /* ... which ones (a sum of their cookies' hashes) */
	__u64 scanned_sig;      /* unknown_sig of the snapshot after the last scan */
	int after_scan;         /* this snapshot follows a scan */
	__u32 closed_fill;
};

static __u64 now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (__u64)ts.tv_sec * 1000000000ULL + (__u64)ts.tv_nsec;
}

static int fd_inode(int fd, __u32 *ino)
{
	struct stat st;

	if (fstat(fd, &st))
		return -errno;
	*ino = (__u32)st.st_ino;
	return 0;
}

static int reserve(struct tb_flows *h, size_t more)
{
	struct tb_flow *n;
	size_t cap = h->cap ? h->cap : 256;

	if (h->len + more <= h->cap)
		return 0;
	while (cap < h->len + more)
		cap *= 2;
	n = realloc(h->recs, cap * sizeof(*n));
	if (!n)
		return -ENOMEM;
	h->recs = n;
	h->cap = cap;
	return 0;
}

/* Read a whole iterator (its fd, which we close) straight onto the end of
 * h->recs, growing it as needed (no second buffer: at 100k flows each copy
 * is 24 MB); returns the byte count or -errno. h->len is left to the caller. */
static ssize_t read_iter(struct tb_flows *h, int fd)
{
	const size_t rec = sizeof(struct tb_flow);
	size_t used = 0;
	ssize_t n;

	for (;;) {
		size_t room = (h->cap - h->len) * rec - used;

		if (room < rec) {
			/* used bytes may end mid-record: reserve counts whole ones */
			if (reserve(h, used / rec + 1 + h->cap / 2)) {
				close(fd);
				return -ENOMEM;
			}
			continue;
		}
		n = read(fd, (char *)(h->recs + h->len) + used, room);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			n = -errno;
			close(fd);
			return n;
		}
		if (n == 0)
			break;
		used += (size_t)n;
	}
	close(fd);
	return (ssize_t)used;
}

/* Run an iterator inside network namespace `fd` (-1: our own). */
static int read_iter_in(struct tb_flows *h, struct bpf_link *link, int fd,
			ssize_t *bytes)
{
	int it;

	*bytes = 0;
	it = tb_iter_create_in(link, fd, h->self_netns);
	if (it < 0)
		return it;
	*bytes = read_iter(h, it);
	return 0;
}

static int collect_open(struct tb_flows *h)
{
	int n = h->n_netns ? h->n_netns : 1;
	size_t count;
	ssize_t bytes = 0;
	int i, err;

	for (i = 0; i < n; i++) {
		err = read_iter_in(h, h->skel->links.dump_flows,
				   h->n_netns ? h->netns_fds[i] : -1, &bytes);
		if (err) {
			tb_set_error("cannot enter network namespace: %s",
				     strerror(-err));
			return err;
		}
		if (bytes < 0) {
			tb_set_error("reading the TCP iterator failed: %s",
				     strerror((int)-bytes));
			return (int)bytes;
		}
		count = (size_t)bytes / sizeof(struct tb_flow);
		h->len += count;
	}
	return 0;
}

static int wanted_netns(const struct tb_flows *h, __u32 ino)
{
	if (!h->n_netns)
		return ino == h->own_netns_ino;
	for (int i = 0; i < h->n_netns; i++)
		if (h->netns_inos[i] == ino)
			return 1;
	return 0;
}

/* Move every closed flow out of the map: this is the "kept until read, then
 * freed" promise. Flows of namespaces we were not asked about are freed too.
 * Only keys seen in the walk are deleted: a flow that closes meanwhile stays
 * for the next snapshot. */
static int drain_closed(struct tb_flows *h)
{
	int fd = bpf_map__fd(h->skel->maps.closed);
	__u64 key, next, *seen = NULL, *grown;
	size_t n_seen = 0, cap_seen = 0;
	struct tb_flow rec;
	void *prev = NULL;
	int err = 0;

	while (!bpf_map_get_next_key(fd, prev, &next)) {
		key = next;
		prev = &key;
		if (n_seen == cap_seen) {
			cap_seen = cap_seen ? cap_seen * 2 : 256;
			grown = realloc(seen, cap_seen * sizeof(*seen));
			if (!grown) {
				err = -ENOMEM;
				break;
			}
			seen = grown;
		}
		seen[n_seen++] = key;
		if (bpf_map_lookup_elem(fd, &key, &rec) || !wanted_netns(h, rec.netns_ino))
			continue;
		if (reserve(h, 1)) {
			err = -ENOMEM;
			break;
		}
		h->recs[h->len++] = rec;
	}
	/* Delete after walking: deleting the current key would restart
	 * get_next_key from the beginning of the hash table. */
	if (!err)
		for (size_t i = 0; i < n_seen; i++)
			bpf_map_delete_elem(fd, &seen[i]);
	h->closed_fill = (__u32)n_seen;
	free(seen);
	return err;
}

static int by_cookie_closed_last(const void *a, const void *b)
{
	const struct tb_flow *x = a, *y = b;

	if (x->cookie != y->cookie)
		return x->cookie < y->cookie ? -1 : 1;
	return (x->flags & TB_FLOW_CLOSED) - (y->flags & TB_FLOW_CLOSED);
}

/* A flow that closed between the iterator and the drain is in both: keep
 * the closed record, whose counters are final. */
static void dedupe(struct tb_flows *h)
{
	size_t out = 0;

	qsort(h->recs, h->len, sizeof(*h->recs), by_cookie_closed_last);
	for (size_t i = 0; i < h->len; i++) {
		if (i + 1 < h->len && h->recs[i + 1].cookie == h->recs[i].cookie)
			continue;
		h->recs[out++] = h->recs[i];
	}
	h->len = out;
}

static void scan_owners(struct tb_flows *h)
{
	/* task_file walks tasks, not a namespace: create it where we are.
	 * It writes found_owners, not output, for the snapshot's iter/tcp
	 * pass to take; best effort. */
	int fd;

	h->skel->bss->owner_scan++; /* what earlier scans left is stale */
	fd = tb_iter_create_in(h->skel->links.claim_owners, -1, -1);

	if (fd >= 0)
		(void)read_iter(h, fd);
	h->last_owner_scan = now_ns();
}

/* How long to wait before the next owner scan: the interval, doubled for
 * each scan in a row that left the same flows unknown. */
static __u64 owner_scan_wait(const struct tb_flows *h)
{
	if (h->unknown_sig != h->scanned_sig || !h->owner_scan_wait)
		return OWNER_SCAN_INTERVAL_NS; /* new unknown flows since */
	return h->owner_scan_wait;
}

static void note_scan(struct tb_flows *h)
{
	if (!h->after_scan)
		return;
	h->after_scan = 0;
	if (h->unknown_sig == h->scanned_sig && h->owner_scan_wait)
		h->owner_scan_wait = h->owner_scan_wait * 2 < OWNER_SCAN_MAX_NS ?
				     h->owner_scan_wait * 2 : OWNER_SCAN_MAX_NS;
	else
		h->owner_scan_wait = OWNER_SCAN_INTERVAL_NS;
	h->scanned_sig = h->unknown_sig;
}

static __u64 cookie_mix(__u64 x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	return x | 1;
}

int tb_flows_snapshot(struct tb_flows *h, const struct tb_flow **records,
		      size_t *count)
{
	int err;

	if (!h->last_owner_scan ||
	    (h->unknown_owners &&
	     now_ns() - h->last_owner_scan >= owner_scan_wait(h))) {
		scan_owners(h);
		h->after_scan = 1;
	}
	h->len = 0;
	err = collect_open(h);
	if (!err)
		err = drain_closed(h);
	if (err)
		return err;
	dedupe(h);
	h->unknown_owners = 0;
	h->unknown_sig = 0;
	for (size_t i = 0; i < h->len; i++) {
		if (h->recs[i].flags & (TB_FLOW_OWNER_KNOWN | TB_FLOW_CLOSED))
			continue;
		h->unknown_owners++;
		h->unknown_sig += cookie_mix(h->recs[i].cookie);
	}
	note_scan(h);
	*records = h->recs;
	*count = h->len;
	return 0;
}

int tb_flows_stats(struct tb_flows *h, struct tb_flows_stats *stats,
		   __u32 *closed_fill, __u32 *closed_max)
{
	*stats = h->skel->bss->stats;
	*closed_fill = h->closed_fill;
	*closed_max = bpf_map__max_entries(h->skel->maps.closed);
	return 0;
}

static int open_netns(struct tb_flows *h, const int *fds, int n)
{
	int err;

	h->self_netns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	if (h->self_netns < 0)
		return -errno;
	err = fd_inode(h->self_netns, &h->own_netns_ino);
	if (err || n <= 0)
		return err;
	h->netns_fds = calloc((size_t)n, sizeof(int));
	h->netns_inos = calloc((size_t)n, sizeof(__u32));
	if (!h->netns_fds || !h->netns_inos)
		return -ENOMEM;
	for (int i = 0; i < n; i++) {
		h->netns_fds[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 0);
		if (h->netns_fds[i] < 0)
			return -errno;
		h->n_netns = i + 1;
		err = fd_inode(fds[i], &h->netns_inos[i]);
		if (err)
			return err;
	}
	return 0;
}

/* tb_flows_open's arguments, for flows_setup. */
struct flows_args {
	__u64 cgid;
	__u32 level, closed_max;
	const int *netns_fds;
	int n_netns;
};

static int flows_setup(void *handle, const void *args)
{
	const struct flows_args *a = args;
	struct tb_flows *h = handle;
	int err;

	h->self_netns = -1;
	err = open_netns(h, a->netns_fds, a->n_netns);
	if (err) {
		tb_set_error("cannot open network namespace: %s", strerror(-err));
		return err;
	}
	h->skel = flows_bpf__open();
	if (!h->skel)
		return tb_errno_error("cannot open the flows BPF object");
	h->skel->rodata->target_cgid = a->cgid;
	h->skel->rodata->target_level = a->level;
	err = bpf_map__set_max_entries(h->skel->maps.closed,
				       a->closed_max ? a->closed_max : DEFAULT_CLOSED_MAX);
	/* tcp_cong_state_set came with Linux 6.3: older kernels get every
	 * other counter, and cong_events stays 0 (advise's probes then run to
	 * their time limit rather than stop on epochs they cannot count). */
	if (!err && libbpf_find_vmlinux_btf_id("tcp_cong_state_set",
					       BPF_TRACE_RAW_TP) < 0)
		bpf_program__set_autoload(h->skel->progs.on_cong_state, false);
	if (!err)
		err = flows_bpf__load(h->skel);
	if (err) {
		tb_set_error("cannot load the flows BPF programs: %s", strerror(-err));
		return err;
	}
	err = flows_bpf__attach(h->skel);
	if (err)
		tb_set_error("cannot attach the flows BPF programs: %s",
			     strerror(-err));
	return err;
}

static void flows_teardown(void *handle)
{
	struct tb_flows *h = handle;

	flows_bpf__destroy(h->skel);
	for (int i = 0; i < h->n_netns; i++)
		close(h->netns_fds[i]);
	if (h->self_netns >= 0)
		close(h->self_netns);
	free(h->netns_fds);
	free(h->netns_inos);
	free(h->recs);
}

int tb_flows_open(struct tb_flows **out, __u64 cgid, __u32 level,
		  __u32 closed_max, const int *netns_fds, int n_netns)
{
	const struct flows_args args = { cgid, level, closed_max, netns_fds, n_netns };
	int err;

	*out = tb_handle_open(sizeof(**out), flows_setup, flows_teardown, &args, &err);
	return err;
}

void tb_flows_close(struct tb_flows *h)
{
	tb_handle_close(h, flows_teardown);
}

// SPDX-License-Identifier: GPL-2.0
/*
 * What changed between two flow snapshots, so that a view or a scrape turns
 * only those records into Python objects. With tens of thousands of mostly
 * idle connections, almost nothing changes between two refreshes; comparing
 * here costs a hash per record and keeps one small entry per open flow.
 *
 * A record changed when its cookie is new, when any of its bytes other than
 * the read time differs from the last snapshot (compared by a 64-bit hash),
 * or when it is a closed flow's final record. An open flow of the last
 * snapshot that is in neither list of this one has vanished.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "tamebpf.h"

struct slot {
	__u64 cookie; /* 0: empty (the kernel never hands out cookie 0) */
	__u64 hash;
	__u64 gen;    /* the last snapshot that had it */
};

struct tb_flowdiff {
	struct slot *slots;
	size_t mask;  /* capacity - 1; capacity a power of two */
	size_t used;
	__u64 gen;
	__u32 *changed;
	__u64 *vanished;
	size_t changed_cap, vanished_cap;
};

/* The record is a whole number of 8-byte words (bpf/flows.h keeps it so). */
_Static_assert(sizeof(struct tb_flow) % 8 == 0, "struct tb_flow is not 8-byte sized");
_Static_assert(offsetof(struct tb_flow, update_ns) % 8 == 0, "update_ns not 8-byte aligned");

/* A hash of the record, word by word, the read time left out: it differs
 * every time. */
static __u64 record_hash(const struct tb_flow *r)
{
	const size_t skip = offsetof(struct tb_flow, update_ns) / 8;
	__u64 h = 0x243f6a8885a308d3ULL, w;

	for (size_t i = 0; i < sizeof(*r) / 8; i++) {
		if (i == skip)
			continue;
		memcpy(&w, (const char *)r + 8 * i, 8);
		h = (h ^ w) * 0xff51afd7ed558ccdULL;
		h ^= h >> 32;
	}
	return h;
}

static size_t home(const struct tb_flowdiff *d, __u64 cookie)
{
	/* Cookies are sequential: spread them (Fibonacci hashing). */
	return (size_t)((cookie * 0x9e3779b97f4a7c15ULL) >> 17) & d->mask;
}

static struct slot *find(struct tb_flowdiff *d, __u64 cookie)
{
	for (size_t i = home(d, cookie);; i = (i + 1) & d->mask) {
		if (d->slots[i].cookie == cookie || !d->slots[i].cookie)
			return &d->slots[i];
	}
}

static int grow(struct tb_flowdiff *d)
{
	struct slot *old = d->slots;
	size_t n = d->mask + 1;

	d->slots = calloc(2 * n, sizeof(*d->slots));
	if (!d->slots) {
		d->slots = old;
		return -ENOMEM;
	}
	d->mask = 2 * n - 1;
	for (size_t i = 0; i < n; i++) {
		if (old[i].cookie)
			*find(d, old[i].cookie) = old[i];
	}
	free(old);
	return 0;
}

/* Remove by shifting later entries of the same probe run back (no
 * tombstones: the table is rescanned every snapshot). */
static void erase(struct tb_flowdiff *d, struct slot *s)
{
	size_t i = (size_t)(s - d->slots), j = i;

	d->slots[i].cookie = 0;
	d->used--;
	for (;;) {
		size_t k;

		j = (j + 1) & d->mask;
		if (!d->slots[j].cookie)
			return;
		k = home(d, d->slots[j].cookie);
		/* Leave it if its home lies cyclically in (i, j]. */
		if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
			continue;
		d->slots[i] = d->slots[j];
		d->slots[j].cookie = 0;
		i = j;
	}
}

static int reserve(void **buf, size_t *cap, size_t want, size_t size)
{
	void *n;

	if (want <= *cap)
		return 0;
	n = realloc(*buf, want * size);
	if (!n)
		return -ENOMEM;
	*buf = n;
	*cap = want;
	return 0;
}

struct tb_flowdiff *tb_flowdiff_new(void)
{
	struct tb_flowdiff *d = calloc(1, sizeof(*d));

	if (!d)
		return NULL;
	d->mask = 1023;
	d->slots = calloc(d->mask + 1, sizeof(*d->slots));
	if (!d->slots) {
		free(d);
		return NULL;
	}
	return d;
}

void tb_flowdiff_free(struct tb_flowdiff *d)
{
	if (!d)
		return;
	free(d->slots);
	free(d->changed);
	free(d->vanished);
	free(d);
}

int tb_flowdiff_update(struct tb_flowdiff *d, const struct tb_flow *recs, size_t n,
		       const __u32 **changed, size_t *n_changed,
		       const __u64 **vanished, size_t *n_vanished, __u64 *read_ns)
{
	size_t nc = 0, nv = 0;

	*read_ns = 0;

	if (reserve((void **)&d->changed, &d->changed_cap, n ? n : 1, sizeof(*d->changed)))
		return -ENOMEM;
	d->gen++;
	for (size_t i = 0; i < n; i++) {
		const struct tb_flow *r = &recs[i];
		__u64 h = record_hash(r);
		struct slot *s;

		if (!r->cookie)
			continue;
		if (!(r->flags & TB_FLOW_CLOSED) && r->update_ns > *read_ns)
			*read_ns = r->update_ns;
		if (2 * (d->used + 1) > d->mask + 1 && grow(d))
			return -ENOMEM;
		s = find(d, r->cookie);
		if (r->flags & TB_FLOW_CLOSED) {
			/* Final: reported once, never expected again. */
			d->changed[nc++] = (__u32)i;
			if (s->cookie)
				erase(d, s);
			continue;
		}
		if (!s->cookie) {
			s->cookie = r->cookie;
			d->used++;
			d->changed[nc++] = (__u32)i;
		} else if (s->hash != h) {
			d->changed[nc++] = (__u32)i;
		}
		s->hash = h;
		s->gen = d->gen;
	}
	for (size_t i = 0; i <= d->mask; i++) {
		if (!d->slots[i].cookie || d->slots[i].gen == d->gen)
			continue;
		if (reserve((void **)&d->vanished, &d->vanished_cap, nv + 1 < 64 ? 64 : 2 * (nv + 1),
			    sizeof(*d->vanished)))
			return -ENOMEM;
		d->vanished[nv++] = d->slots[i].cookie;
	}
	for (size_t i = 0; i < nv; i++)
		erase(d, find(d, d->vanished[i]));
	*changed = d->changed;
	*n_changed = nc;
	*vanished = d->vanished;
	*n_vanished = nv;
	return 0;
}

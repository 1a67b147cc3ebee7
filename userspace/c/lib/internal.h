/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the parts of libtamebpf share with each other and not with callers:
 * error reporting, libbpf logging, reading a BPF iterator inside another
 * network namespace, and attaching a program to a cgroup by path. The public
 * API is tamebpf.h.
 */
#ifndef TAMEBPF_INTERNAL_H
#define TAMEBPF_INTERNAL_H

#include "tamebpf.h"

struct bpf_link;
struct bpf_program;

/* Set this thread's error text (tb_last_error). */
void tb_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Route libbpf's messages through our printer (warnings kept for errors). */
void tb_libbpf_logging(void);

/* Create an iterator of `link` in network namespace `netns_fd` (-1: ours)
 * and return its fd, or -errno. An iterator walks the namespace it was
 * created in, so only bpf_iter_create() runs inside `netns_fd`; the calling
 * thread is back in `self_netns_fd` (its own) when this returns, and reads
 * the fd from there. */
int tb_iter_create_in(struct bpf_link *link, int netns_fd, int self_netns_fd);

/* Attach `prog` to the cgroup directory `cg_path` (an unpinned link, gone
 * with the process); on failure set the error text, naming `what`, and
 * return NULL with errno set. */
struct bpf_link *tb_attach_cgroup_path(struct bpf_program *prog, const char *cg_path,
				       const char *what);

#endif /* TAMEBPF_INTERNAL_H */

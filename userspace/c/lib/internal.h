/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the parts of libtamebpf share with each other and not with callers:
 * error reporting, libbpf logging, opening and closing the handles of the
 * public API, reading a BPF iterator inside another network namespace, and
 * attaching a program to a cgroup by path. The public API is tamebpf.h.
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

/* For a call that failed with errno set: the error text "what: reason",
 * and -errno to return. */
int tb_errno_error(const char *what);

/* The handles of the public API (struct tb_flows, tb_synrto, tb_acktrain)
 * are opened by tb_handle_open and closed by tb_handle_close, so that
 * allocation, libbpf logging and undoing a half-made handle are written
 * once. Each kind gives two functions: */
/* Open, configure, load and attach into the zeroed handle `h`, as `args`
 * says; 0, or -errno with the error text set. */
typedef int tb_setup_fn(void *h, const void *args);
/* Release whatever setup made, also when it stopped half way (the fields
 * it did not reach are zero); not the handle itself. */
typedef void tb_teardown_fn(void *h);

/* A new handle of `size` bytes, set up from `args`; or NULL with
 * *err = -errno and the error text set, after tearing down what a failed
 * setup made. */
void *tb_handle_open(size_t size, tb_setup_fn *setup, tb_teardown_fn *teardown,
		     const void *args, int *err);
/* Tear down and free a handle from tb_handle_open; NULL is a no-op. */
void tb_handle_close(void *h, tb_teardown_fn *teardown);

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

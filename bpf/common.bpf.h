/* SPDX-License-Identifier: GPL-2.0 */
/* Constants and helpers every tamebpf BPF object uses. Kernel side only:
 * structs that cross to userspace live in the per-object headers. */
#ifndef TAMEBPF_COMMON_BPF_H
#define TAMEBPF_COMMON_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

/* uapi values that vmlinux.h (BTF: types only, no macros) cannot give us. */
#define AF_INET 2
#define AF_INET6 10
#define SOCK_STREAM 1
#define IPPROTO_TCP 6

/* Linux 5.5-5.19 kept the ancestors' cgroup ids in the cgroup itself;
 * 6.0 replaced them with pointers to the ancestors (cgroup->ancestors[]). */
struct cgroup___ids {
	__u64 ancestor_ids[0];
} __attribute__((preserve_access_index));

/* The id of cg's ancestor at `level` (cg itself when level == cg->level),
 * or 0 when it cannot be read. Callers check cg->level >= level first.
 * Both layouts are compiled in; CO-RE keeps the one this kernel has and the
 * verifier drops the other branch as dead code. */
static __always_inline __u64 tb_cgroup_ancestor_id(struct cgroup *cg, __u32 level)
{
	struct cgroup *anc = NULL;
	__u64 id = 0;

	if (bpf_core_field_exists(cg->ancestors)) {
		/* ancestors[] is a flexible array: read the slot explicitly. */
		if (bpf_core_read(&anc, sizeof(anc), &cg->ancestors[level]) || !anc)
			return 0;
		return BPF_CORE_READ(anc, kn, id);
	}
	if (bpf_core_read(&id, sizeof(id),
			  &((struct cgroup___ids *)cg)->ancestor_ids[level]))
		return 0;
	return id;
}

#endif /* TAMEBPF_COMMON_BPF_H */

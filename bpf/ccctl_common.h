/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What every ccctl congestion-control object carries besides its algorithm:
 * the license, the load-time configuration the loader fills in, the pinned
 * bookkeeping map, and the two struct_ops registrations for the two kernel
 * ABIs of cong_control.
 */
#ifndef __CCCTL_COMMON_H
#define __CCCTL_COMMON_H

#include "kernel_types.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "ccctl_abi.h"
#include "tcp_helpers.h"

char _license[] SEC("license") = "GPL";

/* Filled in by the loader before load; constant to the verifier. */
const volatile struct ccctl_load_config ccctl_cfg = {};

static __always_inline bool kernel_can(u32 feature)
{
	return ccctl_cfg.kernel_features & feature;
}

static __always_inline bool fault_injected(u32 fault)
{
	return ccctl_cfg.fault_inject & fault;
}

/* One entry of bookkeeping, written by ccctl, pinned beside the registration. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct ccctl_meta);
} meta SEC(".maps");

/*
 * Tunable parameters (one struct ccctl_params_entry), pinned beside the
 * registration as "params"; version 0 means never written: defaults.
 * Readers must clamp every value (see each algorithm's bounds).
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct ccctl_params_entry);
} params SEC(".maps");

/*
 * The set in force, copied out whole under the entry's spin lock (ccctl
 * writes it with BPF_F_LOCK, see ccctl_abi.h): a callback reads it once and
 * uses that copy for every decision it makes, so nothing it does mixes two
 * sets.  A set never written (version 0), or a map that cannot be read,
 * gives CCCTL_PARAMS' defaults with version 0.  The critical section is the
 * copy alone, a dozen loads and stores.
 */
#define CCCTL_PARAM_SET_DEFAULT(field, ...) out->field = CCCTL_PARAM_DEFAULT(field);
static __always_inline void ccctl_params_read(struct ccctl_params *out)
{
	struct ccctl_params_entry *e;
	u32 zero = 0;

	e = bpf_map_lookup_elem(&params, &zero);
	if (e) {
		bpf_spin_lock(&e->lock);
		*out = e->p;
		bpf_spin_unlock(&e->lock);
		if (out->version)
			return;
	}
	out->version = 0;
	CCCTL_PARAMS(CCCTL_PARAM_SET_DEFAULT)
}

/* A parameter of the set, clamped to its CCCTL_PARAMS bounds. */
#define ccctl_param(p, field) clamp_u32((p)->field, CCCTL_PARAM_LO(field), CCCTL_PARAM_HI(field))

/* ccctl_event.param_digest: FNV-1a over the set's __u32 words, in order. */
static __always_inline u32 ccctl_params_digest(const struct ccctl_params *p)
{
	const u32 *w = (const u32 *)p;
	u32 h = CCCTL_PARAM_DIGEST_BASIS;
	int i;

#pragma unroll
	for (i = 0; i < (int)(sizeof(*p) / sizeof(u32)); i++) {
		h ^= w[i];
		h *= CCCTL_PARAM_DIGEST_PRIME;
	}
	return h;
}

static __always_inline u32 clamp_u32(u32 v, u32 lo, u32 hi)
{
	return v < lo ? lo : (v > hi ? hi : v);
}

/*
 * Two registrations of the same algorithm, one per cong_control prototype:
 *   ops         cong_control(sk, ack, flag, rs)   Linux 6.10 and later
 *   ops_pre610  cong_control(sk, rs)              before 6.10
 * The loader reads the running kernel's BTF, creates exactly one of the two
 * maps (libbpf then skips loading the programs only the other one uses) and
 * registers it through a struct_ops link on 6.4+, or by a plain map update
 * before that.  Both carry the same kernel name.
 */
#define CCCTL_STRUCT_OPS(ca_name, cong_control_prog, cong_control_prog_pre610, ...) \
	SEC(".struct_ops.link")                                                        \
	struct tcp_congestion_ops ops = {                                              \
		.cong_control = (void *)cong_control_prog,                             \
		.name = ca_name,                                                       \
		__VA_ARGS__                                                            \
	};                                                                             \
	SEC(".struct_ops.link")                                                        \
	struct tcp_congestion_ops ops_pre610 = {                                       \
		.cong_control = (void *)cong_control_prog_pre610,                      \
		.name = ca_name,                                                       \
		__VA_ARGS__                                                            \
	}

/*
 * The two cong_control entry points the registrations above name, NAME for
 * cong_control(sk, ack, flag, rs) and NAME_pre610 for cong_control(sk, rs);
 * both hand the rate sample to the algorithm's per-ACK function MAIN(sk, rs).
 */
#define CCCTL_CONG_CONTROL(name, main)                                          \
	SEC("struct_ops")                                                       \
	void BPF_PROG(name, struct sock *sk, u32 ack, int flag,                 \
		      const struct rate_sample *rs)                             \
	{                                                                       \
		main(sk, rs);                                                   \
	}                                                                       \
	SEC("struct_ops")                                                       \
	void BPF_PROG(name##_pre610, struct sock *sk,                           \
		      const struct rate_sample *rs)                             \
	{                                                                       \
		main(sk, rs);                                                   \
	}

#endif /* __CCCTL_COMMON_H */

// SPDX-License-Identifier: GPL-2.0
/*
 * bpf_bbr: BBR v1 exactly as bbr_core.h describes it, our baseline.
 *
 * Every hook is the identity, so this object is the shared core and nothing
 * else; a difference between bpf_bbr and a variant is the variant's doing.
 */
#define CCCTL_ALGO_ID CCCTL_ALGO_BBR
#include "bbr_core.h"

static void bbr_hook_init(struct sock *sk) {}
static u64 bbr_hook_bw_sample(struct sock *sk, const struct rate_sample *rs, u64 bw) { return bw; }
static void *bbr_hook_after_model(struct sock *sk, const struct rate_sample *rs,
				  const struct ccctl_params *p) { return NULL; }
static u32 bbr_hook_bw(struct sock *sk, u32 bw, void *v) { return bw; }
static u32 bbr_hook_pacing_gain(struct sock *sk, u32 gain, void *v) { return gain; }
static u32 bbr_hook_cwnd_gain(struct sock *sk, u32 gain, void *v) { return gain; }
static u32 bbr_hook_cwnd(struct sock *sk, const struct rate_sample *rs, u32 cwnd, void *v) { return cwnd; }
static void bbr_hook_mode_change(struct sock *sk, u8 from, u8 to) {}
static void bbr_hook_release(struct sock *sk) {}
static void bbr_hook_undo(struct sock *sk) {}
static void bbr_hook_trace(struct sock *sk, struct ccctl_event *e, void *v) {}

BBR_STRUCT_OPS("bpf_bbr");

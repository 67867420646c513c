/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The one ABI between our BPF programs and the ccctl control plane.
 *
 * Everything that crosses the boundary (load-time configuration, the pinned
 * bookkeeping map, tunable parameters and per-ACK events as they arrive) is
 * declared here and nowhere else.  ccctl's build.rs runs bindgen on this
 * file, so Rust sees these exact layouts; never mirror a struct by hand.
 *
 * Only fixed-width types: the header is compiled both for the BPF target and
 * for the host by bindgen.
 */
#ifndef __CCCTL_ABI_H
#define __CCCTL_ABI_H

#ifndef __CCCTL_KERNEL_TYPES_H
#include <linux/types.h>
#endif

/* Kernel name length, TCP_CA_NAME_MAX. */
#define CCCTL_CA_NAME_MAX 16

/*
 * What the running kernel lets a BPF congestion control do, detected by the
 * loader from the kernel's BTF and written into .rodata before load.  The
 * verifier treats .rodata as constants and never visits code behind a
 * cleared bit, so one object carries writes that only newer kernels accept.
 */
#define CCCTL_KF_APP_LIMITED_WRITE (1u << 0) /* tp->app_limited (6.4+) */
#define CCCTL_KF_CWND_STAMP_WRITE (1u << 1)  /* tp->snd_cwnd_stamp (6.10+) */

/*
 * Deliberate faults for the error-path tests; zero in normal use.
 * CCCTL_FAULT_VERIFIER makes the program write a field the verifier forbids,
 * so the loader's "verifier rejected" path can be tested for real.
 */
#define CCCTL_FAULT_VERIFIER (1u << 0)

struct ccctl_load_config {
	__u32 kernel_features; /* CCCTL_KF_* */
	__u32 fault_inject;    /* CCCTL_FAULT_*, tests only */
};

/* How the algorithm was attached (ccctl_meta.abi). */
#define CCCTL_ABI_CONG_CONTROL_4ARG (1u << 0) /* cong_control(sk, ack, flag, rs), 6.10+ */
#define CCCTL_ABI_STRUCT_OPS_LINK (1u << 1)   /* registered through a bpf_link, 6.4+ */

/*
 * Bookkeeping kept in each algorithm's pinned "meta" map (one entry), so
 * that what `ccctl status` and `ccctl unload` need lives exactly as long
 * as the registration's pins do.
 */
struct ccctl_meta {
	__u64 loaded_at_unix_ns;                  /* wall clock at load */
	__u32 abi;                                /* CCCTL_ABI_* */
	__u32 kernel_features;                    /* CCCTL_KF_* in force */
	__u32 set_default;                        /* 1 if load --default changed the sysctl */
	__u32 pad;
	char prev_default_cc[CCCTL_CA_NAME_MAX];  /* sysctl value to restore on unload */
};

/* BBR modes, as reported in traces and status. */
#define CCCTL_BBR_STARTUP 0
#define CCCTL_BBR_DRAIN 1
#define CCCTL_BBR_PROBE_BW 2
#define CCCTL_BBR_PROBE_RTT 3

#endif /* __CCCTL_ABI_H */

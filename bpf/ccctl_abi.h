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

/* Which algorithm emitted an event (ccctl_event.algo, trace filters). */
#define CCCTL_ALGO_BBR 1         /* bpf_bbr */
#define CCCTL_ALGO_MODEST_BBR 2  /* modest_bbr */
#define CCCTL_ALGO_PATCHED_BBR 3 /* patched_bbr */
#define CCCTL_ALGO_DSTAR 4       /* dstar */

/* Fixed-point units of the BBR family: gains x 256 (BBR_UNIT). */
#define CCCTL_GAIN_UNIT 256

/*
 * Tunable parameters of one algorithm: its pinned "params" map (one entry).
 * ccctl writes a whole entry at once with `version` bumped, so a flow sees
 * either the old or the new set; the BPF side clamps every value to safe
 * bounds on read, so a map written by anyone else cannot stall or explode
 * a flow.  Fields an algorithm does not use are ignored by it.
 */
struct ccctl_params {
	__u32 version;       /* bumped on every write; 0 = defaults never written */
	__u32 cwnd_gain;     /* x CCCTL_GAIN_UNIT; BBR default 2.0 */
	__u32 probe_up_gain; /* ProbeBW up-probe pacing gain x CCCTL_GAIN_UNIT; default 1.25 */
	__u32 w_min;         /* Modest BBR W_min x 1024 */
	__u32 w_max;         /* Modest BBR W_max x 1024 */
	__u32 s_min;         /* Modest BBR S_min, packets */
	/* TCP D* (dstar.bpf.c clamps each on read; bounds there and in params.rs) */
	__u32 dstar_min_rtt_win_ms; /* min-RTT expiry, ms; default 10000 (Fig. 1's 10 s) */
	__u32 dstar_sigma_factor;   /* deviation factor x CCCTL_GAIN_UNIT; default 2.0 (512) */
	__u32 dstar_gain_floor;     /* gain_cwnd floor, packets; default 4 */
	__u32 dstar_drain_rtts;     /* DRAIN length, RTTs; default 2 */
	__u32 dstar_gain1_rtts;     /* GAIN 1 length, RTTs; default 2 */
	__u32 dstar_gain2_rtts;     /* GAIN 2 length, RTTs; default 1 */
	/* Patched BBR (patched-bbr-cloud.txt, Pseudocode 2; patched_bbr.bpf.c clamps on read) */
	__u32 theta_little;  /* Θ above this (x CCCTL_THETA_UNIT) is case (a), "little"; default 2/3 */
	__u32 theta_heavy;   /* Θ at or below this (x CCCTL_THETA_UNIT) is case (b), "heavy"; default 1/3 */
	__u32 off_thresh_us; /* a send gap this much longer than the pacing gap is Off, us; default 1000 */
	__u32 alpha_little;  /* eq. 38's alpha for Θ > theta_little, x CCCTL_GAIN_UNIT; default 0 */
	__u32 alpha_medium;  /* ... for theta_heavy < Θ <= theta_little; default 1 */
	__u32 alpha_heavy;   /* ... for Θ <= theta_heavy; default 2 */
	__u32 stall_filter;  /* 1: Off excludes the machine's own stalls (a 1 ms heartbeat
	                      * timer's lateness): for an emulated testbed whose whole
	                      * machine stalls, never for a real VM; default 0 */
};

/* Fixed point of patched BBR's on-percentage Θ (eq. 11): 1.0 = 1024. */
#define CCCTL_THETA_UNIT 1024

/*
 * Per-ACK tracing.  Every algorithm emits one struct ccctl_event per call of
 * its main per-ACK hook into the shared ring buffer "trace_events", when the
 * shared "trace_cfg" entry says so.  Off (enabled = 0) costs one load of
 * that entry per ACK (array lookups are inlined by the verifier).
 * Reservations that fail are counted per CPU in "trace_drops".
 * The shared maps are pinned under <bpffs>/ccctl/shared/ and reused by
 * every algorithm object.
 */
struct ccctl_trace_cfg {
	__u32 enabled;      /* 0: tracing off */
	__u32 algo_mask;    /* 1 << CCCTL_ALGO_*; 0 = every algorithm */
	__u32 port;         /* host order; local or remote port must match; 0 = any */
	__u32 saddr;        /* IPv4 local address, network order; 0 = any */
	__u32 daddr;        /* IPv4 remote address, network order; 0 = any */
	__u16 sport;        /* local port, host order; 0 = any */
	__u16 dport;        /* remote port, host order; 0 = any */
	__u32 sample_every; /* emit every Nth ACK of a flow; 0 or 1 = every ACK */
	__u32 once_per_rtt; /* 1: at most one event per flow per round trip */
	__u64 session;      /* who enabled tracing (pid); informational */
};

/* Shared counters beside the ring buffer (one entry). */
struct ccctl_trace_state {
	__u64 next_flow_id; /* flow ids are unique across algorithms until reboot */
};

/* Per-socket tracing state (bpf_sk_storage "trace_sk"). */
struct ccctl_trace_sk {
	__u64 flow_id;
	__u32 acks;                /* ACKs seen while tracing, for sample_every */
	__u32 next_round_delivered;/* once_per_rtt: emit again when tp->delivered reaches it */
};

/* TCP D* mode (ccctl_event.dstar_mode), Fig. 1 of tcp-dstar.txt. */
#define CCCTL_DSTAR_DRAIN 0 /* window at 4 packets so the queue empties and min RTT is re-measured */
#define CCCTL_DSTAR_GAIN1 1 /* window BDP + gain_cwnd, waiting for the pipe to settle */
#define CCCTL_DSTAR_GAIN2 2 /* same window, delivered packets counted for eq. 1 */

/* Modest BBR phase (ccctl_event.modest_phase). */
#define CCCTL_MODEST_INACTIVE 0 /* not in ProbeBW, or no retransmission yet */
#define CCCTL_MODEST_BINARY 1   /* binary search between min_win and max_win */
#define CCCTL_MODEST_LINEAR 2   /* linear increase by S_min per ACK */

struct ccctl_event {
	__u64 ts_ns;          /* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
	__u64 flow_id;        /* stable per socket, see ccctl_trace_state */
	__u32 saddr;          /* IPv4 local address, network order (0: IPv6) */
	__u32 daddr;          /* IPv4 remote address, network order */
	__u16 sport;          /* local port, host order */
	__u16 dport;          /* remote port, host order */
	__u16 family;         /* AF_INET or AF_INET6 */
	__u8 algo;            /* CCCTL_ALGO_* */
	__u8 ca_state;        /* TCP_CA_Open .. TCP_CA_Loss */
	__u32 cwnd;           /* packets */
	__u32 ssthresh;       /* packets */
	__u64 pacing_rate;    /* bytes/s (sk_pacing_rate) */
	__u64 delivery_rate;  /* bytes/s of this ACK's rate sample; 0 if none */
	__u32 mss;            /* bytes */
	__u32 srtt_us;
	__u32 min_rtt_us;
	__u32 in_flight;      /* packets */
	__u32 delivered;      /* tp->delivered, packets */
	__u32 lost;           /* tp->lost, packets */
	__u32 total_retrans;  /* tp->total_retrans, segments */
	__u32 param_version;  /* ccctl_params.version in force */
	/* BBR family */
	__u8 bbr_mode;        /* CCCTL_BBR_* */
	__u8 modest_phase;    /* CCCTL_MODEST_* (Modest BBR) */
	__u16 pad0;
	__u32 pacing_gain;    /* x CCCTL_GAIN_UNIT, as applied on this ACK */
	__u32 cwnd_gain;      /* x CCCTL_GAIN_UNIT */
	__u32 pad1;
	__u64 btl_bw;         /* bottleneck bandwidth estimate, bytes/s */
	/* Modest BBR (0 where it does not apply) */
	__u32 min_win;        /* packets */
	__u32 max_win;        /* packets */
	__u32 last_cwnd;      /* packets */
	__u32 pad2;
	/* Patched BBR (0 where it does not apply) */
	__u32 theta;          /* Θ in force, x CCCTL_THETA_UNIT (eq. 11, estimated last round) */
	__u32 alpha;          /* eq. 38's alpha in force, x CCCTL_GAIN_UNIT */
	__u32 on_us;          /* On time of the current round so far, us */
	__u32 off_us;         /* Off time of the current round so far, us */
	__u32 theta_on_us;    /* On time of the round Θ in force was estimated over, us */
	__u32 theta_off_us;   /* Off time of that round, us */
	__u32 bbr_pacing_gain;/* BBR's pacing gain p before eq. 37, x CCCTL_GAIN_UNIT */
	__u32 stall_us;       /* machine stall time left out of the current round's Off, us */
	__u64 bw_raw;         /* this ACK's delivery-rate sample D, bytes/s (0: none) */
	__u64 bw_corrected;   /* the sample fed to the max filter, D/Θ in ProbeBW (eq. 36), bytes/s */
	/* TCP D* (0 where it does not apply) */
	__u8 dstar_mode;      /* CCCTL_DSTAR_* */
	__u8 dstar_slow_start;/* 1 while in slow start (Sec. 3.3) */
	__u16 pad3;
	__u32 dstar_bdp;      /* packets: BDP estimate, eq. 2 */
	__u32 dstar_last_bdp; /* packets: the estimate before it */
	__u32 dstar_gain_cwnd;/* packets: window above the BDP */
	__u32 dstar_sigma;    /* packets: |bdp - last_bdp| */
	__u32 dstar_min_rtt_us; /* D*'s own min RTT (Fig. 1), not the kernel's */
	__u32 dstar_rtt_us;   /* the latest RTT sample, Fig. 1's mode timer unit */
	__u32 pad4;
	__u64 dstar_delivery_rate;   /* bytes/s: eq. 1's estimate from the last GAIN 2 */
	__u64 dstar_min_rtt_stamp_ns;/* when dstar_min_rtt_us was last refreshed, ts_ns's clock */
};

/* The event is 224 bytes with no implicit padding on either side. */
#define CCCTL_EVENT_SIZE 224

#endif /* __CCCTL_ABI_H */

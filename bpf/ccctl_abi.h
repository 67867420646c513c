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
#include <linux/bpf.h> /* struct bpf_spin_lock (kernel_types.h has it for BPF) */
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

/* Fixed-point unit of Modest BBR's W_min and W_max: fractions x 1024. */
#define CCCTL_W_UNIT 1024

/* Fixed point of patched BBR's on-percentage Θ (eq. 11): 1.0 = 1024. */
#define CCCTL_THETA_UNIT 1024

/* Which algorithms have a parameter (CCCTL_PARAMS' algos): 1 << CCCTL_ALGO_*. */
#define CCCTL_ALGOS_BBR_FAMILY                                                                     \
	((1u << CCCTL_ALGO_BBR) | (1u << CCCTL_ALGO_MODEST_BBR) | (1u << CCCTL_ALGO_PATCHED_BBR))
#define CCCTL_ALGOS_MODEST (1u << CCCTL_ALGO_MODEST_BBR)
#define CCCTL_ALGOS_DSTAR (1u << CCCTL_ALGO_DSTAR)
#define CCCTL_ALGOS_PATCHED (1u << CCCTL_ALGO_PATCHED_BBR)

/*
 * Every tunable parameter, defined here once.  Each X(...) row is:
 *
 *   field    the __u32 in struct ccctl_params (fixed point, `scale` per 1)
 *   name     in configs, JSON and messages;  flag  ccctl's --flag
 *   algos    CCCTL_ALGOS_*: which algorithms read it
 *   scale    fixed-point units per real unit (1 for whole numbers)
 *   def      default, fixed point: what the BPF side uses at version 0
 *   lo, lo_x lower bound, fixed point; lo_x = 1: exclusive (lo itself refused)
 *   hi, hi_x upper bound, likewise
 *   whole    1: a whole number of real units
 *   unit     real unit, for display;  doc  one line for --help and tune
 *
 * From this list: the struct's fields (below), the BPF defaults and clamp
 * bounds (enum ccctl_param_bounds: a map written by anyone else is clamped
 * to [lo + lo_x, hi - hi_x] on every read), and, through ccctl/core's
 * build.rs (which compiles a small C program against this header and runs
 * it), ccctl's table params::ALL, each algorithm's parameter list and so
 * the CLI flags and their error messages.  Adding a parameter is one row
 * here, at the end of its algorithm's block (the struct's layout is the
 * list's order); the algorithm then reads it with ccctl_param(p, field).
 * Relations between parameters (w_min < w_max) are checked by ccctl and
 * clamped by the algorithm itself.
 */
#define CCCTL_PARAMS(X)                                                                            \
	/* BBR family.  Below 1.0 BBR cannot keep the pipe full and its delivery-rate samples     \
	 * (hence btl_bw) shrink every round; a cwnd gain above 4 BDP or an up-probe above 2.0    \
	 * only fills queues.  Defaults are tcp_bbr.c's 2 and 1.25. */                            \
	X(cwnd_gain, "cwnd_gain", "cwnd-gain", CCCTL_ALGOS_BBR_FAMILY, CCCTL_GAIN_UNIT,            \
	  2 * CCCTL_GAIN_UNIT, CCCTL_GAIN_UNIT, 0, 4 * CCCTL_GAIN_UNIT, 0, 0, "x BDP",              \
	  "PROBE_BW cwnd gain: in-flight cap in BDPs")                                             \
	X(probe_up_gain, "probe_up_gain", "probe-up-gain", CCCTL_ALGOS_BBR_FAMILY, CCCTL_GAIN_UNIT, \
	  5 * CCCTL_GAIN_UNIT / 4, CCCTL_GAIN_UNIT, 0, 2 * CCCTL_GAIN_UNIT, 0, 0, "x btl_bw",       \
	  "PROBE_BW up-probe pacing gain")                                                         \
	/* Modest BBR (Sec. III-C): W_min 0.75, BBR's own drain gain; W_max 1, never above BBR's  \
	 * window; S_min 1 packet, the conservative step, above 64 per ACK is slow start.  W_min  \
	 * above 0 (its smallest is the map's step, 1/1024; the searched window never drops      \
	 * below BBR's 4 packets). */                                                             \
	X(w_min, "w_min", "wmin", CCCTL_ALGOS_MODEST, CCCTL_W_UNIT, CCCTL_W_UNIT * 3 / 4, 0, 1,    \
	  CCCTL_W_UNIT, 1, 0, "x BDP",                                                             \
	  "Modest BBR: lower end of the window search, fraction of BBR's in-flight window "        \
	  "(BtlBw x RTprop)")                                                                      \
	X(w_max, "w_max", "wmax", CCCTL_ALGOS_MODEST, CCCTL_W_UNIT, CCCTL_W_UNIT, 0, 1,            \
	  CCCTL_W_UNIT, 0, 0, "x BDP",                                                             \
	  "Modest BBR: upper end of the window search, fraction of BBR's in-flight window "        \
	  "(BtlBw x RTprop)")                                                                      \
	X(s_min, "s_min", "smin", CCCTL_ALGOS_MODEST, 1, 1, 1, 0, 64, 0, 1, "packets",             \
	  "Modest BBR: smallest window search step")                                               \
	/* Modest BBR's growth at the top (our departure 4, not in Alg. 1) waits for this many    \
	 * round trips without a retransmission: 0 grows whenever the queue is empty; 1024        \
	 * rounds (41 s at 40 ms) is as good as never.  Default 64 (2.6 s at 40 ms): measured in  \
	 * the README ("Modest BBR against Cubic"); 64 still lets a lone flow recover from a    \
	 * loss burst in seconds, 0 gave Cubic 2.4x instead of 7.6x. */                          \
	X(quiet_rounds, "quiet_rounds", "quiet-rounds", CCCTL_ALGOS_MODEST, 1, 64, 0, 0, 1024, 0,  \
	  1, "rounds",                                                                             \
	  "Modest BBR: round trips without a retransmission before the window at the top grows")  \
	/* TCP D*.  Min-RTT window: Fig. 1's 10 s, from 10 ms (tests force DRAIN with it) to      \
	 * 10 min (longer only means stale paths).  Deviation factor: Fig. 1's 2; 0 probes by    \
	 * the floor only, above 8 one noisy sample could take the whole BDP again and again.    \
	 * gain_cwnd floor: Sec. 3.2.4's 4; 1 is the least that still probes, 64 is a standing   \
	 * queue per flow.  Mode lengths (Fig. 1: DRAIN 2, GAIN 1 2, GAIN 2 1), 1 to 16 RTTs. */  \
	X(dstar_min_rtt_win_ms, "min_rtt_win_ms", "min-rtt-win-ms", CCCTL_ALGOS_DSTAR, 1, 10000,   \
	  10, 0, 600000, 0, 1, "ms",                                                               \
	  "TCP D*: min RTT expires after this long without a refresh (then cwnd 4, DRAIN)")       \
	X(dstar_sigma_factor, "sigma_factor", "sigma-factor", CCCTL_ALGOS_DSTAR, CCCTL_GAIN_UNIT,  \
	  2 * CCCTL_GAIN_UNIT, 0, 0, 8 * CCCTL_GAIN_UNIT, 0, 0, "x sigma",                          \
	  "TCP D*: deviation factor, gain_cwnd = floor + min(factor x |BDP - last BDP|, BDP)")     \
	X(dstar_gain_floor, "gain_floor", "gain-floor", CCCTL_ALGOS_DSTAR, 1, 4, 1, 0, 64, 0, 1,   \
	  "packets", "TCP D*: smallest gain_cwnd, the packets probed above the BDP")              \
	X(dstar_drain_rtts, "drain_rtts", "drain-rtts", CCCTL_ALGOS_DSTAR, 1, 2, 1, 0, 16, 0, 1,   \
	  "RTTs", "TCP D*: DRAIN lasts more than this many RTTs")                                 \
	X(dstar_gain1_rtts, "gain1_rtts", "gain1-rtts", CCCTL_ALGOS_DSTAR, 1, 2, 1, 0, 16, 0, 1,   \
	  "RTTs", "TCP D*: GAIN 1 (settling at the new window) lasts more than this many RTTs")   \
	X(dstar_gain2_rtts, "gain2_rtts", "gain2-rtts", CCCTL_ALGOS_DSTAR, 1, 1, 1, 0, 16, 0, 1,   \
	  "RTTs",                                                                                  \
	  "TCP D*: GAIN 2 (counting delivered packets for eq. 1) lasts more than this many RTTs")  \
	/* Patched BBR (its paper's Pseudocode 2).  Θ thresholds: the paper's 2/3 and             \
	 * 1/3 (x CCCTL_THETA_UNIT), 0 < theta_heavy < theta_little <= 1 (ccctl checks the pair,  \
	 * patched_bbr.bpf.c clamps it).  Off threshold: Sec. V-C-2's 1 ms, from 0.1 ms (timer    \
	 * noise) to 100 ms (above it no realistic schedule is seen).  Eq. 38's alpha per level,  \
	 * x CCCTL_GAIN_UNIT, 0 to 4 BDP (beyond that only queues grow).  stall_filter: 1 leaves  \
	 * the whole machine's stalls (a 1 ms heartbeat timer's lateness) out of Off, for an      \
	 * emulated testbed only; a real descheduled VM stalls as a whole too. */                 \
	X(theta_little, "theta_little", "theta-little", CCCTL_ALGOS_PATCHED, CCCTL_THETA_UNIT,    \
	  (CCCTL_THETA_UNIT * 2 + 1) / 3, 0, 1, CCCTL_THETA_UNIT, 0, 0, "Θ",                       \
	  "patched BBR: on-percentage above which descheduling is 'little' (no pacing boost, "    \
	  "alpha_little)")                                                                         \
	X(theta_heavy, "theta_heavy", "theta-heavy", CCCTL_ALGOS_PATCHED, CCCTL_THETA_UNIT,       \
	  CCCTL_THETA_UNIT / 3, 0, 1, CCCTL_THETA_UNIT, 1, 0, "Θ",                                 \
	  "patched BBR: on-percentage at or below which descheduling is 'heavy' (alpha_heavy)")   \
	X(off_thresh_us, "off_thresh", "off-thresh", CCCTL_ALGOS_PATCHED, 1000, 1000, 100, 0,     \
	  100000, 0, 0, "ms",                                                                      \
	  "patched BBR: a send gap this much longer than the pacing gap counts as Off")           \
	X(alpha_little, "alpha_little", "alpha-little", CCCTL_ALGOS_PATCHED, CCCTL_GAIN_UNIT, 0,  \
	  0, 0, 4 * CCCTL_GAIN_UNIT, 0, 0, "x BDP",                                                \
	  "patched BBR: cwnd gain added when Θ > theta_little (eq. 38)")                           \
	X(alpha_medium, "alpha_medium", "alpha-medium", CCCTL_ALGOS_PATCHED, CCCTL_GAIN_UNIT,     \
	  CCCTL_GAIN_UNIT, 0, 0, 4 * CCCTL_GAIN_UNIT, 0, 0, "x BDP",                               \
	  "patched BBR: cwnd gain added when theta_heavy < Θ <= theta_little (eq. 38)")            \
	X(alpha_heavy, "alpha_heavy", "alpha-heavy", CCCTL_ALGOS_PATCHED, CCCTL_GAIN_UNIT,        \
	  2 * CCCTL_GAIN_UNIT, 0, 0, 4 * CCCTL_GAIN_UNIT, 0, 0, "x BDP",                           \
	  "patched BBR: cwnd gain added when Θ <= theta_heavy (eq. 38)")                           \
	X(stall_filter, "stall_filter", "stall-filter", CCCTL_ALGOS_PATCHED, 1, 0, 0, 0, 1, 0, 1,  \
	  "0/1",                                                                                   \
	  "patched BBR: 1 leaves the whole machine's stalls (heartbeat timer lateness) out of "   \
	  "Off; for emulated testbeds only")                                                       \
	/* Eq. 36's two readings: 0, the max filter over D / Θ, each sample divided by the Θ of   \
	 * its round (the default); 1, the max filter over the raw D and the estimate divided by  \
	 * the Θ in force (app-limited samples are then never divided). */                       \
	X(divide_after_max, "divide_after_max", "divide-after-max", CCCTL_ALGOS_PATCHED, 1, 0, 0, \
	  0, 1, 0, 1, "0/1",                                                                       \
	  "patched BBR: 1 divides btl_bw (max of the raw samples) by the Θ in force instead of "  \
	  "each sample by its own Θ (eq. 36)")

/*
 * Tunable parameters of one algorithm: its pinned "params" map (one entry of
 * struct ccctl_params_entry), one __u32 per CCCTL_PARAMS row after the
 * version.  ccctl writes a whole set at once with `version` bumped; the BPF
 * side clamps every value to the row's bounds on read, so a map written by
 * anyone else cannot stall or explode a flow.  Fields an algorithm does not
 * use are ignored by it.
 */
#define CCCTL_PARAM_FIELD(field, ...) __u32 field;
struct ccctl_params {
	__u32 version; /* bumped on every write; 0 = never written: defaults */
	CCCTL_PARAMS(CCCTL_PARAM_FIELD)
};

/* Each row's default and clamp bounds, fixed point, as constants the BPF
 * side reads through CCCTL_PARAM_DEFAULT(field), _LO(field), _HI(field). */
#define CCCTL_PARAM_BOUNDS(field, name, flag, algos, scale, def, lo, lo_x, hi, hi_x, ...) \
	ccctl_param_default_##field = (def), ccctl_param_lo_##field = (lo) + (lo_x),        \
	ccctl_param_hi_##field = (hi) - (hi_x),
enum ccctl_param_bounds { CCCTL_PARAMS(CCCTL_PARAM_BOUNDS) };
#define CCCTL_PARAM_DEFAULT(field) ((__u32)ccctl_param_default_##field)
#define CCCTL_PARAM_LO(field) ((__u32)ccctl_param_lo_##field)
#define CCCTL_PARAM_HI(field) ((__u32)ccctl_param_hi_##field)

/*
 * The params map's value: the set behind a BPF spin lock, so that a flow
 * sees the old set or the new one, never a mix.  An array-map update copies
 * the value in place, and a flow reading during that copy would see half of
 * each; with the lock, ccctl writes (and reads) with BPF_F_LOCK, the kernel
 * copies under the lock, and each per-ACK callback copies the whole set out
 * under the same lock once (ccctl_params_read) and uses only that copy.
 * struct_ops programs may take a bpf_spin_lock on 6.1 and on 6.18 (only
 * socket filters, tracing and sleepable programs may not).  A writer that
 * does not pass BPF_F_LOCK (a bare `bpftool map update`) bypasses the lock.
 */
struct ccctl_params_entry {
	struct bpf_spin_lock lock;
	struct ccctl_params p;
};

/*
 * ccctl_event.param_digest: FNV-1a (32 bit) over the set the callback used,
 * taken as the __u32 words of struct ccctl_params in order, version
 * included.  With param_version it identifies a whole set, so a trace shows
 * whether any ACK ever saw half of one set and half of another.
 */
#define CCCTL_PARAM_DIGEST_BASIS 2166136261u
#define CCCTL_PARAM_DIGEST_PRIME 16777619u

/*
 * Per-ACK tracing.  Every algorithm emits one struct ccctl_event per call of
 * its main per-ACK hook into the shared ring buffer "trace_events", when the
 * shared "trace_cfg" entry says so.  Off (enabled = 0) costs one load of
 * that entry per ACK (array lookups are inlined by the verifier).
 * Reservations that fail are counted per CPU in "trace_drops".
 * The shared maps are pinned under <bpffs>/ccctl/shared/ and reused by
 * every algorithm object.
 */
/*
 * Addresses, in the filter and in every event, are 16 bytes in network
 * order with IPv4 written IPv4-mapped (::ffff:a.b.c.d, RFC 4291 2.5.5.2):
 * one comparison serves both families, and a dual-stack AF_INET6 socket
 * talking to an IPv4 peer (which the kernel keeps v4-mapped) matches the
 * same IPv4 filter as an AF_INET socket.  The event's family field still
 * says which kind of socket it was.
 */
#define CCCTL_ADDR_BYTES 16
#define CCCTL_ADDR_V4MAPPED_PREFIX 96 /* bits before the IPv4 address in ::ffff:a.b.c.d */

struct ccctl_trace_cfg {
	__u32 enabled;      /* 0: tracing off */
	__u32 algo_mask;    /* 1 << CCCTL_ALGO_*; 0 = every algorithm */
	__u32 port;         /* host order; local or remote port must match; 0 = any */
	__u16 sport;        /* local port, host order; 0 = any */
	__u16 dport;        /* remote port, host order; 0 = any */
	__u32 sample_every; /* emit every Nth ACK of a flow; 0 or 1 = every ACK */
	__u32 once_per_rtt; /* 1: at most one event per flow per round trip */
	__u8 saddr[CCCTL_ADDR_BYTES]; /* local address (IPv4-mapped for IPv4), network order */
	__u8 daddr[CCCTL_ADDR_BYTES]; /* remote address, likewise */
	__u8 saddr_prefix;  /* leading bits of saddr that must match: 0 = any address, 128 = exactly */
	__u8 daddr_prefix;  /* the same for daddr (an IPv4 /24 is 96 + 24 = 120) */
	__u16 pad0;
	__u32 pad1;
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

/* TCP D* mode (ccctl_event.dstar_mode), Fig. 1 of the TCP D* paper. */
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
	__u8 saddr[CCCTL_ADDR_BYTES]; /* local address, network order; IPv4 as ::ffff:a.b.c.d */
	__u8 daddr[CCCTL_ADDR_BYTES]; /* remote address, likewise */
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
	__u16 edt_lead_ms;    /* every algorithm: ms the socket's pacing schedule (tcp_wstamp_ns,
			       * the next departure time) runs ahead of this ACK's clock
			       * (tcp_clock_cache), saturating at 65535; about one packet's slot
			       * while paced, more after segments left in a burst */
	__u32 pacing_gain;    /* x CCCTL_GAIN_UNIT, as applied on this ACK */
	__u32 cwnd_gain;      /* x CCCTL_GAIN_UNIT */
	__u32 param_digest;   /* CCCTL_PARAM_DIGEST of the set in force on this ACK */
	__u64 btl_bw;         /* bottleneck bandwidth estimate, bytes/s */
	/* Modest BBR (0 where it does not apply) */
	__u32 min_win;        /* packets */
	__u32 max_win;        /* packets */
	__u32 last_cwnd;      /* packets */
	__u32 quiet_rounds;   /* round trips since the last retransmission (saturates at 65535) */
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
	__u8 bbr_lt_use_bw;   /* BBR family: 1 while it paces at the long-term (policer) rate */
	__u8 pad3;
	__u32 dstar_bdp;      /* packets: BDP estimate, eq. 2 */
	__u32 dstar_last_bdp; /* packets: the estimate before it */
	__u32 dstar_gain_cwnd;/* packets: window above the BDP */
	__u32 dstar_sigma;    /* packets: |bdp - last_bdp| */
	__u32 dstar_min_rtt_us; /* D*'s own min RTT (Fig. 1), not the kernel's */
	__u32 dstar_rtt_us;   /* the latest RTT sample, Fig. 1's mode timer unit */
	__u32 dstar_clock_lag_us; /* ts_ns - tp->tcp_mstamp, us: how long after the time Fig. 1's
				   * timers read on this ACK (its arrival) the event was taken */
	__u64 dstar_delivery_rate;   /* bytes/s: eq. 1's estimate from the last GAIN 2 */
	__u64 dstar_min_rtt_stamp_ns;/* when dstar_min_rtt_us was last refreshed, ts_ns's clock */
	/* BBR family, after the others so older readers' offsets hold */
	__u32 bbr_min_rtt_us;     /* BBR's own min_rtt filter (RTprop), us; not tcp_min_rtt */
	__u32 bbr_min_rtt_age_ms; /* ms since that filter was last refreshed: PROBE_RTT at 10 s */
};

/* The event is 256 bytes with no implicit padding on either side. */
#define CCCTL_EVENT_SIZE 256


/*
 * Rollout policy (bpf/policy.bpf.c, ccctl_core::policy).
 *
 * Rules live in two halves of the pinned array map "policy_rules"
 * (CCCTL_POLICY_MAX_RULES entries each); "policy_hdr" says which half is in
 * force.  ccctl writes the other half whole, then its count, then flips
 * `active` (two one-field updates), so a new connection sees the old rule
 * set or the new one, never a mix; a ccctl killed before the flip leaves
 * the old set in force.  Rules are tried in order: the first that matches
 * takes the connection.
 */
#define CCCTL_POLICY_MAX_RULES 64

/* ccctl_policy_rule.match: which fields must match (all of them). */
#define CCCTL_PM_LOCAL (1u << 0)       /* local address in local_net/local_mask */
#define CCCTL_PM_REMOTE (1u << 1)      /* remote address in remote_net/remote_mask */
#define CCCTL_PM_LOCAL_PORT (1u << 2)  /* local port */
#define CCCTL_PM_REMOTE_PORT (1u << 3) /* remote port */
#define CCCTL_PM_CGROUP (1u << 4)      /* socket's cgroup (v2) is cgroup_id or below it */
#define CCCTL_PM_NETNS (1u << 5)       /* socket's network namespace cookie */

/* ccctl_policy_rule.flags */
#define CCCTL_POLICY_F_ENFORCE (1u << 0)     /* override an application's own TCP_CONGESTION */
#define CCCTL_POLICY_F_ROLLED_BACK (1u << 1) /* canary off: every match gets the control */

/* Canary share: hash of the 4-tuple modulo this, below share_bp: canary. */
#define CCCTL_POLICY_SHARE_ONE 10000

/* Deepest cgroup level a rule can name (the root is level 0). */
#define CCCTL_POLICY_CGROUP_LEVELS 16

struct ccctl_policy_rule {
	__u32 rule_id;    /* FNV-1a 32 of the rule's name: stable across applies */
	__u32 match;      /* CCCTL_PM_* */
	__u32 flags;      /* CCCTL_POLICY_F_* */
	__u32 share_bp;   /* canary share in 1/CCCTL_POLICY_SHARE_ONE; SHARE_ONE: all */
	__u32 local_net[4];   /* addresses as in the trace filter: 16 bytes, network */
	__u32 local_mask[4];  /* order, IPv4 as ::ffff:a.b.c.d; net = addr & mask */
	__u32 remote_net[4];
	__u32 remote_mask[4];
	__u16 local_port;  /* host order */
	__u16 remote_port; /* host order */
	__u32 cgroup_level; /* level of cgroup_id (root 0), < CCCTL_POLICY_CGROUP_LEVELS */
	__u64 cgroup_id;    /* cgroup v2 id (the directory's inode number) */
	__u64 netns_cookie; /* SO_NETNS_COOKIE of the namespace */
	char algo[CCCTL_CA_NAME_MAX];    /* kernel name for the canary (or all, share 1) */
	char control[CCCTL_CA_NAME_MAX]; /* kernel name for the rest; "" = leave them */
};

struct ccctl_policy_hdr {
	__u32 active;   /* 0: no rules; 1: half 0; 2: half 1 */
	__u32 count[2]; /* rules in each half */
	__u32 generation; /* bumped by every apply */
};

/* ccctl_policy_sk.group */
#define CCCTL_POLICY_GROUP_NONE 0
#define CCCTL_POLICY_GROUP_CANARY 1
#define CCCTL_POLICY_GROUP_CONTROL 2
#define CCCTL_POLICY_GROUP_ROLLED_BACK 3 /* was canary, moved back by a rollback */

/* ccctl_policy_sk.flags */
#define CCCTL_POLICY_SK_APP_SET (1u << 0)  /* the application set TCP_CONGESTION itself */
#define CCCTL_POLICY_SK_ENFORCED (1u << 1) /* a rule with enforce set it: app setsockopt refused */

/* Per-socket policy state (bpf_sk_storage "policy_sk", cloned to accepted children). */
struct ccctl_policy_sk {
	__u32 rule_id; /* the rule that took the socket; 0: none */
	__u8 group;    /* CCCTL_POLICY_GROUP_* */
	__u8 flags;    /* CCCTL_POLICY_SK_* */
	__u16 gen;     /* low 16 bits of the policy generation that decided it (the migration skips its own apply's) */
	char prev[CCCTL_CA_NAME_MAX]; /* congestion control before the rule set it */
};

/* Per-rule counters (hash "policy_stats", by rule_id). */
struct ccctl_policy_stats {
	__u64 canary;      /* connections given the canary algorithm */
	__u64 control;     /* connections given (or left on) the control */
	__u64 app_kept;    /* matched, but the application's own choice was kept */
	__u64 failed;      /* bpf_setsockopt refused (algorithm not registered) */
	__u64 app_refused; /* application TCP_CONGESTION refused (enforce) */
	__u64 rolled_back; /* live connections moved back by a rollback */
};

/* What the rollback iterator (iter/tcp) does: one entry, written before each run. */
struct ccctl_policy_iter_cfg {
	__u32 rule_id;    /* sockets of this rule's canary group */
	__u32 pad;
	char to[CCCTL_CA_NAME_MAX]; /* move them to this; "": each socket's previous one */
	__u64 moved;      /* out: sockets moved */
	__u64 failed;     /* out: bpf_setsockopt refused */
};

/*
 * Opt-in migration of live connections onto the rules (`ccctl policy apply
 * --migrate`): the iter/tcp program ccctl_policy_migrate walks the TCP
 * sockets of one network namespace and gives each ESTABLISHED one the
 * first matching rule's decision, as the sockops program would have at its
 * establishment.  One entry of "policy_mig_cfg", written before each
 * namespace is walked; per-rule counters in "policy_mig_stats" (new maps,
 * so the pinned maps of an older ccctl are reused unchanged).
 */
struct ccctl_policy_mig_cfg {
	__u32 generation; /* the apply's generation: 0 = off; its own sockops' sockets are skipped */
	__u32 pad;
	__u64 netns_cookie; /* cookie of the namespace being walked (rules by netns) */
	char dflt[CCCTL_CA_NAME_MAX]; /* that namespace's default congestion control */
	__u64 seen;         /* out: ESTABLISHED sockets looked at */
};

/* Per-rule migration counters (hash "policy_mig_stats", by rule_id). */
struct ccctl_policy_mig_stats {
	__u64 canary;   /* live connections put on the canary algorithm */
	__u64 control;  /* live connections put on the control */
	__u64 left;     /* matched, outside the canary, no control: left as they are */
	__u64 app_kept; /* matched, kept: the application's choice (or presumed so), no enforce */
	__u64 failed;   /* bpf_setsockopt refused */
};

/*
 * The policy as applied (JSON written by ccctl), one per half, for `policy
 * show`: map "policy_doc", value a __u32 length (native order) then up to
 * CCCTL_POLICY_DOC_MAX bytes of JSON.  Declared in policy.bpf.c, not here:
 * bindgen would give Rust a 64 KiB struct ccctl reads as bytes anyway.
 */
#define CCCTL_POLICY_DOC_MAX 65532

#endif /* __CCCTL_ABI_H */

/* SPDX-License-Identifier: GPL-2.0 */
/*
 * BBR (Bottleneck Bandwidth and Round-trip propagation time), version 1,
 * as a BPF struct_ops congestion control.  Shared by every BBR-based
 * algorithm in ccctl: bbr.bpf.c is this core with no changes, and variants
 * (modest_bbr, patched_bbr) change it only through the hooks declared below.
 *
 * The model
 * ---------
 * A flow's path is summarised by two numbers:
 *
 *   btl_bw   the bottleneck bandwidth: the windowed maximum of the delivery
 *            rate samples TCP's rate sampler hands us on every ACK
 *            (packets per us, scaled by BW_UNIT), over the last 10 rounds;
 *   min_rtt  the round-trip propagation time: the windowed minimum RTT over
 *            the last 10 seconds.
 *
 * Their product is the bandwidth-delay product (BDP), the amount of data
 * that fills the pipe without building a queue.  BBR paces at
 * pacing_gain * btl_bw and caps the data in flight at cwnd_gain * BDP
 * (plus allowances for TSO batching and ACK aggregation).  Everything else
 * is about measuring those two numbers without destroying them:
 *
 *   STARTUP    pacing and cwnd gain 2/ln(2) ~ 2.89, doubling the delivery
 *              rate each round until it grows < 25 % for 3 rounds ("full
 *              bandwidth reached");
 *   DRAIN      pacing gain ln(2)/2, to empty the queue STARTUP built, until
 *              the data in flight is down to one BDP;
 *   PROBE_BW   the steady state: an 8-phase pacing-gain cycle of
 *              1.25, 0.75, 1, 1, 1, 1, 1, 1, each phase about one min_rtt
 *              long, starting at a random phase: probe for more bandwidth,
 *              drain what the probe queued, then cruise;
 *   PROBE_RTT  if min_rtt has not been refreshed for 10 s, drop the window
 *              to 4 packets for 200 ms (and at least one round) so the
 *              queue drains and the true propagation delay can be seen.
 *
 * Two refinements from Linux's BBRv1 are kept because they change results
 * on real paths: long-term ("policer") bandwidth sampling, which notices a
 * token-bucket policer by a sustained high loss rate at a steady delivery
 * rate and then paces at that rate for up to 48 rounds; and the ACK
 * aggregation allowance, which widens cwnd by the extra data delivered in
 * ACK bursts beyond what btl_bw predicts.  In loss recovery the window
 * follows packet conservation for the first round.  Samples taken while
 * the application had nothing to send only ever raise btl_bw.
 *
 * Units: bandwidth in packets per microsecond << BW_SCALE; gains << BBR_SCALE
 * (so BBR_UNIT is 1.0); times in us (tcp_mstamp) or ms (derived from it).
 *
 * Everything per-socket lives in the 104 bytes of icsk_ca_priv (struct bbr
 * below); variants that need more keep it in a bpf_sk_storage map.
 *
 * Departures from net/ipv4/tcp_bbr.c
 * ----------------------------------
 * Read function by function against Linux 6.1 and 6.18 (bpf_bbr with the
 * identity hooks).  Where the two kernels differ from each other
 * (cong_control's prototype, what a BPF program may write) we follow the
 * running kernel.  What remains, and why:
 *
 *  1. Millisecond clock.  min_rtt_stamp_ms, probe_rtt_done_ms and the
 *     PROBE_RTT exit use tp->tcp_mstamp / 1000 where tcp_bbr.c uses
 *     tcp_jiffies32.  Turning 10 s and 200 ms into jiffies needs HZ, which
 *     a BPF program learns only from CONFIG_HZ, a __kconfig extern libbpf
 *     reads from /boot/config-* or /proc/config.gz: loading would then
 *     depend on the kernel's config file being installed, which nothing
 *     else here needs.  Same durations at 1 ms resolution instead of one
 *     jiffy (4 ms at HZ=250): PROBE_RTT holds its 4 packets for 200-201 ms
 *     where tcp_bbr.c holds them for 200-204 ms.
 *  2. u32 microsecond stamps.  cycle_start_us and ack_epoch_start_us keep
 *     the low 32 bits of tp->delivered_mstamp / tp->tcp_mstamp (u64 in
 *     tcp_bbr.c) so struct bbr fits icsk_ca_priv.  tcp_stamp_us_delta()
 *     returns a u32 too and these clocks never run backwards, so every
 *     interval is the same as long as one PROBE_BW phase or ACK epoch
 *     lasts less than 2^32 us (71 minutes).
 *  3. PROBE_RTT's app-limited mark before 6.4.  The verifier refuses the
 *     tp->app_limited write there, so we keep the mark in struct bbr and
 *     apply the rate sampler's rule to it (bbr_sample_app_limited()).  The
 *     kernel tags only packets sent while the mark is set; we tag every
 *     sample whose packet left at or before the mark, so the last round
 *     sent before PROBE_RTT (at full rate, hence rarely below btl_bw) also
 *     counts only if it raises btl_bw.  From 6.4 we write tp->app_limited
 *     as tcp_bbr.c does.
 *  4. Tunable PROBE_BW gains.  The cwnd gain and the up-probe pacing gain
 *     come from the params map (ccctl tune), clamped to [1, 4] and [1, 2];
 *     never written, they are tcp_bbr.c's 2 and 1.25.
 *  5. No get_info.  bpf_tcp_ca does not let a BPF congestion control fill
 *     INET_DIAG_BBRINFO, so `ss -ti` shows no bbr:(bw,mrtt,gains) line for
 *     us; the per-ACK trace (bbr_trace(), `ccctl trace`) carries that state.
 *  6. Registered without TCP_CONG_NON_RESTRICTED: any user may select the
 *     kernel's bbr, only a privileged one (or one allowed by
 *     net.ipv4.tcp_allowed_congestion_control) may select ours.  Who may use
 *     a loaded algorithm is left to the administrator.
 *  7. Our own copies of what is not a kfunc (tcp_helpers.h): the minmax
 *     running max, tcp_min_rtt, tcp_snd_cwnd_set, tcp_packets_in_flight;
 *     the same arithmetic.
 *  8. Arithmetic guards that change nothing reachable: the pacing rate is
 *     at least 1 byte/s; extra_acked saturates at 0xFFFF where tcp_bbr.c
 *     truncates into its u16 (different only above a 65535-packet cwnd);
 *     tso_segs_goal tolerates mss_cache 0.
 *  9. Hooks and tracing (bbr_hook_*, bbr_trace()): identity and, with
 *     tracing off, one map load per ACK; with item 4, one (inlined) array
 *     lookup of the params map per ACK in PROBE_BW.
 */
#ifndef __CCCTL_BBR_CORE_H
#define __CCCTL_BBR_CORE_H

/*
 * CCCTL_MUTANT_* blocks (here and in the .bpf.c files) are deliberately
 * wrong implementations, compiled only by the test harness (`cargo xtask
 * mutants`, with -DCCCTL_MUTANT_<NAME>) to prove that a test fails them;
 * ccctl's own build defines none.  docs/testing.md lists them and their
 * killers.
 */

#include "ccctl_common.h"
#include "ccctl_trace.h"

/* Each BBR-based object names itself for traces before including this file. */
#ifndef CCCTL_ALGO_ID
#error "define CCCTL_ALGO_ID (a CCCTL_ALGO_* from ccctl_abi.h) before including bbr_core.h"
#endif

/* ---- scales and the pacing-rate arithmetic (bbr_rate.h) --------------- */

#include "bbr_rate.h"

/* ---- constants, with their units and reasons -------------------------- */

/* Pacing-gain cycle in PROBE_BW: 8 phases of about one min_rtt each. */
#define BBR_CYCLE_LEN 8
/* btl_bw window, in rounds: one whole gain cycle plus slack. */
#define BBR_BW_WINDOW_ROUNDS (BBR_CYCLE_LEN + 2)
/* min_rtt window, ms: long enough to ride out queueing, short enough to track route changes. */
#define BBR_MIN_RTT_WINDOW_MS 10000
/* Time spent at the minimal window in PROBE_RTT, ms. */
#define BBR_PROBE_RTT_MS 200
/* Below this pacing rate (bit/s) send single-packet TSO bursts. */
#define BBR_MIN_TSO_RATE_BPS 1200000
/* 2/ln(2): the smallest gain that doubles the delivery rate every round. */
#ifndef CCCTL_MUTANT_STARTUP_GAIN_2
#define BBR_HIGH_GAIN (BBR_UNIT * 2885 / 1000 + 1)
#else /* mutant (tests only): a round-number STARTUP gain of 2 */
#define BBR_HIGH_GAIN (BBR_UNIT * 2)
#endif
/* ln(2)/2: the inverse, to drain one STARTUP's queue in about one round. */
#define BBR_DRAIN_GAIN (BBR_UNIT * 1000 / 2885)
/* PROBE_BW's drain phase.  Its cwnd gain (2 BDP tolerates delayed and
 * stretched ACKs) and up-probe gain (1.25) are tunable: defaults and bounds
 * with their reasons in ccctl_abi.h's CCCTL_PARAMS. */
#define BBR_PROBE_DOWN_GAIN (BBR_UNIT * 3 / 4)
/* Smallest window, packets: keeps delayed ACKs flowing. */
#define BBR_CWND_MIN_TARGET 4
/* Full bandwidth: growth below 25 % ... */
#define BBR_FULL_BW_THRESH (BBR_UNIT * 5 / 4)
/* ... for this many rounds in a row. */
#define BBR_FULL_BW_ROUNDS 3
/* Random start phase: any phase but the 0.75 drain phase. */
#define BBR_CYCLE_RAND 7

/* Long-term (policer) sampling. */
#define BBR_LT_INTERVAL_MIN_ROUNDS 4       /* shortest sampling interval */
#define BBR_LT_LOSS_THRESH 50              /* loss rate 50/256 ~ 20 % means "policed" */
#define BBR_LT_BW_RATIO (BBR_UNIT / 8)     /* two intervals within 1/8 agree ... */
#define BBR_LT_BW_DIFF (4000 / 8)          /* ... or within 4 kbit/s, in bytes/s */
#define BBR_LT_BW_MAX_ROUNDS 48            /* how long to trust a policer estimate */

/* ACK aggregation allowance. */
#define BBR_EXTRA_ACKED_GAIN BBR_UNIT      /* add 1.0 x the observed excess */
#define BBR_EXTRA_ACKED_WINDOW_ROUNDS 5    /* max filter over two 5-round halves */
#define BBR_ACK_EPOCH_RESET_THRESH (1U << 20) /* packets; bounds the epoch counter */
#define BBR_EXTRA_ACKED_MAX_US (100 * 1000)   /* never more than 100 ms of btl_bw */

/* Largest TSO burst the stack builds (64 KiB GSO less a typical x86-64 MAX_TCP_HEADER). */
#define BBR_TSO_MAX_BYTES (65536 - 1 - 320)

enum bbr_mode {
	BBR_STARTUP = CCCTL_BBR_STARTUP,
	BBR_DRAIN = CCCTL_BBR_DRAIN,
	BBR_PROBE_BW = CCCTL_BBR_PROBE_BW,
	BBR_PROBE_RTT = CCCTL_BBR_PROBE_RTT,
};

/* ---- per-socket state: must fit icsk_ca_priv (104 bytes) --------------- */

struct bbr {
	struct minmax btl_bw;         /* windowed max delivery rate; t = round count */
	u32 min_rtt_us;               /* windowed min RTT */
	u32 min_rtt_stamp_ms;         /* when min_rtt_us was taken */
	u32 full_bw;                  /* delivery rate at the last STARTUP growth check */
	u32 lt_bw;                    /* long-term (policed) bandwidth estimate */
	u32 round_count;              /* packet-timed rounds so far */
	u32 next_round_delivered;     /* tp->delivered that ends the current round */
	u32 cycle_start_us;           /* low 32 bits of the us clock at this PROBE_BW phase start */
	u32 probe_rtt_done_ms;        /* when PROBE_RTT may end; 0 = not yet timed */
	u32 prior_cwnd;               /* cwnd before loss recovery or PROBE_RTT */
	u32 lt_last_delivered;        /* long-term interval start: tp->delivered */
	u32 lt_last_stamp_ms;         /*   ... its time */
	u32 lt_last_lost;             /*   ... tp->lost */
	u32 ack_epoch_start_us;       /* low 32 bits of the us clock at the ACK epoch start */
	u32 ack_epoch_acked;          /* packets (S)ACKed in this epoch */
	u16 extra_acked_0;            /* max excess ACKed, first half-window */
	u16 extra_acked_1;            /* max excess ACKed, second half-window */
	u16 pacing_gain;              /* in force now, BBR_UNIT = 1.0 */
	u16 cwnd_gain;                /* in force now, BBR_UNIT = 1.0 */
	u8 mode;                      /* enum bbr_mode */
	u8 prev_ca_state;             /* TCP CA state seen on the previous ACK */
	u8 cycle_idx;                 /* PROBE_BW phase, 0..7 */
	u8 full_bw_count;             /* rounds without 25 % growth */
	u8 lt_round_count;            /* rounds in the long-term interval */
	u8 extra_acked_win_rounds;    /* rounds in the current half-window */
	u8 extra_acked_win_idx : 1,   /* which half-window is current */
	   round_start : 1,           /* this ACK started a new round */
	   packet_conservation : 1,   /* first round of loss recovery */
	   idle_restart : 1,          /* restarting after idle */
	   probe_rtt_round_done : 1,  /* a full round passed at the PROBE_RTT window */
	   lt_is_sampling : 1,        /* a long-term interval is open */
	   lt_use_bw : 1,             /* pacing at lt_bw (policer detected) */
	   full_bw_reached : 1;       /* STARTUP is over for good */
	u8 has_seen_rtt;              /* pacing rate was initialised from a real RTT */
	u32 probe_rtt_app_limited;    /* before 6.4: the tp->app_limited mark PROBE_RTT
				       * could not write (0 = none), see
				       * bbr_sample_app_limited() */
};

_Static_assert(sizeof(struct bbr) <= sizeof(((struct inet_connection_sock *)0)->icsk_ca_priv),
	       "struct bbr must fit icsk_ca_priv");

static __always_inline struct bbr *bbr_of(const struct sock *sk)
{
	return (struct bbr *)inet_csk_ca(sk);
}

/* ---- hooks: what a variant may change --------------------------------- */
/*
 * Every BBR-based .bpf.c defines these.  They are the only way a variant
 * changes BBR; bbr.bpf.c defines them as the identity.
 *
 *   bbr_hook_init         after BBR's own init of a socket
 *   bbr_hook_bw_sample    this ACK's delivery-rate sample (BW_UNIT pkts/us), after
 *                         round counting, -> the sample the btl_bw max filter sees
 *   bbr_hook_after_model  after the model (btl_bw, min_rtt, mode, gains) is
 *                         updated for this ACK, before pacing and cwnd are set;
 *                         gets the ACK's parameter set (see bbr_main) and
 *                         returns the variant's per-socket state for this ACK
 *                         (or NULL), handed to the three hooks below, so a
 *                         variant looks its state up once per ACK
 *   bbr_hook_bw           the bandwidth estimate (BW_UNIT pkts/us) pacing and
 *                         cwnd use on this ACK, from BBR's (btl_bw, or the
 *                         policer's rate)
 *   bbr_hook_pacing_gain  the pacing gain to apply on this ACK
 *   bbr_hook_cwnd_gain    the cwnd gain the cwnd target (gain x BDP) uses on this ACK
 *   bbr_hook_cwnd         the cwnd BBR chose for this ACK -> the cwnd to use
 *                         (not called in loss recovery's packet conservation)
 *   bbr_hook_mode_change  BBR moves from one mode to another
 *   bbr_hook_release      the socket leaves this congestion control
 *   bbr_hook_undo         the kernel undid a loss episode: DSACKs or timestamps
 *                         showed its retransmissions were spurious (reordering)
 *   bbr_hook_trace        add the variant's own state to this ACK's trace event
 *
 * The PROBE_BW cwnd gain and up-probe pacing gain come from the params map
 * (bbr_param_cwnd_gain, bbr_param_probe_up_gain), clamped to bounds that keep
 * a flow alive and the bottleneck sane whoever wrote the map.  bbr_main
 * copies the set once per ACK (ccctl_params_read) and hands that copy to
 * everything that decides on it, the variant's hook and the trace included,
 * so one ACK never acts on two sets.
 */
static void bbr_reset_probe_bw(struct sock *sk);

static void bbr_hook_init(struct sock *sk);
static u64 bbr_hook_bw_sample(struct sock *sk, const struct rate_sample *rs, u64 bw);
static void *bbr_hook_after_model(struct sock *sk, const struct rate_sample *rs,
				  const struct ccctl_params *p);
static u32 bbr_hook_bw(struct sock *sk, u32 bw, void *v);
static u32 bbr_hook_pacing_gain(struct sock *sk, u32 gain, void *v);
static u32 bbr_hook_cwnd_gain(struct sock *sk, u32 gain, void *v);
static u32 bbr_hook_cwnd(struct sock *sk, const struct rate_sample *rs, u32 cwnd, void *v);
static void bbr_hook_mode_change(struct sock *sk, u8 from, u8 to);
static void bbr_hook_release(struct sock *sk);
static void bbr_hook_undo(struct sock *sk);
static void bbr_hook_trace(struct sock *sk, struct ccctl_event *e, void *v);

/* PROBE_BW cwnd gain in force: the params map's, clamped; 2.0 by default. */
static __always_inline u32 bbr_param_cwnd_gain(const struct ccctl_params *p)
{
	return ccctl_param(p, cwnd_gain);
}

/* PROBE_BW up-probe pacing gain in force: the params map's, clamped; 1.25 by default. */
static __always_inline u32 bbr_param_probe_up_gain(const struct ccctl_params *p)
{
	return ccctl_param(p, probe_up_gain);
}

static __always_inline void bbr_set_mode(struct sock *sk, u8 mode)
{
	struct bbr *bbr = bbr_of(sk);
	u8 from = bbr->mode;

	bbr->mode = mode;
	if (from != mode)
		bbr_hook_mode_change(sk, from, mode);
}

/* ---- the estimates ----------------------------------------------------- */

static __always_inline u32 bbr_max_bw(const struct bbr *bbr)
{
	return bbr->btl_bw.s[0].v;
}

/* Bandwidth the model believes in: the policer's rate if one was detected. */
static __always_inline u32 bbr_bw(const struct bbr *bbr)
{
	return bbr->lt_use_bw ? bbr->lt_bw : bbr_max_bw(bbr);
}

static __always_inline u32 bbr_extra_acked(const struct bbr *bbr)
{
	return max(bbr->extra_acked_0, bbr->extra_acked_1);
}

/* bw (BW_UNIT pkts/us) x gain -> bytes/s, less the pacing margin, saturating
 * at ~0 where tcp_bbr.c's u64 arithmetic would wrap (bbr_rate.h). */
static u64 bbr_rate_bytes_per_sec(struct sock *sk, u64 rate, u32 gain)
{
	return bbr_rate_of(rate, tcp_sk(sk)->mss_cache, gain);
}

static unsigned long bbr_bw_to_pacing_rate(struct sock *sk, u32 bw, u32 gain)
{
	u64 rate = bbr_rate_bytes_per_sec(sk, bw, gain);

	rate = max(rate, 1ULL);
	return min(rate, (u64)sk->sk_max_pacing_rate);
}

/* Before the first bw sample: pace the initial window over the SYN's RTT (or 1 ms). */
static void bbr_init_pacing_rate_from_rtt(struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct bbr *bbr = bbr_of(sk);
	u32 rtt_us = USEC_PER_MSEC;
	u64 bw;

	if (tp->srtt_us) {
		rtt_us = max(tp->srtt_us >> 3, 1U);
		bbr->has_seen_rtt = 1;
	}
	bw = (u64)tcp_snd_cwnd(tp) * BW_UNIT / rtt_us;
	sk->sk_pacing_rate = bbr_bw_to_pacing_rate(sk, bw, BBR_HIGH_GAIN);
}

static void bbr_set_pacing_rate(struct sock *sk, u32 bw, u32 gain)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct bbr *bbr = bbr_of(sk);
	unsigned long rate = bbr_bw_to_pacing_rate(sk, bw, gain);

	if (!bbr->has_seen_rtt && tp->srtt_us)
		bbr_init_pacing_rate_from_rtt(sk);
	/* In STARTUP never pace slower than the RTT-based initial rate. */
	if (bbr->full_bw_reached || rate > sk->sk_pacing_rate)
		sk->sk_pacing_rate = rate;
}

/* TSO bursts: 1 segment at very low rates, else 2. */
static u32 bbr_min_tso_segs(struct sock *sk)
{
	return sk->sk_pacing_rate < (BBR_MIN_TSO_RATE_BPS >> 3) ? 1 : 2;
}

/* Segments the stack will put in one burst at the current pacing rate. */
static u32 bbr_tso_segs_goal(struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	u64 bytes = sk->sk_pacing_rate >> sk->sk_pacing_shift;
	u32 segs;

	bytes = min(bytes, (u64)BBR_TSO_MAX_BYTES);
	segs = tp->mss_cache ? (u32)bytes / tp->mss_cache : 0;
	segs = max(segs, bbr_min_tso_segs(sk));
	return min(segs, 0x7FU);
}

/* Remember cwnd before it is cut, to restore it afterwards. */
static void bbr_save_cwnd(struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct bbr *bbr = bbr_of(sk);

	if (bbr->prev_ca_state < TCP_CA_Recovery && bbr->mode != BBR_PROBE_RTT)
		bbr->prior_cwnd = tcp_snd_cwnd(tp);
	else /* already cut: keep the larger of the saved and current */
		bbr->prior_cwnd = max(bbr->prior_cwnd, tcp_snd_cwnd(tp));
}

/* gain x BDP, in packets, rounded up. */
static u32 bbr_bdp(struct sock *sk, u32 bw, u32 gain)
{
	struct bbr *bbr = bbr_of(sk);
	u64 w;

	/* No RTT sample yet (e.g. a SYN-less socket): use the initial window. */
	if (bbr->min_rtt_us == ~0U)
		return TCP_INIT_CWND;
	w = (u64)bw * bbr->min_rtt_us;
	return (u32)((((w * gain) >> BBR_SCALE) + BW_UNIT - 1) / BW_UNIT);
}

/*
 * Quantization budget: enough extra window to keep the pipe full despite
 * TSO/GSO bursts and delayed ACKs (3 bursts, rounded to an even count),
 * and 2 more packets while probing up so the probe really adds data.
 */
static u32 bbr_quantization_budget(struct sock *sk, u32 cwnd)
{
	struct bbr *bbr = bbr_of(sk);

	cwnd += 3 * bbr_tso_segs_goal(sk);
	cwnd = (cwnd + 1) & ~1U;
	if (bbr->mode == BBR_PROBE_BW && bbr->cycle_idx == 0)
		cwnd += 2;
	return cwnd;
}

static u32 bbr_inflight(struct sock *sk, u32 bw, u32 gain)
{
	return bbr_quantization_budget(sk, bbr_bdp(sk, bw, gain));
}

/*
 * Packets that will still be in the network when the next packet departs
 * (at its earliest departure time): in flight now, less what the path
 * delivers until then, plus one burst if we are probing up.
 */
static u32 bbr_packets_in_net_at_edt(struct sock *sk, u32 inflight_now)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct bbr *bbr = bbr_of(sk);
	u64 now_ns = tp->tcp_clock_cache;
	u64 edt_ns = max(tp->tcp_wstamp_ns, now_ns);
	u64 interval_us = (edt_ns - now_ns) / NSEC_PER_USEC;
	u32 delivered_by_edt = (u32)(((u64)bbr_bw(bbr) * interval_us) >> BW_SCALE);
	u32 inflight_at_edt = inflight_now;

	if (bbr->pacing_gain > BBR_UNIT)
		inflight_at_edt += bbr_tso_segs_goal(sk);
	if (delivered_by_edt >= inflight_at_edt)
		return 0;
	return inflight_at_edt - delivered_by_edt;
}

/* Extra window for ACK aggregation, bounded by 100 ms worth of btl_bw. */
static u32 bbr_ack_aggregation_cwnd(struct sock *sk)
{
	struct bbr *bbr = bbr_of(sk);
	u32 max_aggr_cwnd, aggr_cwnd;

	if (!bbr->full_bw_reached)
		return 0;
	max_aggr_cwnd = (u32)((u64)bbr_bw(bbr) * BBR_EXTRA_ACKED_MAX_US / BW_UNIT);
	aggr_cwnd = (BBR_EXTRA_ACKED_GAIN * bbr_extra_acked(bbr)) >> BBR_SCALE;
	return min(aggr_cwnd, max_aggr_cwnd);
}

/* ---- long-term (policer) bandwidth ----------------------------------- */

static void bbr_lt_reset_interval(struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct bbr *bbr = bbr_of(sk);

	bbr->lt_last_stamp_ms = (u32)(tp->delivered_mstamp / USEC_PER_MSEC);
	bbr->lt_last_delivered = tp->delivered;
	bbr->lt_last_lost = tp->lost;
	bbr->lt_round_count = 0;
}

static void bbr_lt_reset(struct sock *sk)
{
	struct bbr *bbr = bbr_of(sk);

	bbr->lt_bw = 0;
	bbr->lt_use_bw = 0;
	bbr->lt_is_sampling = 0;
	bbr_lt_reset_interval(sk);
}

/* Two consecutive lossy intervals at about the same rate: a policer. */
static void bbr_lt_interval_done(struct sock *sk, u32 bw)
{
	struct bbr *bbr = bbr_of(sk);
	u32 diff;

	if (bbr->lt_bw) {
		diff = bw > bbr->lt_bw ? bw - bbr->lt_bw : bbr->lt_bw - bw;
		if ((u64)diff * BBR_UNIT <= (u64)BBR_LT_BW_RATIO * bbr->lt_bw ||
		    bbr_rate_bytes_per_sec(sk, diff, BBR_UNIT) <= BBR_LT_BW_DIFF) {
			bbr->lt_bw = (bw + bbr->lt_bw) >> 1;
			bbr->lt_use_bw = 1;
			bbr->pacing_gain = BBR_UNIT;
			bbr->lt_round_count = 0;
			return;
		}
	}
	bbr->lt_bw = bw;
	bbr_lt_reset_interval(sk);
}

/*
 * Sample delivery rate over intervals that start and end with a loss and
 * span 4..16 rounds; a loss rate of >= 20 % at a steady rate marks a
 * token-bucket policer, whose rate we then use for up to 48 rounds.
 */
static void bbr_lt_sample(struct sock *sk, int losses, bool is_app_limited)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct bbr *bbr = bbr_of(sk);
	u32 lost, delivered, t_ms;
	u64 bw;

	if (bbr->lt_use_bw) {
		if (bbr->mode == BBR_PROBE_BW && bbr->round_start &&
		    ++bbr->lt_round_count >= BBR_LT_BW_MAX_ROUNDS) {
			bbr_lt_reset(sk);
			bbr_reset_probe_bw(sk);
		}
		return;
	}

	/* Open an interval on the first loss, so it starts as the policer bites. */
	if (!bbr->lt_is_sampling) {
		if (!losses)
			return;
		bbr_lt_reset_interval(sk);
		bbr->lt_is_sampling = 1;
	}
	/* An app-limited sample says nothing about a policer. */
	if (is_app_limited) {
		bbr_lt_reset(sk);
		return;
	}
	if (bbr->round_start)
		bbr->lt_round_count++;
	if (bbr->lt_round_count < BBR_LT_INTERVAL_MIN_ROUNDS)
		return;
	if (bbr->lt_round_count > 4 * BBR_LT_INTERVAL_MIN_ROUNDS) {
		bbr_lt_reset(sk);
		return;
	}
	/* Close the interval only on a loss. */
	if (!losses)
		return;

	lost = tp->lost - bbr->lt_last_lost;
	delivered = tp->delivered - bbr->lt_last_delivered;
	if (!delivered || ((u64)lost << BBR_SCALE) < (u64)BBR_LT_LOSS_THRESH * delivered)
		return;

	t_ms = (u32)(tp->delivered_mstamp / USEC_PER_MSEC) - bbr->lt_last_stamp_ms;
	if ((s32)t_ms < 1)
		return;
	if (t_ms >= ~0U / USEC_PER_MSEC) {
		bbr_lt_reset(sk);
		return;
	}
	bw = (u64)delivered * BW_UNIT / ((u64)t_ms * USEC_PER_MSEC);
	bbr_lt_interval_done(sk, (u32)bw);
}

/* ---- mode machinery ---------------------------------------------------- */

static __always_inline u32 bbr_now_us32(const struct tcp_sock *tp)
{
	return (u32)tp->delivered_mstamp;
}

static void bbr_advance_cycle_phase(struct sock *sk)
{
	struct bbr *bbr = bbr_of(sk);

	bbr->cycle_idx = (bbr->cycle_idx + 1) & (BBR_CYCLE_LEN - 1);
	bbr->cycle_start_us = bbr_now_us32(tcp_sk(sk));
}

static void bbr_reset_probe_bw(struct sock *sk)
{
	struct bbr *bbr = bbr_of(sk);

	bbr_set_mode(sk, BBR_PROBE_BW);
	bbr->cycle_idx = BBR_CYCLE_LEN - 1 - bpf_get_prandom_u32() % BBR_CYCLE_RAND;
	bbr_advance_cycle_phase(sk);
}

static void bbr_reset_mode(struct sock *sk)
{
	if (!bbr_of(sk)->full_bw_reached)
		bbr_set_mode(sk, BBR_STARTUP);
	else
		bbr_reset_probe_bw(sk);
}

/* Pacing gain of a PROBE_BW phase. */
static u32 bbr_probe_bw_gain(u32 phase, const struct ccctl_params *p)
{
	if (phase == 0)
		return bbr_param_probe_up_gain(p);
#ifndef CCCTL_MUTANT_NO_DRAIN_PHASE
	if (phase == 1)
		return BBR_PROBE_DOWN_GAIN;
#endif /* mutant (tests only): the cycle never drains what the probe queued */
	return BBR_UNIT;
}

/*
 * A phase lasts one min_rtt; the up-probe lasts until it has queued
 * gain x BDP (or seen loss), the down phase ends early once the queue is gone.
 */
static bool bbr_is_next_cycle_phase(struct sock *sk, const struct rate_sample *rs)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct bbr *bbr = bbr_of(sk);
	bool is_full_length = (u32)(bbr_now_us32(tp) - bbr->cycle_start_us) > bbr->min_rtt_us;
	u32 inflight, bw;

	if (bbr->pacing_gain == BBR_UNIT)
		return is_full_length;

	inflight = bbr_packets_in_net_at_edt(sk, rs->prior_in_flight);
	bw = bbr_max_bw(bbr);
	if (bbr->pacing_gain > BBR_UNIT)
		return is_full_length &&
		       (rs->losses || inflight >= bbr_inflight(sk, bw, bbr->pacing_gain));
	return is_full_length || inflight <= bbr_inflight(sk, bw, BBR_UNIT);
}

static void bbr_update_cycle_phase(struct sock *sk, const struct rate_sample *rs)
{
	if (bbr_of(sk)->mode == BBR_PROBE_BW && bbr_is_next_cycle_phase(sk, rs))
		bbr_advance_cycle_phase(sk);
}

static void bbr_check_probe_rtt_done(struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct bbr *bbr = bbr_of(sk);
	u32 now_ms = tcp_clock_ms(tp);

	if (!(bbr->probe_rtt_done_ms && after(now_ms, bbr->probe_rtt_done_ms)))
		return;
	bbr->min_rtt_stamp_ms = now_ms; /* min_rtt is fresh again */
	tcp_snd_cwnd_set(tp, max(tcp_snd_cwnd(tp), bbr->prior_cwnd));
	bbr_reset_mode(sk);
}

/* ---- updating the model on each ACK ------------------------------------ */

/*
 * Was this rate sample taken while the application (or PROBE_RTT) limited
 * the sending rate?  The rate sampler says so in rs->is_app_limited.  PROBE_RTT
 * adds its own mark by writing tp->app_limited, which the verifier refuses
 * before Linux 6.4; there we keep the mark it would have written in
 * bbr->probe_rtt_app_limited and apply the rate sampler's rule ourselves:
 * a packet is app-limited if it was sent while the mark was set, i.e. if
 * the tp->delivered it was sent at (the sample's prior_delivered) is not
 * after the mark.  The first sample sent later clears it.  Without this,
 * a PROBE_RTT longer than the 10-round btl_bw window (200 ms is thousands
 * of rounds at LAN RTTs) lets the 4-packet samples age the real maximum
 * out, and the flow leaves PROBE_RTT pacing at a fraction of the path.
 */
static bool bbr_sample_app_limited(struct sock *sk, const struct rate_sample *rs)
{
	struct bbr *bbr = bbr_of(sk);

	if (rs->is_app_limited)
		return true;
	if (!bbr->probe_rtt_app_limited)
		return false;
	if (after(rs->prior_delivered, bbr->probe_rtt_app_limited)) {
		bbr->probe_rtt_app_limited = 0;
		return false;
	}
	return true;
}

/* Round counting and the btl_bw max filter. */
static void bbr_update_bw(struct sock *sk, const struct rate_sample *rs)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct bbr *bbr = bbr_of(sk);
	bool app_limited;
	u64 bw;

	bbr->round_start = 0;
	if (rs->delivered < 0 || rs->interval_us <= 0)
		return; /* not a valid sample */

	/* A round ends when the packet sent at its start is delivered. */
	if (!before(rs->prior_delivered, bbr->next_round_delivered)) {
		bbr->next_round_delivered = tp->delivered;
		bbr->round_count++;
		bbr->round_start = 1;
		bbr->packet_conservation = 0;
	}

	app_limited = bbr_sample_app_limited(sk, rs);
	bbr_lt_sample(sk, rs->losses, app_limited);

	bw = (u64)rs->delivered * BW_UNIT / (u64)rs->interval_us;
	bw = min(bbr_hook_bw_sample(sk, rs, bw), (u64)~0U);
	/* App-limited samples underestimate; take them only if they raise the max. */
	if (!app_limited || bw >= bbr_max_bw(bbr))
		win_max_update(&bbr->btl_bw, BBR_BW_WINDOW_ROUNDS, bbr->round_count, (u32)bw);
}

/*
 * ACK aggregation: how much more was (S)ACKed in this epoch than btl_bw
 * explains.  The max over two 5-round half-windows is added to cwnd.
 */
static void bbr_update_ack_aggregation(struct sock *sk, const struct rate_sample *rs)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct bbr *bbr = bbr_of(sk);
	u32 epoch_us, expected_acked, extra_acked, cur;

	if (rs->acked_sacked == 0 || rs->delivered < 0 || rs->interval_us <= 0)
		return;

	if (bbr->round_start) {
		bbr->extra_acked_win_rounds = min(0x1F, bbr->extra_acked_win_rounds + 1);
		if (bbr->extra_acked_win_rounds >= BBR_EXTRA_ACKED_WINDOW_ROUNDS) {
			bbr->extra_acked_win_rounds = 0;
			bbr->extra_acked_win_idx = !bbr->extra_acked_win_idx;
			if (bbr->extra_acked_win_idx)
				bbr->extra_acked_1 = 0;
			else
				bbr->extra_acked_0 = 0;
		}
	}

	epoch_us = bbr_now_us32(tp) - bbr->ack_epoch_start_us;
	expected_acked = (u32)((u64)bbr_bw(bbr) * epoch_us / BW_UNIT);

	/* Restart the epoch when ACKs fall behind the model, or the counter gets large. */
	if (bbr->ack_epoch_acked <= expected_acked ||
	    bbr->ack_epoch_acked + rs->acked_sacked >= BBR_ACK_EPOCH_RESET_THRESH) {
		bbr->ack_epoch_acked = 0;
		bbr->ack_epoch_start_us = bbr_now_us32(tp);
		expected_acked = 0;
	}

	bbr->ack_epoch_acked = min(0xFFFFFU, bbr->ack_epoch_acked + rs->acked_sacked);
	extra_acked = bbr->ack_epoch_acked - expected_acked;
	extra_acked = min(extra_acked, tcp_snd_cwnd(tp));
	extra_acked = min(extra_acked, 0xFFFFU);
	cur = bbr->extra_acked_win_idx ? bbr->extra_acked_1 : bbr->extra_acked_0;
	if (extra_acked > cur) {
		if (bbr->extra_acked_win_idx)
			bbr->extra_acked_1 = extra_acked;
		else
			bbr->extra_acked_0 = extra_acked;
	}
}

/* STARTUP ends when btl_bw stops growing by 25 % per round for 3 rounds. */
static void bbr_check_full_bw_reached(struct sock *sk, const struct rate_sample *rs)
{
	struct bbr *bbr = bbr_of(sk);
	u32 bw_thresh;

	if (bbr->full_bw_reached || !bbr->round_start || bbr_sample_app_limited(sk, rs))
		return;

	bw_thresh = (u32)(((u64)bbr->full_bw * BBR_FULL_BW_THRESH) >> BBR_SCALE);
	if (bbr_max_bw(bbr) >= bw_thresh) {
		bbr->full_bw = bbr_max_bw(bbr);
		bbr->full_bw_count = 0;
		return;
	}
	++bbr->full_bw_count;
	bbr->full_bw_reached = bbr->full_bw_count >= BBR_FULL_BW_ROUNDS;
}

/* STARTUP -> DRAIN -> PROBE_BW once the queue is down to one BDP. */
static void bbr_check_drain(struct sock *sk, const struct rate_sample *rs)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct bbr *bbr = bbr_of(sk);

	if (bbr->mode == BBR_STARTUP && bbr->full_bw_reached) {
		bbr_set_mode(sk, BBR_DRAIN);
		/* Leave slow start for good: ssthresh = one BDP. */
		tp->snd_ssthresh = bbr_inflight(sk, bbr_max_bw(bbr), BBR_UNIT);
	}
	if (bbr->mode == BBR_DRAIN &&
	    bbr_packets_in_net_at_edt(sk, tcp_packets_in_flight(tp)) <=
		    bbr_inflight(sk, bbr_max_bw(bbr), BBR_UNIT))
		bbr_reset_probe_bw(sk);
}

/*
 * min_rtt filter and PROBE_RTT.  When min_rtt is 10 s old, hold the window
 * at 4 packets for 200 ms and one round, then restore it.
 */
static void bbr_update_min_rtt(struct sock *sk, const struct rate_sample *rs)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct bbr *bbr = bbr_of(sk);
	u32 now_ms = tcp_clock_ms(tp);
	bool filter_expired = after(now_ms, bbr->min_rtt_stamp_ms + BBR_MIN_RTT_WINDOW_MS);
	u32 inflight;

	if (rs->rtt_us >= 0 &&
	    ((u64)rs->rtt_us < bbr->min_rtt_us || (filter_expired && !rs->is_ack_delayed))) {
		bbr->min_rtt_us = (u32)rs->rtt_us;
		bbr->min_rtt_stamp_ms = now_ms;
	}

	if (filter_expired && !bbr->idle_restart && bbr->mode != BBR_PROBE_RTT) {
		bbr_set_mode(sk, BBR_PROBE_RTT);
		bbr_save_cwnd(sk);
		bbr->probe_rtt_done_ms = 0;
	}

	if (bbr->mode == BBR_PROBE_RTT) {
		inflight = tcp_packets_in_flight(tp);
		/*
		 * Mark the flow app-limited so bandwidth samples taken at the tiny
		 * window do not count.  Kernels before 6.4 refuse this write; there
		 * we keep the mark ourselves (bbr_sample_app_limited()).
		 */
		if (kernel_can(CCCTL_KF_APP_LIMITED_WRITE))
			tp->app_limited = (tp->delivered + inflight) ?: 1;
		else
			bbr->probe_rtt_app_limited = (tp->delivered + inflight) ?: 1;
		if (!bbr->probe_rtt_done_ms && inflight <= BBR_CWND_MIN_TARGET) {
			bbr->probe_rtt_done_ms = (now_ms + BBR_PROBE_RTT_MS) ?: 1;
			bbr->probe_rtt_round_done = 0;
			bbr->next_round_delivered = tp->delivered;
		} else if (bbr->probe_rtt_done_ms) {
			if (bbr->round_start)
				bbr->probe_rtt_round_done = 1;
			if (bbr->probe_rtt_round_done)
				bbr_check_probe_rtt_done(sk);
		}
	}
	if (rs->delivered > 0)
		bbr->idle_restart = 0;
}

static void bbr_update_gains(struct sock *sk, const struct ccctl_params *p)
{
	struct bbr *bbr = bbr_of(sk);

	switch (bbr->mode) {
	case BBR_STARTUP:
		bbr->pacing_gain = BBR_HIGH_GAIN;
		bbr->cwnd_gain = BBR_HIGH_GAIN;
		break;
	case BBR_DRAIN:
		bbr->pacing_gain = BBR_DRAIN_GAIN; /* slow, to drain */
		bbr->cwnd_gain = BBR_HIGH_GAIN;    /* keep cwnd */
		break;
	case BBR_PROBE_BW:
		bbr->pacing_gain = bbr->lt_use_bw ? BBR_UNIT : bbr_probe_bw_gain(bbr->cycle_idx, p);
		bbr->cwnd_gain = bbr_param_cwnd_gain(p);
		break;
	case BBR_PROBE_RTT:
		bbr->pacing_gain = BBR_UNIT;
		bbr->cwnd_gain = BBR_UNIT;
		break;
	}
}

static void bbr_update_model(struct sock *sk, const struct rate_sample *rs,
			     const struct ccctl_params *p)
{
	bbr_update_bw(sk, rs);
	bbr_update_ack_aggregation(sk, rs);
	bbr_update_cycle_phase(sk, rs);
	bbr_check_full_bw_reached(sk, rs);
	bbr_check_drain(sk, rs);
	bbr_update_min_rtt(sk, rs);
	bbr_update_gains(sk, p);
}

/* ---- cwnd -------------------------------------------------------------- */

/*
 * Loss recovery: the first round of Recovery follows packet conservation
 * (send one packet per packet delivered); leaving Recovery or Loss restores
 * the window saved on entry.  Returns true if conservation decides cwnd.
 */
static bool bbr_cwnd_in_recovery(struct sock *sk, const struct rate_sample *rs,
				 u32 acked, u32 *new_cwnd)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct bbr *bbr = bbr_of(sk);
	u8 prev_state = bbr->prev_ca_state, state = tcp_ca_state(sk);
	u32 cwnd = tcp_snd_cwnd(tp);

	/* Packets newly marked lost have left the network: take them out of cwnd. */
	if (rs->losses > 0)
		cwnd = (u32)max((s32)cwnd - rs->losses, 1);

	if (state == TCP_CA_Recovery && prev_state != TCP_CA_Recovery) {
		bbr->packet_conservation = 1;
		bbr->next_round_delivered = tp->delivered; /* conservation lasts one round */
		cwnd = tcp_packets_in_flight(tp) + acked;
	} else if (prev_state >= TCP_CA_Recovery && state < TCP_CA_Recovery) {
		cwnd = max(cwnd, bbr->prior_cwnd);
		bbr->packet_conservation = 0;
	}
	bbr->prev_ca_state = state;

	if (bbr->packet_conservation) {
		*new_cwnd = max(cwnd, tcp_packets_in_flight(tp) + acked);
		return true;
	}
	*new_cwnd = cwnd;
	return false;
}

/*
 * cwnd = gain x BDP + ACK-aggregation allowance + quantization budget,
 * approached by growing with each ACK (never jumping up), reached at once
 * going down; at least 4 packets; 4 packets flat in PROBE_RTT.
 */
static void bbr_set_cwnd(struct sock *sk, const struct rate_sample *rs,
			 u32 acked, u32 bw, u32 gain, void *v)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct bbr *bbr = bbr_of(sk);
	u32 cwnd = tcp_snd_cwnd(tp), target;

	if (!acked)
		goto done;
	if (bbr_cwnd_in_recovery(sk, rs, acked, &cwnd))
		goto done;

	target = bbr_bdp(sk, bw, gain);
	target += bbr_ack_aggregation_cwnd(sk);
	target = bbr_quantization_budget(sk, target);

	if (bbr->full_bw_reached)
		cwnd = min(cwnd + acked, target);
	else if (cwnd < target || tp->delivered < TCP_INIT_CWND)
		cwnd = cwnd + acked; /* STARTUP: grow like slow start */
	cwnd = max(cwnd, (u32)BBR_CWND_MIN_TARGET);
	cwnd = bbr_hook_cwnd(sk, rs, cwnd, v);
done:
	cwnd = min(cwnd, tp->snd_cwnd_clamp);
#ifndef CCCTL_MUTANT_PROBE_RTT_KEEPS_CWND
	if (bbr->mode == BBR_PROBE_RTT)
		cwnd = min(cwnd, (u32)BBR_CWND_MIN_TARGET);
#endif /* mutant (tests only): PROBE_RTT that keeps its window */
	tcp_snd_cwnd_set(tp, cwnd);
}

/* ---- per-ACK trace ------------------------------------------------------ */

/* One event per ACK when tracing is on (see ccctl_trace.h): the common TCP
 * state, BBR's model and gains, then whatever the variant adds.  pacing_gain
 * and cwnd_gain are the gains this ACK's pacing rate and cwnd target were set
 * with, after the variant's hooks (Modest BBR scales BBR's pacing gain by its
 * searched proportion; patched BBR divides it by Θ and adds alpha to the cwnd
 * gain). */
static __always_inline void bbr_trace(struct sock *sk, const struct rate_sample *rs, u32 bw,
				      u32 pacing_gain, u32 cwnd_gain, const struct ccctl_params *p,
				      void *v)
{
	struct bbr *bbr = bbr_of(sk);
	struct ccctl_event *e;

	e = ccctl_trace_begin(sk, rs, CCCTL_ALGO_ID, 0);
	if (!e)
		return;
	e->param_version = p->version;
	e->param_digest = ccctl_params_digest(p);
	e->bbr_mode = bbr->mode;
	e->pacing_gain = pacing_gain;
	e->cwnd_gain = cwnd_gain;
	/* packets/us << BW_SCALE -> bytes/s, without the pacing margin */
	e->btl_bw = ((u64)bw * tcp_sk(sk)->mss_cache * USEC_PER_SEC) >> BW_SCALE;
	e->bbr_min_rtt_us = bbr->min_rtt_us;
	e->bbr_lt_use_bw = bbr->lt_use_bw;
	e->bbr_min_rtt_age_ms = tcp_clock_ms(tcp_sk(sk)) - bbr->min_rtt_stamp_ms;
	bbr_hook_trace(sk, e, v);
	ccctl_trace_commit(e);
}

/* ---- the congestion-control callbacks ---------------------------------- */

static __always_inline void bbr_main(struct sock *sk, const struct rate_sample *rs)
{
	struct bbr *bbr = bbr_of(sk);
	struct ccctl_params p;
	u32 bw, pacing_gain, cwnd_gain;
	void *v;

	ccctl_params_read(&p); /* the one set this ACK acts on */
	bbr_update_model(sk, rs, &p);
	v = bbr_hook_after_model(sk, rs, &p);

	bw = bbr_hook_bw(sk, bbr_bw(bbr), v);
	pacing_gain = bbr_hook_pacing_gain(sk, bbr->pacing_gain, v);
	cwnd_gain = bbr_hook_cwnd_gain(sk, bbr->cwnd_gain, v);
	bbr_set_pacing_rate(sk, bw, pacing_gain);
	bbr_set_cwnd(sk, rs, rs->acked_sacked, bw, cwnd_gain, v);
	bbr_trace(sk, rs, bw, pacing_gain, cwnd_gain, &p, v);
}

CCCTL_CONG_CONTROL(bbr_cong_control, bbr_main);

SEC("struct_ops")
void BPF_PROG(bbr_init, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct bbr *bbr = bbr_of(sk);

	/* Test hook: a write the verifier must refuse (see CCCTL_FAULT_VERIFIER). */
	if (fault_injected(CCCTL_FAULT_VERIFIER))
		tp->snd_una = 0;

	__builtin_memset(bbr, 0, sizeof(*bbr));
	tp->snd_ssthresh = TCP_INFINITE_SSTHRESH;
	bbr->next_round_delivered = tp->delivered;
	bbr->prev_ca_state = TCP_CA_Open;
	bbr->min_rtt_us = tcp_min_rtt(tp);
	bbr->min_rtt_stamp_ms = tcp_clock_ms(tp);
	win_max_reset(&bbr->btl_bw, 0, 0);
	bbr_init_pacing_rate_from_rtt(sk);
	bbr_lt_reset(sk);
	bbr->mode = BBR_STARTUP;
	bbr->pacing_gain = BBR_HIGH_GAIN;
	bbr->cwnd_gain = BBR_HIGH_GAIN;
	bbr->ack_epoch_start_us = (u32)tp->tcp_mstamp;

	/* BBR needs pacing; without fq the TCP stack paces itself. */
	if (sk->sk_pacing_status == SK_PACING_NONE)
		sk->sk_pacing_status = SK_PACING_NEEDED;

	bbr_hook_init(sk);
}

SEC("struct_ops")
void BPF_PROG(bbr_release, struct sock *sk)
{
	bbr_hook_release(sk);
}

SEC("struct_ops")
u32 BPF_PROG(bbr_min_tso_segs_cb, struct sock *sk)
{
	return bbr_min_tso_segs(sk);
}

/* Sending resumes after idle: restart pacing at 1.0 x btl_bw, not a probe gain. */
SEC("struct_ops")
void BPF_PROG(bbr_cwnd_event, struct sock *sk, enum tcp_ca_event event)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct bbr *bbr = bbr_of(sk);

	if (event != CA_EVENT_TX_START || !tp->app_limited)
		return;
	bbr->idle_restart = 1;
	bbr->ack_epoch_start_us = (u32)tp->tcp_mstamp;
	bbr->ack_epoch_acked = 0;
	if (bbr->mode == BBR_PROBE_BW)
		bbr_set_pacing_rate(sk, bbr_bw(bbr), BBR_UNIT);
	else if (bbr->mode == BBR_PROBE_RTT)
		bbr_check_probe_rtt_done(sk);
}

/* Entering loss recovery: remember cwnd; BBR does not use ssthresh. */
SEC("struct_ops")
u32 BPF_PROG(bbr_ssthresh, struct sock *sk)
{
	bbr_save_cwnd(sk);
	return tcp_sk(sk)->snd_ssthresh;
}

/* A spurious loss was undone: forget what it taught us. */
SEC("struct_ops")
u32 BPF_PROG(bbr_undo_cwnd, struct sock *sk)
{
	struct bbr *bbr = bbr_of(sk);

	bbr->full_bw = 0;
	bbr->full_bw_count = 0;
	bbr_lt_reset(sk);
	bbr_hook_undo(sk);
	return tcp_snd_cwnd(tcp_sk(sk));
}

/* An RTO: the long-term sampler counts it as a loss; STARTUP's growth check restarts. */
SEC("struct_ops")
void BPF_PROG(bbr_set_state, struct sock *sk, u8 new_state)
{
	struct bbr *bbr = bbr_of(sk);

	if (new_state != TCP_CA_Loss)
		return;
	bbr->prev_ca_state = TCP_CA_Loss;
	bbr->full_bw = 0;
	bbr->round_start = 1;
	bbr_lt_sample(sk, 1, false);
}

/* Socket buffer: 3 x cwnd, room for the 2x cwnd gain plus retransmits. */
SEC("struct_ops")
u32 BPF_PROG(bbr_sndbuf_expand, struct sock *sk)
{
	return 3;
}

/* Register the core's callbacks under a kernel name (see CCCTL_STRUCT_OPS). */
#define BBR_STRUCT_OPS(ca_name)                                       \
	CCCTL_STRUCT_OPS(ca_name, bbr_cong_control, bbr_cong_control_pre610, \
			 .init = (void *)bbr_init,                    \
			 .release = (void *)bbr_release,              \
			 .ssthresh = (void *)bbr_ssthresh,            \
			 .undo_cwnd = (void *)bbr_undo_cwnd,          \
			 .cwnd_event = (void *)bbr_cwnd_event,        \
			 .set_state = (void *)bbr_set_state,          \
			 .sndbuf_expand = (void *)bbr_sndbuf_expand,  \
			 .min_tso_segs = (void *)bbr_min_tso_segs_cb, )

#endif /* __CCCTL_BBR_CORE_H */

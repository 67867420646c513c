// SPDX-License-Identifier: GPL-2.0
/*
 * dstar: TCP D* (Lynn and Ghosal), a congestion-window-first
 * congestion control that keeps BBR's goal (the delivery rate at its
 * maximum, the RTT at its minimum) but controls the window, not the rate.
 *
 * The model (Sec. 3.1)
 * --------------------
 * For flow i through a bottleneck shared by N flows:
 *
 *   (1) delivery_rate_i = d delivered_i / dt
 *   (2) BDP_i           = delivery_rate_i x min_rtt_i
 *   (3) RTT_i          >= min_rtt_i
 *   (4) RTT_i           = min_rtt_i + sum_j (inflight_j - BDP_j) / sum_j delivery_rate_j
 *   (5) sum_j BDP_j    <= sum_j inflight_j
 *
 * Data in flight beyond the BDP cannot be delivered any faster; it waits in
 * the bottleneck queue and only adds delay (4).  The best window is the
 * largest one still equal to the BDP: then the delivery rate is at its
 * maximum and RTT = min_rtt.  Because the window maps linearly onto the
 * queue (unlike a pacing rate near the bottleneck rate), D* sets the window
 * and leaves pacing unlimited (Sec. 3.2: sk_pacing_rate = ~0 at init; 0
 * would make TCP Small Queues hold two packets and fq hold them for a
 * second).
 *
 * To see whether the pipe has room it must send a little more than the
 * BDP: snd_cwnd = BDP + gain_cwnd.  The probe gain_cwnd follows the
 * estimate's own noise (Sec. 3.2.4):
 *
 *   sigma    = |BDP - last_BDP|
 *   gain_cwnd = floor + min(factor x sigma, BDP), kept in [floor, BDP]
 *
 * (floor 4 packets, factor 2).  While bandwidth is being gained, sigma is
 * the last gain, so the gain doubles every cycle; in steady state it shrinks
 * to the noise of the estimate, about the same for every flow, which is
 * what makes flows fair without a multiplicative increase.
 *
 * Fig. 1, mode by mode (dstar_cycle below; "RTT" is the latest RTT
 * sample, mode lengths are tunable, defaults the paper's):
 *
 *   every ACK  min_rtt = min(min_rtt, RTT)                 dstar_update_min_rtt
 *   DRAIN      window 4 (set on entry) for > 2 RTT, so the queue empties and
 *              min_rtt is re-measured; then window = BDP + gain_cwnd, GAIN 1
 *   GAIN 1     > 2 RTT for the pipe to settle at the new window (no
 *              measuring: right after a change the rate over- or
 *              under-shoots); then start counting delivered packets, GAIN 2
 *   GAIN 2     > 1 RTT; then eq. 1 (delivered / time in GAIN 2) and eq. 2
 *              give a new BDP, sigma and gain_cwnd; if min_rtt was not
 *              refreshed for 10 s: window = 4, min_rtt = RTT, DRAIN;
 *              else window = BDP + gain_cwnd, GAIN 1     dstar_end_gain2
 *
 * Slow start (Sec. 3.3) is the same cycle without DRAIN and with
 * gain_cwnd = max(floor, BDP / 2) (eq. 6), so each GAIN 2 grows the window
 * to 1.5 x the BDP it measured.  It is entered when the connection starts
 * and after an RTO or an idle period, and ends on a loss, an ECN CE echo
 * (both reach us through ssthresh, or as rs->losses; after a restart only
 * for data sent since, reading 11) or when a GAIN 2 finds a BDP no larger
 * than the one before.  D* then runs DRAIN first.
 *
 * Units: windows, BDP, sigma and gain_cwnd in packets; times in us from
 * tp->tcp_mstamp (the same CLOCK_MONOTONIC as bpf_ktime_get_ns); the
 * delivery rate in bytes/s.  delivered x min_rtt is a 64-bit product.
 *
 * Departures and readings (the paper is silent; we decided as the authors'
 * module, lambda-11235/tcp_davis, most likely would have, except where
 * noted)
 * --------------------------------------------------------------------
 *  1. Losses: in congestion avoidance D* does not react to loss at all; the
 *     window stays BDP + gain_cwnd through fast recovery (the module does
 *     the same, and Fig. 1 has no loss input).  With cong_control the
 *     kernel does no PRR, so the window is exactly what Fig. 1 says.
 *     In slow start a loss or CE ends it, as Sec. 3.3 says; the public
 *     module ignores losses there too and never ends slow start on one:
 *     we follow the paper.
 *  2. Undo: nothing to undo, the window never moved for the loss.  A
 *     spurious loss that ended slow start is not undone (slow start is
 *     not resumed); only the growth rate suffers, gain_cwnd still doubles
 *     while the BDP grows.
 *  3. ssthresh: unused by the algorithm, but kept true so that ss -ti and
 *     tcp_in_slow_start() (cwnd < ssthresh) tell the truth: "infinite" in
 *     slow start; outside it the BDP estimate capped by the window D* set,
 *     clamp(BDP, 4, cwnd), written again on every ACK (the kernel's undo
 *     may restore an older, larger value).  So DRAIN's window 4 has
 *     ssthresh 4, and no DRAIN or GAIN is "slow start".  The ssthresh
 *     callback returns that value.
 *  4. Which RTT: Fig. 1's mode timers and its min-RTT input use the latest
 *     RTT sample (rs->rtt_us), as the module does (lambda-11235/tcp_davis at
 *     86c3ada, May 2020: its last_rtt is rs->rtt_us; srtt only in its
 *     April 2020 commits 736a35a-eccbd6b, reverted by ece6a25, and as a
 *     fallback for samples under one jiffy in its later 7570ec2); before
 *     the first sample, srtt, or 1 ms.  min_rtt is D*'s own minimum with
 *     Fig. 1's expiry, not the kernel's 5-minute filter.  A sample equal
 *     to min_rtt refreshes its timestamp (the min was "updated").
 *  5. Eq. 1's interval is the time since GAIN 2 began (Fig. 1), measured on
 *     the ACK clock; BDP is rounded to the nearest packet.
 *  6. Windows: never below 4 packets (DRAIN's window, the minimum for
 *     feedback), never above snd_cwnd_clamp.  When BDP < floor, the floor
 *     wins over Sec. 3.2.4's upper bound BDP.
 *  7. Start: the first cycle runs on the kernel's initial window (10,
 *     RFC 6928) with no BDP estimate yet (0); after an RTO or an idle
 *     restart (reading 9), slow start begins again from 4 packets, the
 *     module's MIN_CWND.  The module (86c3ada, and its last commit
 *     7570ec2) registers neither set_state nor cwnd_event.  After an RTO
 *     only the kernel's window of in-flight + 1, below the module's
 *     ssthresh, sends its cong_control down the slow-start branch, which
 *     re-enters slow start (GAIN 1, window 4) only from DRAIN.  It has no
 *     idle restart: its tcp_davis_cwnd_event (slow start on
 *     CA_EVENT_CWND_RESTART) is defined but never registered, and the
 *     kernel does not send that event to cong_control algorithms anyway.
 *     The idle restart is ours: Sec. 3.3 "restarted", by the kernel's rule
 *     for every other algorithm (reading 9).
 *  8. Leaving slow start, gain_cwnd restarts at its floor: eq. 6 is for
 *     growing, and Fig. 1 sets it again at the next GAIN 2.  The slow
 *     start exit's DRAIN does not reset min_rtt (the timeout path does).
 *  9. Idle restart: cong_control algorithms never get CA_EVENT_CWND_RESTART,
 *     so at CA_EVENT_TX_START (nothing in flight) we apply the kernel's own
 *     test (tcp_slow_start_after_idle_check): only if the socket's netns
 *     has net.ipv4.tcp_slow_start_after_idle set, and idle for more than
 *     one RTO since the last data sent.  With the sysctl 0, no restart.
 * 10. Mode lengths are whole RTTs (tunable 1 to 16); "> k RTT" is strict.
 * 11. Whose loss: a restart (RTO or idle) records snd_nxt, and until
 *     snd_una reaches it a loss or CE signal does not end slow start.
 *     Such a signal is about the window before the restart: the packets an
 *     RTO leaves unmarked (RACK: sent too recently) are marked lost on the
 *     next ACKs, and would end the new slow start at once with BDP 0 and
 *     cwnd 4.  It is the kernel's own "once per window" rule (an RTO's Loss
 *     state lasts until snd_una passes high_seq, the same snd_nxt).  A rate
 *     sample does not say which packet was lost, so a retransmission of
 *     that window lost again in the meantime is not counted either (a
 *     second RTO restarts slow start anyway).  From then on, a loss (of
 *     data sent after the restart) ends slow start as Sec. 3.3 says.  At
 *     the connection's start snd_una == snd_nxt: every loss counts.
 *
 * Parameters come from the params map (ccctl tune dstar), clamped on read:
 * min-RTT window in ms, deviation factor x 256, gain floor in packets, and
 * the three mode lengths in RTTs.  The per-socket state fits icsk_ca_priv.
 */
#include "ccctl_common.h"
#include "ccctl_trace.h"

/* ---- constants, with their units and reasons -------------------------- */

/* Window in DRAIN and after a min-RTT timeout, packets: "all but the minimum
 * number of packets necessary for feedback" (Sec. 3.2.1), 2 delayed ACKs. */
#define DSTAR_MIN_CWND 4
/* The tunables (min-RTT window, Fig. 1's 10 s; deviation factor, Fig. 1's
 * 2; gain_cwnd floor, Sec. 3.2.4's 4; mode lengths, Fig. 1's 2, 2 and 1
 * RTTs): defaults and bounds, with their reasons, in ccctl_abi.h's
 * CCCTL_PARAMS.  The deviation factor is x DSTAR_FACTOR_UNIT. */
#define DSTAR_FACTOR_SCALE 8
#define DSTAR_FACTOR_UNIT (1U << DSTAR_FACTOR_SCALE) /* = CCCTL_GAIN_UNIT */
#define DSTAR_GAIN_FLOOR CCCTL_PARAM_DEFAULT(dstar_gain_floor)
/* RTT assumed before any sample or srtt, us. */
#define DSTAR_RTT_UNKNOWN_US USEC_PER_MSEC

enum dstar_mode {
	DSTAR_DRAIN = CCCTL_DSTAR_DRAIN,
	DSTAR_GAIN1 = CCCTL_DSTAR_GAIN1,
	DSTAR_GAIN2 = CCCTL_DSTAR_GAIN2,
};

/* ---- per-socket state: fits icsk_ca_priv (104 bytes) -------------------- */

struct dstar {
	u64 mode_stamp_us;    /* tcp_mstamp when the current mode began */
	u64 min_rtt_stamp_us; /* tcp_mstamp when min_rtt_us was last refreshed */
	u64 delivery_rate;    /* bytes/s, eq. 1 at the last GAIN 2 (trace only) */
	u32 min_rtt_us;       /* Fig. 1's min RTT; ~0U until the first sample */
	u32 rtt_us;           /* latest RTT sample */
	u32 bdp;              /* packets, eq. 2 */
	u32 last_bdp;         /* packets, the estimate before bdp */
	u32 sigma;            /* packets, |bdp - last_bdp| */
	u32 gain_cwnd;        /* packets above the BDP */
	u32 cwnd;             /* packets: the window Fig. 1 set last */
	u32 delivered_start;  /* tp->delivered when GAIN 2 began */
	u32 restart_seq;      /* tp->snd_nxt when slow start was (re)entered */
	u8 mode;              /* enum dstar_mode */
	u8 slow_start;        /* Sec. 3.3 */
};

_Static_assert(sizeof(struct dstar) <= sizeof(((struct inet_connection_sock *)0)->icsk_ca_priv),
	       "struct dstar must fit icsk_ca_priv");

static __always_inline struct dstar *dstar_of(const struct sock *sk)
{
	return (struct dstar *)inet_csk_ca(sk);
}

/*
 * net.ipv4.tcp_slow_start_after_idle of the socket's namespace, read as the
 * kernel reads it: sock_net(sk)->ipv4.sysctl_tcp_slow_start_after_idle (a
 * u8 in both 6.1 and 6.18).  kernel_types.h has no struct net, so these
 * "___dstar" flavours name just the path; libbpf drops the suffix and
 * relocates every offset against the running kernel's BTF (CO-RE).
 */
struct netns_ipv4___dstar {
	u8 sysctl_tcp_slow_start_after_idle;
} __attribute__((preserve_access_index));

struct net___dstar {
	struct netns_ipv4___dstar ipv4;
} __attribute__((preserve_access_index));

struct sock_common___dstar {
	struct {
		struct net___dstar *net;
	} skc_net; /* possible_net_t */
} __attribute__((preserve_access_index));

struct sock___dstar {
	struct sock_common___dstar __sk_common;
} __attribute__((preserve_access_index));

/* The kernel's default (1) if this kernel has no such field. */
static __always_inline bool dstar_slow_start_after_idle(const struct sock *sk)
{
	const struct sock___dstar *s = (const void *)sk;
	struct net___dstar *net;

	if (!bpf_core_field_exists(struct netns_ipv4___dstar, sysctl_tcp_slow_start_after_idle))
		return true;
	net = s->__sk_common.skc_net.net;
	return net->ipv4.sysctl_tcp_slow_start_after_idle != 0;
}

/* ---- parameters, clamped on every read ---------------------------------- */

struct dstar_params {
	u32 min_rtt_win_ms;
	u32 sigma_factor; /* x DSTAR_FACTOR_UNIT */
	u32 gain_floor;   /* packets */
	u32 drain_rtts;
	u32 gain1_rtts;
	u32 gain2_rtts;
	u32 version;
};

static __always_inline struct dstar_params dstar_params(const struct ccctl_params *p)
{
	struct dstar_params d = {
		.version = p->version,
		.min_rtt_win_ms = ccctl_param(p, dstar_min_rtt_win_ms),
		.sigma_factor = ccctl_param(p, dstar_sigma_factor),
		.gain_floor = ccctl_param(p, dstar_gain_floor),
		.drain_rtts = ccctl_param(p, dstar_drain_rtts),
		.gain1_rtts = ccctl_param(p, dstar_gain1_rtts),
		.gain2_rtts = ccctl_param(p, dstar_gain2_rtts),
	};

	return d;
}

/* ---- the estimates ------------------------------------------------------ */

/* "RTT" of Fig. 1: the latest sample this ACK brought, else the last one. */
static __always_inline void dstar_update_rtt(struct sock *sk, struct dstar *ds,
					     const struct rate_sample *rs)
{
	u32 srtt = tcp_sk(sk)->srtt_us >> 3;

	if (rs->rtt_us > 0)
		ds->rtt_us = (u32)rs->rtt_us;
	else if (!ds->rtt_us)
		ds->rtt_us = srtt ? srtt : DSTAR_RTT_UNKNOWN_US;
}

/* Fig. 1's first line: min RTT = min(min RTT, RTT); equal counts as fresh. */
static __always_inline void dstar_update_min_rtt(struct dstar *ds, const struct rate_sample *rs, u64 now)
{
	if (rs->rtt_us > 0 && (u32)rs->rtt_us <= ds->min_rtt_us) {
		ds->min_rtt_us = (u32)rs->rtt_us;
		ds->min_rtt_stamp_us = now;
	}
}

/* min RTT for eq. 2: the latest RTT while no sample has set it yet. */
static __always_inline u32 dstar_min_rtt(const struct dstar *ds)
{
	return ds->min_rtt_us == ~0U ? ds->rtt_us : ds->min_rtt_us;
}

/* Has min RTT gone un-refreshed for longer than the window (Fig. 1, GAIN 2)? */
static __always_inline bool dstar_min_rtt_expired(const struct dstar *ds, u64 now,
						  const struct dstar_params *p)
{
#ifdef CCCTL_MUTANT_NO_MIN_RTT_TIMEOUT
	return false; /* mutant (tests only): min RTT never expires */
#endif
	return now - ds->min_rtt_stamp_us > (u64)p->min_rtt_win_ms * USEC_PER_MSEC;
}

/* Has the current mode lasted more than k RTTs ("> k . RTT" in Fig. 1)? */
static __always_inline bool dstar_mode_done(const struct dstar *ds, u64 now, u32 rtts)
{
	return now - ds->mode_stamp_us > (u64)rtts * ds->rtt_us;
}

/*
 * Eqs. 1 and 2 at the end of GAIN 2: delivered / time in GAIN 2 is the
 * delivery rate, times min RTT the BDP (packets, rounded; the product
 * delivered x min_rtt in 64 bits).  Returns false without a usable interval.
 */
static bool dstar_estimate_bdp(struct sock *sk, struct dstar *ds, u64 now)
{
	struct tcp_sock *tp = tcp_sk(sk);
	u64 interval_us = now - ds->mode_stamp_us;
	u64 delivered = (u32)(tp->delivered - ds->delivered_start);
	u64 bdp, rtt_us = dstar_min_rtt(ds);

	if (!interval_us)
		return false;
#ifdef CCCTL_MUTANT_BDP_FROM_LATEST_RTT
	rtt_us = ds->rtt_us; /* mutant (tests only): eq. 2 with the latest RTT sample */
#endif
	bdp = (delivered * rtt_us + interval_us / 2) / interval_us;
	ds->last_bdp = ds->bdp;
	ds->bdp = (u32)min(bdp, (u64)tp->snd_cwnd_clamp);
	ds->sigma = ds->bdp > ds->last_bdp ? ds->bdp - ds->last_bdp : ds->last_bdp - ds->bdp;
	ds->delivery_rate = delivered * USEC_PER_SEC / interval_us * tp->mss_cache;
	return true;
}

/* Sec. 3.2.4: gain_cwnd = floor + min(factor x sigma, BDP), kept in [floor, BDP]. */
static __always_inline u32 dstar_gain_cwnd(const struct dstar *ds, const struct dstar_params *p)
{
	u64 scaled = ((u64)ds->sigma * p->sigma_factor) >> DSTAR_FACTOR_SCALE;
	u64 gain = p->gain_floor + min(scaled, (u64)ds->bdp);

	gain = min(gain, (u64)ds->bdp);
	return (u32)max(gain, (u64)p->gain_floor);
}

/* Eq. 6, slow start: gain_cwnd = max(floor, BDP / 2). */
static __always_inline u32 dstar_slow_start_gain_cwnd(const struct dstar *ds, const struct dstar_params *p)
{
	return max(ds->bdp / 2, p->gain_floor);
}

/* ---- modes and window ----------------------------------------------------- */

static __always_inline void dstar_set_cwnd(struct sock *sk, struct dstar *ds, u32 cwnd)
{
	ds->cwnd = clamp_u32(cwnd, DSTAR_MIN_CWND, max(tcp_sk(sk)->snd_cwnd_clamp, (u32)DSTAR_MIN_CWND));
}

static __always_inline void dstar_enter(struct dstar *ds, u8 mode, u64 now)
{
	ds->mode = mode;
	ds->mode_stamp_us = now;
}

/*
 * Reading 3: "infinite" in slow start, else the BDP estimate capped by the
 * window (clamp(BDP, 4, cwnd)), so that cwnd < ssthresh exactly in slow start.
 */
static __always_inline u32 dstar_ssthresh_of(const struct dstar *ds)
{
	if (ds->slow_start)
		return TCP_INFINITE_SSTHRESH;
	return clamp_u32(ds->bdp, DSTAR_MIN_CWND, max(ds->cwnd, (u32)DSTAR_MIN_CWND));
}

/* Reading 11: does a loss or CE signal now end slow start?  Only once the
 * window outstanding at the last restart has been acknowledged. */
static __always_inline bool dstar_signal_counts(struct sock *sk, const struct dstar *ds)
{
#ifdef CCCTL_MUTANT_LOSS_IGNORED_IN_SLOW_START
	return false; /* mutant (tests only): no loss or CE ends slow start */
#endif
	return !before(tcp_sk(sk)->snd_una, ds->restart_seq);
}

/* Slow start (Sec. 3.3) from `cwnd`: GAIN 1 first, no BDP estimate yet. */
static void dstar_enter_slow_start(struct sock *sk, struct dstar *ds, u32 cwnd, u64 now)
{
	ds->slow_start = 1;
	ds->restart_seq = tcp_sk(sk)->snd_nxt;
	ds->bdp = 0;
	ds->last_bdp = 0;
	ds->sigma = 0;
	ds->gain_cwnd = DSTAR_GAIN_FLOOR;
	tcp_sk(sk)->snd_ssthresh = TCP_INFINITE_SSTHRESH;
	dstar_set_cwnd(sk, ds, cwnd);
	dstar_enter(ds, DSTAR_GAIN1, now);
}

/* Slow start is over (loss, CE or a BDP that stopped growing): DRAIN first. */
static void dstar_end_slow_start(struct sock *sk, struct dstar *ds, const struct dstar_params *p, u64 now)
{
	if (!ds->slow_start)
		return;
	ds->slow_start = 0;
	ds->gain_cwnd = p->gain_floor;
	dstar_set_cwnd(sk, ds, DSTAR_MIN_CWND);
	tcp_sk(sk)->snd_ssthresh = dstar_ssthresh_of(ds);
	dstar_enter(ds, DSTAR_DRAIN, now);
}

/* Fig. 1, GAIN 2's end: new BDP, sigma, gain_cwnd; DRAIN on min-RTT timeout. */
static void dstar_end_gain2(struct sock *sk, struct dstar *ds, const struct dstar_params *p, u64 now)
{
	if (!dstar_estimate_bdp(sk, ds, now))
		return;

	if (ds->slow_start) {
		if (ds->bdp > ds->last_bdp) {
			ds->gain_cwnd = dstar_slow_start_gain_cwnd(ds, p);
			dstar_set_cwnd(sk, ds, ds->bdp + ds->gain_cwnd);
			dstar_enter(ds, DSTAR_GAIN1, now);
		} else {
			dstar_end_slow_start(sk, ds, p, now);
		}
		return;
	}

	ds->gain_cwnd = dstar_gain_cwnd(ds, p);
	if (dstar_min_rtt_expired(ds, now, p)) {
		dstar_set_cwnd(sk, ds, DSTAR_MIN_CWND);
		ds->min_rtt_us = ds->rtt_us;
		ds->min_rtt_stamp_us = now;
		dstar_enter(ds, DSTAR_DRAIN, now);
	} else {
		dstar_set_cwnd(sk, ds, ds->bdp + ds->gain_cwnd);
		dstar_enter(ds, DSTAR_GAIN1, now);
	}
}

/* One pass of Fig. 1's loop, on every ACK. */
static void dstar_cycle(struct sock *sk, struct dstar *ds, const struct dstar_params *p, u64 now)
{
	switch (ds->mode) {
	case DSTAR_DRAIN:
		if (dstar_mode_done(ds, now, p->drain_rtts)) {
			dstar_set_cwnd(sk, ds, ds->bdp + ds->gain_cwnd);
			dstar_enter(ds, DSTAR_GAIN1, now);
		}
		break;
	case DSTAR_GAIN1:
		if (dstar_mode_done(ds, now, p->gain1_rtts)) {
			ds->delivered_start = tcp_sk(sk)->delivered;
			dstar_enter(ds, DSTAR_GAIN2, now);
		}
		break;
	case DSTAR_GAIN2:
		if (dstar_mode_done(ds, now, p->gain2_rtts))
			dstar_end_gain2(sk, ds, p, now);
		break;
	default: /* cannot happen; start over safely */
		dstar_set_cwnd(sk, ds, DSTAR_MIN_CWND);
		dstar_enter(ds, DSTAR_DRAIN, now);
		break;
	}
}

/* ---- per-ACK trace ---------------------------------------------------------- */

/* How long after the ACK's own time (tp->tcp_mstamp, what every timer of
 * Fig. 1 reads) its event is taken, us: a reader judging mode lengths from
 * ts_ns subtracts it to see the clock D* decided with (an emulated CPU can
 * stall between the two). 0 if the clocks disagree the other way round. */
static __always_inline u32 dstar_clock_lag_us(u64 event_ns, u64 mstamp_us)
{
	u64 event_us = event_ns / NSEC_PER_USEC;

	if (event_us <= mstamp_us)
		return 0;
	return event_us - mstamp_us > (u32)~0U ? (u32)~0U : event_us - mstamp_us;
}

static __always_inline void dstar_trace(struct sock *sk, const struct rate_sample *rs,
					const struct dstar *ds, const struct ccctl_params *params)
{
	struct ccctl_event *e = ccctl_trace_begin(sk, rs, CCCTL_ALGO_DSTAR, params->version);

	if (!e)
		return;
	e->param_digest = ccctl_params_digest(params);
	e->dstar_mode = ds->mode;
	e->dstar_slow_start = ds->slow_start;
	e->dstar_bdp = ds->bdp;
	e->dstar_last_bdp = ds->last_bdp;
	e->dstar_gain_cwnd = ds->gain_cwnd;
	e->dstar_sigma = ds->sigma;
	e->dstar_min_rtt_us = ds->min_rtt_us;
	e->dstar_rtt_us = ds->rtt_us;
	e->dstar_delivery_rate = ds->delivery_rate;
	e->dstar_min_rtt_stamp_ns = ds->min_rtt_stamp_us * NSEC_PER_USEC;
	e->dstar_clock_lag_us = dstar_clock_lag_us(e->ts_ns, tcp_sk(sk)->tcp_mstamp);
	ccctl_trace_commit(e);
}

/* ---- the congestion-control callbacks ------------------------------------- */

static __always_inline void dstar_main(struct sock *sk, const struct rate_sample *rs)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct dstar *ds = dstar_of(sk);
	struct ccctl_params params;
	struct dstar_params p;
	u64 now = tp->tcp_mstamp;

	ccctl_params_read(&params); /* the one set this ACK acts on */
	p = dstar_params(&params);
	dstar_update_rtt(sk, ds, rs);
	dstar_update_min_rtt(ds, rs, now);
	if (ds->slow_start && rs->losses > 0 && dstar_signal_counts(sk, ds))
		dstar_end_slow_start(sk, ds, &p, now);
	dstar_cycle(sk, ds, &p, now);
	tcp_snd_cwnd_set(tp, ds->cwnd);
	tp->snd_ssthresh = dstar_ssthresh_of(ds);
	dstar_trace(sk, rs, ds, &params);
}

CCCTL_CONG_CONTROL(dstar_cong_control, dstar_main);

SEC("struct_ops")
void BPF_PROG(dstar_init, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct dstar *ds = dstar_of(sk);
	u64 now = tp->tcp_mstamp;

	/* Test hook: a write the verifier must refuse (see CCCTL_FAULT_VERIFIER). */
	if (fault_injected(CCCTL_FAULT_VERIFIER))
		tp->snd_una = 0;

	__builtin_memset(ds, 0, sizeof(*ds));
	ds->min_rtt_us = ~0U;
	ds->min_rtt_stamp_us = now;
	/* Window first: pacing unlimited, so neither fq nor TSQ holds packets back. */
	sk->sk_pacing_rate = ~0UL;
	dstar_enter_slow_start(sk, ds, tcp_snd_cwnd(tp), now);
}

/* Loss recovery or a CE echo begins: slow start ends (Sec. 3.3; not for the
 * window before a restart, reading 11), nothing else; ssthresh per reading 3. */
SEC("struct_ops")
u32 BPF_PROG(dstar_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct dstar *ds = dstar_of(sk);
	struct ccctl_params params;
	struct dstar_params p;

	ccctl_params_read(&params);
	p = dstar_params(&params);
	if (dstar_signal_counts(sk, ds))
		dstar_end_slow_start(sk, ds, &p, tp->tcp_mstamp);
	return dstar_ssthresh_of(ds);
}

/* The window never moved for the loss: nothing to undo (reading 2). */
SEC("struct_ops")
u32 BPF_PROG(dstar_undo_cwnd, struct sock *sk)
{
	return tcp_snd_cwnd(tcp_sk(sk));
}

/* An RTO: slow start again from 4 packets (Sec. 3.3, reading 7). */
SEC("struct_ops")
void BPF_PROG(dstar_set_state, struct sock *sk, u8 new_state)
{
	struct tcp_sock *tp = tcp_sk(sk);

	if (new_state == TCP_CA_Loss)
		dstar_enter_slow_start(sk, dstar_of(sk), DSTAR_MIN_CWND, tp->tcp_mstamp);
}

/*
 * Sending starts with nothing in flight.  After more than one RTO of
 * silence since the last data sent, the path estimate is stale: slow start
 * again (the kernel's own restart test, which it skips for cong_control),
 * unless net.ipv4.tcp_slow_start_after_idle is 0 (reading 9).
 */
SEC("struct_ops")
void BPF_PROG(dstar_cwnd_event, struct sock *sk, enum tcp_ca_event event)
{
	struct tcp_sock *tp = tcp_sk(sk);
	s32 idle;

	if (event != CA_EVENT_TX_START)
		return;
	if (dstar_of(sk)->slow_start && !dstar_of(sk)->bdp)
		return; /* nothing learned yet, nothing stale */
	if (!dstar_slow_start_after_idle(sk))
		return;
	idle = (s32)((u32)bpf_jiffies64() - tp->lsndtime);
	if (idle > (s32)inet_csk(sk)->icsk_rto) {
		dstar_enter_slow_start(sk, dstar_of(sk), DSTAR_MIN_CWND, tp->tcp_mstamp);
		tcp_snd_cwnd_set(tp, dstar_of(sk)->cwnd);
	}
}

CCCTL_STRUCT_OPS("dstar", dstar_cong_control, dstar_cong_control_pre610,
		 .init = (void *)dstar_init,
		 .ssthresh = (void *)dstar_ssthresh,
		 .undo_cwnd = (void *)dstar_undo_cwnd,
		 .set_state = (void *)dstar_set_state,
		 .cwnd_event = (void *)dstar_cwnd_event, );

// SPDX-License-Identifier: GPL-2.0
/*
 * modest_bbr: Modest BBR (its paper's Sec. III), BBR v1 from the shared
 * core plus a loss-sensitive window search in PROBE_BW.
 *
 * The model
 * ---------
 * BBR ignores loss: in a shallow bottleneck buffer its 2 BDP window keeps
 * the buffer overflowing, it retransmits heavily and the loss-based flows
 * beside it (Cubic) back off again and again.  Modest BBR keeps BBR's
 * model (btl_bw, min_rtt, the modes) and, only in PROBE_BW, the steady
 * phase, uses retransmissions as a yes/no signal to find a *proportion* of
 * BBR's window that the path carries without loss (Alg. 1, in the style of
 * BIC's window search):
 *
 *   INACTIVE  the window is BBR's.  The first retransmission stores the
 *             window BBR keeps in flight, BtlBw x RTprop (see
 *             modest_bbr_window), as last_cwnd and starts the search between
 *               min_win = last_cwnd x W_min
 *               max_win = (last_cwnd x W_max + min_win) / 2
 *             at cwnd = max_win (with W_max = 1 this is Alg. 1 lines 3-6).
 *   BINARY    once per round trip, on "was there a retransmission in the
 *             round": yes -> max_win = midpoint, cwnd = max_win;
 *             no -> min_win = midpoint, cwnd = min_win.  When
 *             max_win - min_win <= S_min the search is done.
 *   LINEAR    cwnd grows by S_min per ACK up to last_cwnd x W_max; the next
 *             retransmission starts a new search from the window then.
 *             There, once quiet_rounds round trips have passed without
 *             a retransmission, and with no queue in the RTT, last_cwnd
 *             grows by S_min per round trip and cwnd stays at W_max of
 *             it, so a window taken at a bad moment cannot pin the flow.
 *
 * Sec. III-B's Proportion is in [W_min, W_max] everywhere: the search
 * starts at or below W_max x last_cwnd, its bounds only narrow, the linear
 * phase stops at W_max x last_cwnd, and a W_max tuned lower mid-search
 * takes effect on the next ACK.  Only BBR's 4-packet floor can sit above it
 * (last_cwnd x W_max below 4 packets).  BBR's own window is always an upper
 * bound too: cwnd = min(BBR's cwnd, the search's).
 *
 * Eq. 1: pacing rate = BtlBw x RTprop x Proportion.  The pacing gain is
 * scaled by the same proportion as the window (cwnd / last_cwnd), so
 * Modest BBR does not keep pacing at BBR's full rate behind a smaller
 * window.  Leaving PROBE_BW ends the search and restores last_cwnd (the
 * PROBE_RTT exit then restores it as BBR's saved window).
 *
 * Departures from Alg. 1 and eq. 1 as printed, and why (also in the
 * README's algorithm table):
 *   1. The window a proportion is taken of is the data BBR keeps in flight,
 *      BtlBw x RTprop (BDP at gain 1 plus its quantization budget), not
 *      tp's cwnd (BBR's 2 x BDP cap, seldom reached by a paced flow): over
 *      the cap the search changed nothing, 556 retransmissions to
 *      bpf_bbr's 319 on 20 Mbit/s, 40 ms, 0.25 BDP (modest_bbr_window).
 *   2. One search step per round trip, on the round's yes/no ("was there
 *      a retransmission in this round"), not one per ACK: per ACK, one
 *      loss episode would halve the window once per ACK of the round that
 *      reports it, and the search would end before the smaller window was
 *      ever tried.
 *   3. The round the search began in is skipped: its ACKs still carry the
 *      retransmissions of the loss that started the search, so its answer
 *      would always be "yes" whatever the new window does.
 *   4. Growth at the top (not in Alg. 1, which holds last_cwnd for good):
 *      after quiet_rounds round trips without a retransmission (default
 *      64) and with no queue, last_cwnd grows by S_min per round (LINEAR
 *      above, modest_linear); without it a flow stayed pinned at 4 of 10
 *      Mbit/s after one early loss.  The wait tells a flow alone on its
 *      path (no loss once its window is below the path's) from one beside
 *      a loss-based flow (a loss every few hundred ms), which Alg. 1's
 *      held last_cwnd was there to protect.  Measured in the VM (20
 *      Mbit/s, 40 ms, 0.25 BDP; README): with no wait Cubic got 2.4x
 *      beside Modest BBR what it gets beside bpf_bbr; after 64 rounds,
 *      7.6x, and a lone flow after a 15 % loss burst was back at the
 *      link in 3 s.
 *   5. "A retransmission" is tp->total_retrans changing since the previous
 *      ACK (every retransmitted segment, fast or RTO), the kernel's own
 *      counter a BPF program can read; Alg. 1 names no counter.
 *   6. Alg. 1 line 7 tests "bin_p = 0" for the branch that runs the binary
 *      search; its text says the search runs while bin_p = 1 (set on line
 *      2 to enter it, cleared on line 17 to leave it).  We implement the
 *      described behaviour: the search steps while in BINARY.
 *   7. Eq. 1 is applied as BBR's pacing gain x the proportion, so BBR's
 *      gain cycle (1.25, 0.75, 1, ...) goes on, scaled, rather than a flat
 *      BtlBw x Proportion.
 *   8. Leaving PROBE_BW (for PROBE_RTT) ends the search and hands BBR back
 *      last_cwnd; Alg. 1 does not say what a mode change does.
 *   9. W_max enters where Alg. 1 has 1: line 5's first midpoint is
 *      (last_cwnd x W_max + min_win) / 2 and line 20's linear phase stops
 *      at last_cwnd x W_max, not last_cwnd, so that Sec. III-B's
 *      "Proportion in [W_min, W_max]" holds (identical at the default 1).
 *  10. A loss episode the kernel undoes (DSACKs or timestamps show its
 *      retransmissions were spurious: the segments were reordered, not
 *      dropped) ends the search and hands BBR back last_cwnd
 *      (bbr_hook_undo), and its retransmissions never start one (the undo
 *      can come before the ACK on which Modest would see them).  Alg. 1
 *      reads every retransmission as congestion; on a path that reorders,
 *      that pinned a lone flow at BBR's 4-packet floor (veth, per-packet
 *      benchmark: 0.50x native bbr before, 1.00x after).
 *
 * Parameters come from the params map (ccctl tune): W_min, W_max (x 1024),
 * S_min (packets), and the BBR gains every BBR-based algorithm has; all
 * clamped on read (bounds in ccctl_abi.h's CCCTL_PARAMS).  The per-socket
 * search state does not fit beside struct bbr in icsk_ca_priv's 104 bytes
 * and lives in bpf_sk_storage, looked up once per ACK.
 */
#define CCCTL_ALGO_ID CCCTL_ALGO_MODEST_BBR
#include "bbr_core.h"

/* W_min and W_max are fractions x 1024 (CCCTL_W_UNIT).  Their defaults
 * (Sec. III-C: W_min 0.75, W_max 1, S_min 1 packet) and bounds, with the
 * reasons, are in ccctl_abi.h's CCCTL_PARAMS. */
#define MODEST_W_SCALE 10
_Static_assert((1U << MODEST_W_SCALE) == CCCTL_W_UNIT, "W_min/W_max scale");

/* quiet_rounds counts up to here and stays: above the parameter's bound. */
#define MODEST_QUIET_ROUNDS_MAX 0xffff
_Static_assert(MODEST_QUIET_ROUNDS_MAX > ccctl_param_hi_quiet_rounds, "quiet_rounds saturation");

/* Per-socket search state (bpf_sk_storage "modest_sk"). */
struct modest {
	u32 last_cwnd;     /* packets: BBR's window when the search began */
	u32 min_win;       /* packets: lower bound of the search */
	u32 max_win;       /* packets: upper bound of the search */
	u32 cwnd;          /* packets: the window the search puts in force */
	u32 retrans_seen;  /* tp->total_retrans at the previous ACK */
	u32 quiet_rounds;  /* round trips since the last retransmission (saturating) */
	u8 phase;          /* CCCTL_MODEST_* */
	u8 retrans_in_round; /* a retransmission was seen in this round */
	u8 skip_round;     /* the round the search began in is not feedback */
	u8 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct modest);
} modest_sk SEC(".maps");

/* The parameters in force, clamped so that 0 < W_min < W_max <= 1. */
struct modest_params {
	u32 w_min;
	u32 w_max;
	u32 s_min;
	u32 quiet_rounds;
};

static __always_inline struct modest_params modest_params(const struct ccctl_params *p)
{
	struct modest_params m;

	/* W_max leaves room for one W_min step below it; W_min stays below W_max. */
	m.w_max = clamp_u32(p->w_max, CCCTL_PARAM_LO(w_min) + 1, CCCTL_PARAM_HI(w_max));
	m.w_min = clamp_u32(p->w_min, CCCTL_PARAM_LO(w_min), m.w_max - 1);
	m.s_min = ccctl_param(p, s_min);
	m.quiet_rounds = ccctl_param(p, quiet_rounds);
	return m;
}

static __always_inline struct modest *modest_of(struct sock *sk, bool create)
{
	return bpf_sk_storage_get(&modest_sk, sk, NULL,
				  create ? BPF_SK_STORAGE_GET_F_CREATE : 0);
}

/* The search is in force: PROBE_BW and a phase other than INACTIVE. */
static __always_inline bool modest_active(struct sock *sk, const struct modest *m)
{
	return m && m->phase != CCCTL_MODEST_INACTIVE && bbr_of(sk)->mode == BBR_PROBE_BW;
}

/*
 * The window Alg. 1 searches a proportion of.  Sec. III-B: "in BBR's
 * implementation, the size of inflight packets is equal to BtlBw x RTprop",
 * and eq. 1 scales exactly that.  BBR's cwnd is a cap of cwnd_gain (2) x BDP
 * that a paced flow seldom reaches, so a search over [W_min, W_max] of the
 * cap changes nothing: our first version did that, and on 20 Mbit/s, 40 ms,
 * a 0.25 BDP buffer it retransmitted 556 times to bpf_bbr's 319, Cubic
 * beside it getting 1.8 Mbit/s instead of 2.5.  So Alg. 1's "cwnd" here is
 * the data BBR keeps in flight at gain 1 (BDP plus its quantization budget),
 * never more than the cwnd BBR holds: in loss recovery that is the window
 * BBR saved on entry (bbr_save_cwnd), as packet conservation has already
 * cut tp's.
 */
static __always_inline u32 modest_bbr_window(struct sock *sk)
{
	struct bbr *bbr = bbr_of(sk);
	u32 cwnd = tcp_snd_cwnd(tcp_sk(sk));

	if (tcp_ca_state(sk) >= TCP_CA_Recovery)
		cwnd = max(cwnd, bbr->prior_cwnd);
	return min(cwnd, bbr_inflight(sk, bbr_bw(bbr), BBR_UNIT));
}

/* Alg. 1 lines 1-6: the first retransmission starts a binary search.
 * Inlined: compiled as a subprogram, one build was refused by the 6.18
 * verifier ("cannot return stack pointer to the caller"). */
static __always_inline void modest_start_search(struct sock *sk, struct modest *m,
				const struct modest_params *p)
{
	u32 cwnd = max(modest_bbr_window(sk), (u32)BBR_CWND_MIN_TARGET);

#ifdef CCCTL_MUTANT_PROPORTION_OF_CAP
	/* mutant (tests only): the discarded first version, a proportion of
	 * BBR's cwnd cap (cwnd_gain x BDP) instead of the window in force */
	cwnd = bbr_quantization_budget(sk, bbr_bdp(sk, bbr_bw(bbr_of(sk)), bbr_of(sk)->cwnd_gain));
#endif

	m->phase = CCCTL_MODEST_BINARY;
	m->last_cwnd = cwnd;
	m->min_win = max((cwnd * p->w_min) >> MODEST_W_SCALE, (u32)BBR_CWND_MIN_TARGET);
	m->max_win = max((((cwnd * p->w_max) >> MODEST_W_SCALE) + m->min_win) / 2, m->min_win);
	m->cwnd = m->max_win;
	m->retrans_in_round = 0;
	m->skip_round = 1;
}

/* Alg. 1 lines 8-18: one step per round on the round's yes/no feedback. */
static void modest_search_step(struct modest *m, const struct modest_params *p)
{
	u32 mid = (m->max_win + m->min_win) / 2;

#ifndef CCCTL_MUTANT_NO_STEP_DOWN
	if (m->retrans_in_round) {
#else /* mutant (tests only): every round counts as clean */
	if (0) {
#endif
		m->max_win = mid;
		m->cwnd = m->max_win;
	} else {
		m->min_win = mid;
		m->cwnd = m->min_win;
	}
	if (m->max_win - m->min_win <= p->s_min)
		m->phase = CCCTL_MODEST_LINEAR;
}

/* Sec. III-B: Proportion in [W_min, W_max], so the searched window is
 * never above W_max x last_cwnd (nor below BBR's 4 packets). */
static __always_inline u32 modest_top(const struct modest *m, const struct modest_params *p)
{
	return max((m->last_cwnd * p->w_max) >> MODEST_W_SCALE, (u32)BBR_CWND_MIN_TARGET);
}

/* Leaving PROBE_BW (for PROBE_RTT: BBR v1 leaves it for nothing else) ends
 * the search and gives BBR back last_cwnd: now, and as the window PROBE_RTT
 * restores on its exit (BBR saved the searched one on entering it). */
static void modest_end_search(struct sock *sk, struct modest *m)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct bbr *bbr = bbr_of(sk);

	m->phase = CCCTL_MODEST_INACTIVE;
	if (m->last_cwnd > tcp_snd_cwnd(tp))
		tcp_snd_cwnd_set(tp, min(m->last_cwnd, tp->snd_cwnd_clamp));
	if (bbr->mode == BBR_PROBE_RTT)
		bbr->prior_cwnd = max(bbr->prior_cwnd, m->last_cwnd);
}

/* Alg. 1 lines 20-23: + S_min per ACK up to W_max x last_cwnd. */
static void modest_linear(struct sock *sk, const struct rate_sample *rs, struct modest *m,
			  const struct modest_params *p)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct bbr *bbr = bbr_of(sk);
	u32 top = modest_top(m, p);

	if (m->cwnd < top) {
		m->cwnd = min(m->cwnd + p->s_min, top);
		return;
	}
	/* At the top, quiet_rounds round trips without a retransmission, and
	 * the round's RTT sample shows no queue at the bottleneck (within 1/8
	 * of min_rtt): the searched window,
	 * not the path, is what limits the flow, so last_cwnd grows by S_min
	 * per round trip and the window with it, still at W_max of it (BBR's
	 * own window stays the upper bound).  Holding last_cwnd for good
	 * pinned a flow to a window taken from one early loss: capped, its
	 * deliveries cannot show more bandwidth, with the queue empty min_rtt
	 * never expires and PROBE_RTT never comes to end the search (a VM flow
	 * stayed at 4 of 10 Mbit/s with a single retransmission).  Growing
	 * whatever the queue, or handing BBR its whole window back, undid most
	 * of the relief Cubic gets: on modest-vs-cubic, growing whatever the
	 * queue left Cubic 3.0 Mbit/s beside Modest BBR and 1.6 beside bpf_bbr
	 * (1.9x); handing back, 1.6 beside Modest BBR and 3.0 beside bpf_bbr. */
#ifdef CCCTL_MUTANT_NO_GROWTH_AT_TOP
	return; /* mutant (tests only): the linear phase stops at last_cwnd for good */
#endif
	if (bbr->round_start && m->quiet_rounds >= p->quiet_rounds &&
	    m->cwnd <= tcp_snd_cwnd(tp) && rs->rtt_us > 0 &&
	    (u64)rs->rtt_us * 8 <= (u64)bbr->min_rtt_us * 9) {
		m->last_cwnd += p->s_min;
		m->cwnd = modest_top(m, p);
	}
}

/* Modest BBR leaves BBR's bandwidth samples and cwnd gain alone. */
static u64 bbr_hook_bw_sample(struct sock *sk, const struct rate_sample *rs, u64 bw)
{
	return bw;
}

static u32 bbr_hook_cwnd_gain(struct sock *sk, u32 gain, void *v)
{
	return gain;
}

/*
 * Runs on every ACK after BBR has updated its model: the only lookup of the
 * search state on this ACK (the pacing, cwnd and trace hooks get it from
 * here).  Returns it, or NULL (no memory: this ACK is plain BBR).
 */
static void *bbr_hook_after_model(struct sock *sk, const struct rate_sample *rs,
				  const struct ccctl_params *params)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct bbr *bbr = bbr_of(sk);
	struct modest_params p;
	struct modest *m;
	bool retrans;
	u32 top;

	m = modest_of(sk, true);
	if (!m)
		return NULL;
	retrans = tp->total_retrans != m->retrans_seen;
	m->retrans_seen = tp->total_retrans;
	if (retrans)
		m->quiet_rounds = 0;
	else if (bbr->round_start && m->quiet_rounds < MODEST_QUIET_ROUNDS_MAX)
		m->quiet_rounds++;
	if (bbr->mode != BBR_PROBE_BW) { /* only the steady phase searches */
		if (m->phase != CCCTL_MODEST_INACTIVE)
			modest_end_search(sk, m);
		return m;
	}

	p = modest_params(params);
	switch (m->phase) {
	case CCCTL_MODEST_INACTIVE:
		if (retrans)
			modest_start_search(sk, m, &p);
		break;
	case CCCTL_MODEST_BINARY:
		if (retrans)
			m->retrans_in_round = 1;
		if (!bbr->round_start)
			break;
		if (m->skip_round) /* the loss that started us still echoes here */
			m->skip_round = 0;
		else
			modest_search_step(m, &p);
		m->retrans_in_round = 0;
		break;
	case CCCTL_MODEST_LINEAR:
		if (retrans) /* Alg. 1 line 1 again, from the window in force */
			modest_start_search(sk, m, &p);
		else
			modest_linear(sk, rs, m, &p);
		break;
	}
	if (m->phase != CCCTL_MODEST_INACTIVE) {
		/* W_max in force bounds the search whenever it was tuned. */
		top = modest_top(m, &p);
		m->cwnd = min(m->cwnd, top);
		m->max_win = min(m->max_win, top);
		m->min_win = min(m->min_win, m->max_win);
	}
	return m;
}

/* Modest BBR paces and sizes its window from BBR's own estimate. */
static u32 bbr_hook_bw(struct sock *sk, u32 bw, void *v)
{
	return bw;
}

/* Eq. 1: pace at the searched proportion (cwnd / last_cwnd) of BBR's rate. */
static u32 bbr_hook_pacing_gain(struct sock *sk, u32 gain, void *v)
{
	struct modest *m = v;
	u64 scaled;

	if (!modest_active(sk, m) || !m->last_cwnd || m->cwnd >= m->last_cwnd)
		return gain;
	scaled = (u64)gain * m->cwnd / m->last_cwnd;
	return max((u32)scaled, 1U);
}

/* The searched window, never above the one BBR chose on this ACK. */
static u32 bbr_hook_cwnd(struct sock *sk, const struct rate_sample *rs, u32 cwnd, void *v)
{
	struct modest *m = v;

	if (!modest_active(sk, m))
		return cwnd;
	return min(cwnd, max(m->cwnd, (u32)BBR_CWND_MIN_TARGET));
}

/* Nothing: leaving PROBE_BW is handled on the ACK's one lookup above
 * (modest_end_search). */
static void bbr_hook_mode_change(struct sock *sk, u8 from, u8 to)
{
}

/* A socket (re)starting with this algorithm starts with no search. */
static void bbr_hook_init(struct sock *sk)
{
	struct modest *m = modest_of(sk, false);

	if (m)
		__builtin_memset(m, 0, sizeof(*m));
}

static void bbr_hook_release(struct sock *sk)
{
	bpf_sk_storage_delete(&modest_sk, sk);
}

/*
 * The kernel undid a loss episode: DSACKs (or timestamps) showed that the
 * segments it retransmitted had arrived after all, so what "lost" them was
 * reordering, not a full buffer.  The search such an episode started, or
 * narrowed, answered a question the path never asked: end it and hand BBR
 * back last_cwnd, as leaving PROBE_BW does.  Measured on the per-packet
 * path (veth, MTU 1500, offloads off), where segments arrive out of order
 * (the receiver's TCPOFOQueue, the sender's TCPSACKReorder): 550 of 555
 * retransmitted segments were DSACKed in one run.  Without this, each
 * spurious episode started a search from the window then, the capped
 * window cut the bandwidth estimate and so the next start: in a traced
 * slow run (1.9 of ~8 Gbit/s) last_cwnd went 140 -> 25 -> 11 -> 4 packets
 * in 1.5 s and stayed at BBR's floor, the growth at the top held off by
 * an RTT (50 us) never within 1/8 of min_rtt (4 us).  Runs in the
 * undo_cwnd program, not per ACK: one storage lookup per undo.
 *
 * The episode's retransmissions are marked as seen, so that no later ACK
 * starts a search on them: the kernel may undo on the very ACK after the
 * retransmission (the delayed original fills the hole; the ACK echoes its
 * timestamp: a partial undo), before that ACK's cong_control shows Modest
 * the new total_retrans.  Ending only a search in force missed exactly
 * those: on a VM path reordering 10 % of packets by 20 ms, each such search
 * began after its undo, ran on, and held the flow at half the link
 * (TcpExtTCPPartialUndo = TCPSackRecovery, every DSACK ignored: undone
 * already).  Every retransmission since the previous ACK belongs to the
 * episode undone here (earlier ones were seen on earlier ACKs), but for a
 * tail loss probe a timer may have sent in between, which this hides too.
 */
static void bbr_hook_undo(struct sock *sk)
{
	struct modest *m = modest_of(sk, false);

	if (!m)
		return;
#ifdef CCCTL_MUTANT_UNDO_IGNORED
	return; /* mutant (tests only): an undone episode keeps its search */
#endif
	m->retrans_seen = tcp_sk(sk)->total_retrans;
	if (m->phase != CCCTL_MODEST_INACTIVE)
		modest_end_search(sk, m);
}

static void bbr_hook_trace(struct sock *sk, struct ccctl_event *e, void *v)
{
	struct modest *m = v;

	if (!m)
		return;
	e->modest_phase = modest_active(sk, m) ? m->phase : CCCTL_MODEST_INACTIVE;
	e->min_win = m->min_win;
	e->max_win = m->max_win;
	e->last_cwnd = m->last_cwnd;
	e->quiet_rounds = m->quiet_rounds;
}

BBR_STRUCT_OPS("modest_bbr");

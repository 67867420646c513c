// SPDX-License-Identifier: GPL-2.0
/*
 * modest_bbr: Modest BBR (modest-bbr.txt, Sec. III), BBR v1 from the shared
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
 *   LINEAR    cwnd grows by S_min per ACK, never above last_cwnd, i.e.
 *             never above the window BBR itself chose; the next
 *             retransmission starts a new search from the window then.
 *             At last_cwnd, with no retransmission and no queue in the
 *             RTT, it goes on growing by S_min per round trip (last_cwnd
 *             with it), so a window taken at a bad moment cannot pin the
 *             flow; BBR's own window stays the upper bound.
 *
 * Eq. 1: pacing rate = BtlBw x RTprop x Proportion.  The pacing gain is
 * scaled by the same proportion as the window (cwnd / last_cwnd), so
 * Modest BBR does not keep pacing at BBR's full rate behind a smaller
 * window.  Leaving PROBE_BW ends the search and restores last_cwnd (the
 * PROBE_RTT exit then restores it as BBR's saved window).  BBR's own
 * window is always an upper bound: cwnd = min(BBR's cwnd, the search's).
 *
 * Alg. 1 as printed tests "bin_p = 0" on line 7, the branch that runs the
 * binary search; the text around it says that search runs while bin_p = 1
 * (bin_p is set on line 2 to enter it and cleared on line 17 to leave it).
 * We implement the described behaviour: the search steps while in BINARY.
 *
 * Parameters come from the params map (ccctl tune): W_min, W_max (x 1024),
 * S_min (packets), and the BBR gains every BBR-based algorithm has; all
 * clamped on read.  The per-socket search state does not fit beside
 * struct bbr in icsk_ca_priv's 104 bytes and lives in bpf_sk_storage.
 */
#define CCCTL_ALGO_ID CCCTL_ALGO_MODEST_BBR
#include "bbr_core.h"

/* W_min and W_max are fractions x 1024. */
#define MODEST_W_SCALE 10
#define MODEST_W_UNIT (1U << MODEST_W_SCALE)
/* Defaults (Sec. III-C): W_min = 0.75, BBR's own drain gain; W_max = 1,
 * never above BBR's window; S_min = 1 packet, the conservative step. */
#define MODEST_W_MIN_DEFAULT (MODEST_W_UNIT * 3 / 4)
#define MODEST_W_MAX_DEFAULT MODEST_W_UNIT
#define MODEST_S_MIN_DEFAULT 1
/* Clamps on whatever is in the map: W_min above 0 (the search window itself
 * never drops below BBR's 4-packet floor); W_max above 1 would exceed
 * BBR's window; S_min above 64 packets per ACK is slow start. */
#define MODEST_W_MIN_LO 1
#define MODEST_W_MAX_HI MODEST_W_UNIT
#define MODEST_S_MIN_LO 1
#define MODEST_S_MIN_HI 64

/* Per-socket search state (bpf_sk_storage "modest_sk"). */
struct modest {
	u32 last_cwnd;     /* packets: BBR's window when the search began */
	u32 min_win;       /* packets: lower bound of the search */
	u32 max_win;       /* packets: upper bound of the search */
	u32 cwnd;          /* packets: the window the search puts in force */
	u32 retrans_seen;  /* tp->total_retrans at the previous ACK */
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
};

static __always_inline struct modest_params modest_params(void)
{
	const struct ccctl_params *p = ccctl_params_get();
	struct modest_params m = {
		.w_min = MODEST_W_MIN_DEFAULT,
		.w_max = MODEST_W_MAX_DEFAULT,
		.s_min = MODEST_S_MIN_DEFAULT,
	};

	if (!p || !p->version)
		return m;
	m.w_max = clamp_u32(p->w_max, MODEST_W_MIN_LO + 1, MODEST_W_MAX_HI);
	m.w_min = clamp_u32(p->w_min, MODEST_W_MIN_LO, m.w_max - 1);
	m.s_min = clamp_u32(p->s_min, MODEST_S_MIN_LO, MODEST_S_MIN_HI);
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

/* Alg. 1 lines 1-6: the first retransmission starts a binary search. */
static void modest_start_search(struct sock *sk, struct modest *m,
				const struct modest_params *p)
{
	u32 cwnd = max(modest_bbr_window(sk), (u32)BBR_CWND_MIN_TARGET);

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

	if (m->retrans_in_round) {
		m->max_win = mid;
		m->cwnd = m->max_win;
	} else {
		m->min_win = mid;
		m->cwnd = m->min_win;
	}
	if (m->max_win - m->min_win <= p->s_min)
		m->phase = CCCTL_MODEST_LINEAR;
}

/* Modest BBR leaves BBR's bandwidth samples and cwnd gain alone. */
static u64 bbr_hook_bw_sample(struct sock *sk, const struct rate_sample *rs, u64 bw)
{
	return bw;
}

static u32 bbr_hook_cwnd_gain(struct sock *sk, u32 gain)
{
	return gain;
}

/* Runs on every ACK after BBR has updated its model. */
static void bbr_hook_after_model(struct sock *sk, const struct rate_sample *rs)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct bbr *bbr = bbr_of(sk);
	struct modest_params p;
	struct modest *m;
	bool retrans;

	m = modest_of(sk, true);
	if (!m)
		return; /* no memory: this ACK is plain BBR */
	retrans = tp->total_retrans != m->retrans_seen;
	m->retrans_seen = tp->total_retrans;
	if (bbr->mode != BBR_PROBE_BW)
		return; /* only the steady phase searches */

	p = modest_params();
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
		if (retrans) { /* Alg. 1 line 1 again, from the window in force */
			modest_start_search(sk, m, &p);
			break;
		}
		/* Alg. 1 lines 20-23: + S_min per ACK up to last_cwnd. */
		if (m->cwnd < m->last_cwnd) {
			m->cwnd = min(m->cwnd + p.s_min, m->last_cwnd);
			break;
		}
		/* At last_cwnd, no retransmission, and the round's RTT sample
		 * shows no queue at the bottleneck (within 1/8 of min_rtt): the
		 * searched window, not the path, is what limits the flow, so it
		 * grows by S_min per round trip, last_cwnd with it (BBR's own
		 * window stays the upper bound).  Holding last_cwnd for good
		 * pinned a flow to a window taken from one early loss: capped,
		 * its deliveries cannot show more bandwidth, with the queue
		 * empty min_rtt never expires and PROBE_RTT never comes to end
		 * the search (a VM flow stayed at 4 of 10 Mbit/s with a single
		 * retransmission).  Growing whatever the queue, or handing BBR
		 * its whole window back, undid most of the relief Cubic gets:
		 * on modest-vs-cubic, growing whatever the queue left Cubic
		 * 3.0 Mbit/s beside Modest BBR and 1.6 beside bpf_bbr (1.9x);
		 * handing back, 1.6 beside Modest BBR and 3.0 beside bpf_bbr. */
		if (bbr->round_start && m->cwnd <= tcp_snd_cwnd(tp) && rs->rtt_us > 0 &&
		    (u64)rs->rtt_us * 8 <= (u64)bbr->min_rtt_us * 9) {
			m->cwnd += p.s_min;
			m->last_cwnd = m->cwnd;
		}
		break;
	}
}

/* Eq. 1: pace at the searched proportion (cwnd / last_cwnd) of BBR's rate. */
static u32 bbr_hook_pacing_gain(struct sock *sk, u32 gain)
{
	struct modest *m = modest_of(sk, false);
	u64 scaled;

	if (!modest_active(sk, m) || !m->last_cwnd || m->cwnd >= m->last_cwnd)
		return gain;
	scaled = (u64)gain * m->cwnd / m->last_cwnd;
	return max((u32)scaled, 1U);
}

/* The searched window, never above the one BBR chose on this ACK. */
static u32 bbr_hook_cwnd(struct sock *sk, const struct rate_sample *rs, u32 cwnd)
{
	struct modest *m = modest_of(sk, false);

	if (!modest_active(sk, m))
		return cwnd;
	return min(cwnd, max(m->cwnd, (u32)BBR_CWND_MIN_TARGET));
}

/* Leaving PROBE_BW ends the search and gives BBR back last_cwnd.  This runs
 * before BBR saves its window for PROBE_RTT, so PROBE_RTT's exit restores
 * last_cwnd too. */
static void bbr_hook_mode_change(struct sock *sk, u8 from, u8 to)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct modest *m;

	if (from != BBR_PROBE_BW)
		return;
	m = modest_of(sk, false);
	if (!m || m->phase == CCCTL_MODEST_INACTIVE)
		return;
	m->phase = CCCTL_MODEST_INACTIVE;
	if (m->last_cwnd > tcp_snd_cwnd(tp))
		tcp_snd_cwnd_set(tp, min(m->last_cwnd, tp->snd_cwnd_clamp));
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

static void bbr_hook_trace(struct sock *sk, struct ccctl_event *e)
{
	struct modest *m = modest_of(sk, false);

	if (!m)
		return;
	e->modest_phase = modest_active(sk, m) ? m->phase : CCCTL_MODEST_INACTIVE;
	e->min_win = m->min_win;
	e->max_win = m->max_win;
	e->last_cwnd = m->last_cwnd;
}

BBR_STRUCT_OPS("modest_bbr");

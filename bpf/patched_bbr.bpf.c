// SPDX-License-Identifier: GPL-2.0
/*
 * patched_bbr: patchedBBR (its paper's Sec. V, Pseudocode 2),
 * BBR v1 from the shared core plus a correction for a sender that is
 * descheduled, as a virtual machine on a busy host is.
 *
 * The model
 * ---------
 * A descheduled sender lives in On and Off periods: during On it runs,
 * sends at its pacing rate and processes ACKs; during Off it does neither
 * (the ACKs wait in the host's buffers).  Its on-percentage is
 *
 *   Θ = On / (On + Off)                                          (eq. 11)
 *
 * BBR reads the resulting delivery-rate samples as the path's:  a round
 * carries only what was sent during On, and its interval is stretched by
 * the Off periods, so each sample is about Θ x the previous pacing rate
 * (Theorem 2).  btl_bw follows the samples down, the pacing rate follows
 * btl_bw, and round after round the pacing rate decays as Θ^n towards zero
 * (Theorem 4, Fig. 5), while a loss-based TCP only slows down.
 *
 * patchedBBR measures Θ from the sender's own timing and puts it back into
 * the model, in PROBE_BW only (STARTUP, DRAIN and PROBE_RTT are BBR's):
 *
 *   Θ          every round trip, over the last 1-2 s (eq. 11): a transmission
 *              that leaves more than
 *              off_thresh (1 ms) after the pacing schedule wanted it ends an
 *              Off period of that lateness; all other sending time is On
 *              (Sec. V-C-2);
 *   B*         the btl_bw max filter runs over D / Θ instead of the samples
 *              D (eq. 36): the rate the path delivered while we were On;
 *   P*         pacing rate B* x p / Θ when BBR probes up (p > 1) and the
 *              sender is at least moderately descheduled (Θ <= 2/3), to put
 *              a round's worth of probing into the On time; else B* x p
 *              (eq. 37);
 *   W*         cwnd B* x min_rtt x (w + alpha), alpha = 0 for little
 *              (Θ > 2/3), 1 for medium, 2 for heavy (Θ <= 1/3) descheduling
 *              (eqs. 38, 39), room for the data that waits out an Off.
 *
 * Which send events a congestion control can see
 * ----------------------------------------------
 * A struct_ops congestion control runs on ACKs and a few events; it is not
 * called per transmission.  The rate sample's send interval
 * (rs->snd_interval_us) spans a whole window of packets and cannot tell a
 * long gap from a slow rate.  So this object carries one tracing program
 * that sees every packet the stack hands to a device: tp_btf on the
 * net_dev_queue tracepoint (dev_queue_xmit, in both 6.1 and 6.18).  For a
 * TCP packet it runs inside __tcp_transmit_skb, after the packet got its
 * departure stamp (tp->tcp_wstamp_ns = the later of its pacing slot and
 * the clock) and after tp->data_segs_out counted it, which tells data from
 * pure ACKs.  The program finds our sockets by their socket storage (only
 * patched_bbr sockets have one); the loader attaches it and pins its link
 * beside the registration.  It runs under the socket's lock, as the ACK
 * path does, so the two never race on the storage.
 *
 * Why not fentry on tcp_rate_skb_sent, which the stack calls once per
 * transmitted data skb?  It is traceable on both kernels, but the 6.18
 * development host refuses every fentry/fexit program (EPERM at load,
 * also for an empty one), while tp_btf programs load there; a tracepoint
 * is also a stable interface where a function is not.
 *
 * Off is time in which the sender neither sends nor processes an ACK
 * (Sec. III-C: during Off SND can do neither).  So the lateness of a send
 * is measured up to the first ACK processed after the previous send, if
 * one came earlier: a flow that waits for ACKs with cwnd full, while ACKs
 * keep arriving, is On; a flow whose ACKs stop, because it is descheduled
 * (or gated), is Off until the first ACK or send after the pause.  A gap
 * after a transmission that left the flow application-limited waits for
 * data, not for a CPU, and counts neither as On nor as Off.
 *
 * An emulated testbed stalls as a whole
 * --------------------------------------
 * In the TCG VM of our lab the guest's CPU itself is descheduled by the
 * busy host: every timer of the guest fires late, the pacing timer as much
 * as the bottleneck's and the gate's.  Those are not the sender's Off
 * periods (the bottleneck stopped too), yet they look like them: on an
 * ungated flow with the host loaded by compiles, Θ read 0.63 with the 1 ms
 * threshold, 0.65 at 5 ms, 0.96 only at 10 ms.  With stall_filter on, a
 * heartbeat (a BPF timer due every 1 ms) measures the machine's own
 * stalls: its lateness beyond off_thresh is summed, and a send gap's
 * lateness counts as Off only beyond the stall time summed during that
 * gap.  A real descheduled VM stalls as a whole too, so there the filter
 * would hide exactly what Θ is for: it is off by default, for emulated
 * testbeds only.
 *
 * Parameters come from the params map (ccctl tune patched-bbr): the two Θ
 * thresholds, the Off threshold and the three alpha values, beside the BBR
 * gains every BBR-based algorithm has; all clamped on read.
 *
 * Departures and readings
 * -----------------------
 *  1. "At each RTT_n" (Pseudocode 2): Θ is recomputed when a packet-timed
 *     round starts, but from On and Off time SUMMED over a time window
 *     (eq. 11 over whole On/Off cycles): the current 1 s window and the
 *     one before it, 1 to 2 s in all, at least one cycle of the longest
 *     gate the lab allows (1 s) and 12 of its Heavy gate (80 ms).  Per
 *     round, a round without an Off period read Θ = 1 and pulled the mean
 *     up (Heavy 0.23-0.35 for 0.125).  A window with no usable gap keeps
 *     the previous Θ.
 *  2. "1 ms longer than the pre-defined gap": the pre-defined gap is the
 *     previous packet's bytes at the pacing rate then in force (what the
 *     kernel adds to its pacing schedule, less the jitter credit it gives
 *     back), and the Off time is the lateness beyond it, not the whole gap
 *     (the pacing gap itself was spent On).
 *  3. A send gap is Off only up to the first ACK processed in it (see
 *     above), and gaps the application left count neither way: told by a
 *     fresh app_limited mark at the send that ENDS the gap (sendmsg sets
 *     it when called with nothing unsent, so it describes the pause from
 *     its start; the mark seen at the send that opens a gap is an older
 *     pause's).  A first version left out every gap after a transmission that
 *     filled cwnd: under a Heavy gate (On 10 / Off 70 ms, Θ = 0.125) it read
 *     Θ 0.34 in the VM (with ACKs held during Off the sender runs into cwnd
 *     before the gate closes).  A second counted such gaps whole: ungated
 *     beside bpf_bbr on the host (0 ms, 50 Mbit/s) it read Θ 0.4-0.5, waits
 *     for ACKs that were arriving, and took 64-77 % of the link.
 *  4. Θ is floored at 1/32 before anything divides by it, so one bad round
 *     can at most multiply a bandwidth sample or the probe's pacing rate by
 *     32 (the paper's heaviest case, about 1 % On, is then under-corrected).
 *  5. Eq. 39 "(w + alpha)": w is BBR's PROBE_BW cwnd gain (2 by default,
 *     ccctl tune --cwnd-gain) and alpha is added to it, in BDPs; the core
 *     then adds its ACK-aggregation and quantization allowances as for BBR.
 *  6. Eq. 37 multiplies BBR's pacing gain p by 1/Θ; the core's 1 % pacing
 *     margin and the cap at sk_max_pacing_rate still apply.
 *  7. The corrections apply in PROBE_BW only; Θ is measured in every mode.
 *  8. stall_filter (off by default) is ours, for the emulated lab only (see
 *     above); the paper's testbed stalled only the sender.  It cannot tell
 *     an emulator stall from a real Off that overlaps it: under a Heavy
 *     gate in the VM it read Θ 0.42 for 0.125 (0.23 without it).
 *  9. (Replaced by 1.)  Θ was computed over the last one, then two,
 *     packet-timed rounds; an Off period is booked at the first send after
 *     it, so one round could hold two Off periods and the next none.
 * 10. After `ccctl unload` running sockets keep their ops but the transmit
 *     tracer is detached: when the stack has sent more than 32 data
 *     segments the tracer did not see and it has not run for this socket
 *     for a window (1 s), Θ goes back to 1 for good (no stale correction).
 * 11. The core's pacing-rate arithmetic saturates (bbr_core.h): bw x 32
 *     (eq. 36) x 1.25 x 32 (eq. 37) wrapped its u64 product at a few
 *     Gbit/s.
 * 12. divide_after_max (a parameter, 0 by default): the
 *     max filter runs over the raw samples D and B* is that max divided
 *     by the Θ in force, max(D) / Θ instead of max(D / Θ).  Under the
 *     paper's model both settle at the same B*: a round delivers at most
 *     the link's rate C, so B* = C / Θ, the rate that fills the link from
 *     On time alone (eq. 36 is right at its fixed point).  But the
 *     default keeps each sample's D / Θ for the filter's 10 rounds with
 *     the Θ of ITS round: one round with a low Θ holds btl_bw up (to 32x)
 *     after Θ recovered, and app-limited samples are divided too.  With
 *     the variant B* follows Θ at once and an app-limited sample enters
 *     the filter undivided.  Eq. 36 prints Θ without the index n' its D
 *     carries, so it reads either way (docs/algorithms/patched_bbr.md).
 *     PROBE_BW's phase ends (the up-probe's target inflight, the drain's)
 *     still read the filter's max.  Measured: Heavy retransmissions 7,428
 *     against 11,772 per run, goodput 49.7x against 57.9x bpf_bbr's
 *     (150 Mbit/s, 48 ms); the default is kept.
 * 13. The long-term (policer) rate of tcp_bbr.c, which BBR paces at for up
 *     to 48 rounds once it sees two intervals of heavy loss at the same
 *     rate, is divided by the Θ in force too.  The paper's model has no
 *     policer; its lt_bw is delivered / elapsed over 4-16 rounds, Off time
 *     included, so it carries the bias eq. 36 corrects, and a gate's loss
 *     bursts trigger it: behind the lab's Medium gate (150 Mbit/s, 48 ms)
 *     54 % of PROBE_BW ACKs paced at the raw lt_bw, goodput 104 Mbit/s.
 */
#define CCCTL_ALGO_ID CCCTL_ALGO_PATCHED_BBR
#include "bbr_core.h"

/* Θ in fixed point: 1.0 = 1024 (CCCTL_THETA_UNIT). */
#define THETA_SCALE 10
#define THETA_UNIT (1U << THETA_SCALE)
_Static_assert(THETA_UNIT == CCCTL_THETA_UNIT, "Θ scale must match the ABI");

/* Defaults and bounds of the parameters (Sec. V-C: "little" above 2/3,
 * "heavy" at or below 1/3, Off 1 ms past the pacing schedule, alpha 0 / 1 /
 * 2 BDP, eq. 38) are their CCCTL_PARAMS rows in ccctl_abi.h. */

/* Smallest Θ anything is divided by: bounds the corrections at 32x. */
#define PATCHED_THETA_MIN (THETA_UNIT / 32)
/* Θ window, ns (departure 1): On and Off are summed over the current window
 * and the one before, so Θ covers 1 to 2 s, at least 12 cycles of the
 * lab's Heavy gate (80 ms) and whole cycles of the longest gate the lab
 * allows (1 s). */
#define PATCHED_WINDOW_NS (1000 * 1000 * 1000ULL)
/* The ACK path calls the transmit tracer gone (departure 10) when the
 * stack sent more data segments than this that it did not see and it has
 * not run for this socket for a window.  Alive, it sees nearly every send
 * (a program's recursion guard skips one now and then), and a sending flow
 * sends in every On period (the lab's gate cycles are at most 1 s). */
#define PATCHED_UNSEEN_SEGS 32
/* Heartbeat period, ns: the finest Off threshold, so a stall that long is seen. */
#define PATCHED_HEARTBEAT_NS (1000 * 1000ULL)

/* The parameters in force, clamped so that 0 < theta_heavy < theta_little <= 1. */
struct patched_params {
	u32 theta_little;
	u32 theta_heavy;
	u32 off_thresh_us;
	u32 alpha_little;
	u32 alpha_medium;
	u32 alpha_heavy;
	bool stall_filter;
	bool divide_after_max; /* departure 12: B* = max(D) / Θ, not max(D / Θ) */
};

/* Per-socket state (bpf_sk_storage "patched_sk"): written by the transmit
 * tracer (send timing) and by the ACK path (Θ, trace figures). */
struct patched {
	u64 last_depart_ns; /* departure stamp of the previous transmission; 0 = none */
	u64 pacing_gap_ns;  /* its length at the pacing rate: the pre-defined gap */
	u64 win_start_ns;   /* start of the current Θ window (departure 1) */
	u64 win_on_ns;      /* On time booked in the current window */
	u64 win_off_ns;     /* Off time booked in the current window */
	u64 prev_on_ns;     /* On time of the window before */
	u64 prev_off_ns;    /* Off time of the window before */
	u32 theta;          /* Θ in force, x THETA_UNIT */
	u32 theta_on_us;    /* On time of the windows Θ was estimated over */
	u32 theta_off_us;   /* Off time of those windows */
	u32 bw_raw;         /* this ACK's delivery-rate sample D, BW_UNIT pkts/us */
	u32 bw_corrected;   /* the sample the max filter saw (D / Θ in PROBE_BW) */
	u32 data_segs_out;  /* tp->data_segs_out at the previous transmission */
	u32 app_limited;    /* tp->app_limited at the previous transmission */
	u32 pad0;
	u64 stall_seen_ns;  /* machine stall total at the previous transmission */
	u64 first_ack_ns;   /* first ACK processed since the previous transmission */
	u64 stall_ns;       /* stall time left out of Off in the current window */
	u64 tracer_seen_ns; /* when the transmit tracer last ran for this socket */
	u8 acked;           /* an ACK was processed since the previous transmission */
	u8 tracer_lost;     /* the transmit tracer stopped seeing this flow: Θ = 1 */
	u8 in_probe_bw;     /* BBR is in PROBE_BW now (set on every mode change) */
	u8 gap_in_probe_bw; /* ... and was at the previous transmission: the gap
			     * opened in PROBE_BW, so it is booked */
	u8 pad[4];
	/* The parameters of the latest ACK's set (copied once per ACK by the
	 * ACK path), for the hooks and for the transmit tracer, which must not
	 * take the params map's spin lock itself. */
	struct patched_params m;
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct patched);
} patched_sk SEC(".maps");

/* The machine's own stalls: a timer due every PATCHED_HEARTBEAT_NS; its
 * lateness beyond off_thresh is summed in "stall".  The timer lives in a map
 * of its own (pinned by the loader, so it outlives ccctl), the total in
 * another one the transmit tracer reads. */
struct heartbeat {
	struct bpf_timer timer;
	u64 due_ns;  /* when it should fire next */
	u64 off_thresh_ns; /* lateness beyond this is a stall (off_thresh when started) */
	u32 started;
	u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct heartbeat);
} heartbeat SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} stall SEC(".maps");


static __always_inline struct patched_params patched_params(const struct ccctl_params *p)
{
	struct patched_params m = {
		.theta_little = ccctl_param(p, theta_little),
		.off_thresh_us = ccctl_param(p, off_thresh_us),
		.alpha_little = ccctl_param(p, alpha_little),
		.alpha_medium = ccctl_param(p, alpha_medium),
		.alpha_heavy = ccctl_param(p, alpha_heavy),
		.stall_filter = ccctl_param(p, stall_filter) != 0,
		.divide_after_max = ccctl_param(p, divide_after_max) != 0,
	};

	/* The levels must not overlap whoever wrote the map. */
	m.theta_little = max(m.theta_little, 2U);
	m.theta_heavy = clamp_u32(ccctl_param(p, theta_heavy), 1, m.theta_little - 1);
	return m;
}

static __always_inline struct patched *patched_of(struct sock *sk)
{
	return bpf_sk_storage_get(&patched_sk, sk, NULL, 0);
}

/* The correction is in force: PROBE_BW (Pseudocode 2 runs there only). */
static __always_inline bool patched_active(struct sock *sk, const struct patched *p)
{
	return p && bbr_of(sk)->mode == BBR_PROBE_BW;
}

static __always_inline u32 patched_theta(const struct patched *p)
{
	return max(p->theta, (u32)PATCHED_THETA_MIN);
}

/* Eq. 38: alpha for the descheduling level Θ says we are in. */
static __always_inline u32 patched_alpha(u32 theta, const struct patched_params *m)
{
	if (theta <= m->theta_heavy)
		return m->alpha_heavy;
	if (theta > m->theta_little)
		return m->alpha_little;
	return m->alpha_medium;
}

/* Eq. 11 over the On and Off time summed in the current window and the
 * one before (departure 1), at each new round; in force for that round. */
static void patched_estimate_theta(struct patched *p)
{
	u64 on = p->win_on_ns + p->prev_on_ns, off = p->win_off_ns + p->prev_off_ns;
	u64 total = on + off;

	if (!total)
		return;
#ifndef CCCTL_MUTANT_THETA_OFF_SHARE
	p->theta = (u32)(on * THETA_UNIT / total);
#else /* mutant (tests only): Θ = Off / (On + Off) */
	p->theta = (u32)(off * THETA_UNIT / total);
#endif
	p->theta_on_us = (u32)min(on / NSEC_PER_USEC, (u64)~0U);
	p->theta_off_us = (u32)min(off / NSEC_PER_USEC, (u64)~0U);
}

/* The transmit tracer books a gap: a window PATCHED_WINDOW_NS old is
 * closed first (it becomes the window before). */
static __always_inline void patched_book(struct patched *p, u64 now, u64 on, u64 off)
{
	if (!p->win_start_ns)
		p->win_start_ns = now;
	if (now - p->win_start_ns >= PATCHED_WINDOW_NS) {
		p->prev_on_ns = p->win_on_ns;
		p->prev_off_ns = p->win_off_ns;
		p->win_on_ns = 0;
		p->win_off_ns = 0;
		p->stall_ns = 0;
		p->win_start_ns = now;
	}
	p->win_on_ns += on;
	p->win_off_ns += off;
}

/* Departure 10: data the stack sent that the transmit tracer did not see
 * means it is gone (the algorithm was unloaded and its tracer detached;
 * this socket keeps its ops).  No Θ without it: back to 1, for good. */
static __always_inline void patched_check_tracer(struct sock *sk, struct patched *p)
{
	if (p->tracer_lost)
		return;
	if (tcp_sk(sk)->data_segs_out - p->data_segs_out <= PATCHED_UNSEEN_SEGS)
		return;
	if (bpf_ktime_get_ns() - p->tracer_seen_ns < PATCHED_WINDOW_NS)
		return;
	p->tracer_lost = 1;
	p->theta = THETA_UNIT;
	p->win_on_ns = p->win_off_ns = p->prev_on_ns = p->prev_off_ns = 0;
	p->theta_on_us = p->theta_off_us = 0;
}

/* Heartbeat: how late did it fire?  Late beyond off_thresh is a stall. */
static int patched_heartbeat(void *map, u32 *key, struct heartbeat *hb)
{
	u64 now = bpf_ktime_get_ns();
	u32 zero = 0;
	u64 *total;

	if (now > hb->due_ns && now - hb->due_ns > hb->off_thresh_ns) {
		total = bpf_map_lookup_elem(&stall, &zero);
		if (total)
			__sync_fetch_and_add(total, now - hb->due_ns);
	}
	hb->due_ns = now + PATCHED_HEARTBEAT_NS;
	bpf_timer_start(&hb->timer, PATCHED_HEARTBEAT_NS, 0);
	return 0;
}

/* Start the heartbeat once, when a socket starts with stall_filter on. */
static void patched_start_heartbeat(u32 off_thresh_us)
{
	u32 zero = 0;
	struct heartbeat *hb = bpf_map_lookup_elem(&heartbeat, &zero);

	if (!hb || hb->started)
		return;
	hb->started = 1;
	hb->off_thresh_ns = (u64)off_thresh_us * NSEC_PER_USEC;
	if (bpf_timer_init(&hb->timer, &heartbeat, CLOCK_MONOTONIC))
		return;
	bpf_timer_set_callback(&hb->timer, patched_heartbeat);
	hb->due_ns = bpf_ktime_get_ns() + PATCHED_HEARTBEAT_NS;
	bpf_timer_start(&hb->timer, PATCHED_HEARTBEAT_NS, 0);
}

/*
 * Every data transmission of a patched_bbr socket: the gap since the
 * previous one, less the pacing gap the previous one's length asked for,
 * is Off when it exceeds off_thresh; the rest of the gap is On.
 */
SEC("tp_btf/net_dev_queue")
int BPF_PROG(patched_bbr_net_dev_queue, struct sk_buff *skb)
{
	struct sock *sk = skb->sk;
	const struct tcp_sock *tp;
	struct patched_params m;
	struct patched *p;
	u64 depart, gap, quiet, late, rate, stalled = 0, *total;
	u32 segs, data_segs_out, app_limited, zero = 0;
	bool idle, counted;

	if (!sk)
		return 0;
	p = bpf_sk_storage_get(&patched_sk, sk, NULL, 0);
	if (!p)
		return 0; /* not one of ours */
	/*
	 * Only patched_bbr sockets have the storage, so sk is a TCP socket.
	 * skb->sk is an RCU pointer here, which 6.18's verifier lets neither be
	 * dereferenced past struct sock nor be passed to bpf_skc_to_tcp_sock:
	 * the tcp_sock fields are read with CO-RE probe reads instead.
	 */
	tp = (const struct tcp_sock *)sk;
	data_segs_out = BPF_CORE_READ(tp, data_segs_out);
	segs = data_segs_out - p->data_segs_out;
	if (!segs)
		return 0; /* no data: a pure ACK, or this packet seen on a second device */
	p->data_segs_out = data_segs_out;
	p->tracer_seen_ns = bpf_ktime_get_ns();

	depart = BPF_CORE_READ(tp, tcp_wstamp_ns);
	m = p->m;
	total = bpf_map_lookup_elem(&stall, &zero);
	if (total && m.stall_filter) {
		stalled = *total - p->stall_seen_ns;
		p->stall_seen_ns = *total;
	}
	/*
	 * A gap the application left: sendmsg marks the flow app-limited when
	 * it is called with less than a packet unsent and cwnd not full, so a
	 * fresh mark at the first send after a pause says the flow had nothing
	 * to send when the pause began (unsent data only leaves by a send).
	 * The mark seen at the send that opened the gap describes the pause
	 * before it, not this one (departure 3).
	 */
	app_limited = BPF_CORE_READ(tp, app_limited);
	idle = app_limited && app_limited != p->app_limited;
	p->app_limited = app_limited;
	/*
	 * Gaps that open outside PROBE_BW are booked neither way (departure
	 * 7): STARTUP, DRAIN and PROBE_RTT are cwnd-limited by design, and a
	 * wait for the ACKs of a full window is the path's round trip, not
	 * Off. Booked, STARTUP's first round trip (the initial window's wait
	 * for its first ACK, ~40 ms) left Θ 0.86-0.95 in the window of the
	 * first 2 s of PROBE_BW, ungated: btl_bw 165 Mbit/s on a 150 Mbit/s
	 * link and a queue that took ~8 s to drain (mean RTT 1.07x bpf_bbr's
	 * over 15 pairs on an idle host, an A/A control 1.00x).
	 */
	counted = p->gap_in_probe_bw;
	p->gap_in_probe_bw = p->in_probe_bw;
	if (p->last_depart_ns && counted && !idle && !p->tracer_lost &&
	    depart > p->last_depart_ns) {
		gap = depart - p->last_depart_ns;
		/* Silent until the first ACK processed in the gap, if any. */
		quiet = p->acked && p->first_ack_ns < depart ?
			(p->first_ack_ns > p->last_depart_ns ?
				 p->first_ack_ns - p->last_depart_ns : 0) :
			gap;
		late = quiet > p->pacing_gap_ns ? quiet - p->pacing_gap_ns : 0;
		/* The machine's own stalls during the gap are not the sender's Off. */
		stalled = min(stalled, late);
		p->stall_ns += stalled;
		late -= stalled;
		if (late > (u64)m.off_thresh_us * NSEC_PER_USEC)
			patched_book(p, depart, gap - late, late);
		else
			patched_book(p, depart, gap, 0);
	}
	p->last_depart_ns = depart;
	p->acked = 0;
	/* The kernel paces each packet's bytes at sk_pacing_rate (~0 = unpaced). */
	rate = sk->sk_pacing_rate;
	p->pacing_gap_ns = rate && rate != ~0UL ?
		(u64)segs * BPF_CORE_READ(tp, mss_cache) * NSEC_PER_SEC / rate : 0;
	return 0;
}

/* Eq. 36: the max filter sees D / Θ in PROBE_BW (with divide_after_max,
 * departure 12, it sees D and bbr_hook_bw divides).  A new round first
 * turns the round just ended into the Θ in force.  The parameter set is the
 * previous ACK's: this ACK's is read after the model is updated. */
static u64 bbr_hook_bw_sample(struct sock *sk, const struct rate_sample *rs, u64 bw)
{
	struct patched *p = patched_of(sk);

	if (!p)
		return bw;
	patched_check_tracer(sk, p);
	if (bbr_of(sk)->round_start)
		patched_estimate_theta(p);
	p->bw_raw = (u32)min(bw, (u64)~0U);
	if (patched_active(sk, p) && !p->m.divide_after_max)
		bw = bw * THETA_UNIT / patched_theta(p);
	p->bw_corrected = (u32)min(bw, (u64)~0U);
	return bw;
}

/* B* in PROBE_BW: the policer's rate divided by the Θ in force (departure
 * 13); with divide_after_max (departure 12) the filter's max too. */
static u32 bbr_hook_bw(struct sock *sk, u32 bw, void *v)
{
	struct patched *p = v;

	if (!patched_active(sk, p))
		return bw;
#ifdef CCCTL_MUTANT_LT_NOT_DIVIDED
	if (!p->m.divide_after_max)
		return bw; /* mutant (tests only): the policer's rate as BBR's */
#endif
	if (!p->m.divide_after_max && !bbr_of(sk)->lt_use_bw)
		return bw; /* eq. 36 divided each sample before the filter */
	return (u32)min((u64)bw * THETA_UNIT / patched_theta(p), (u64)~0U);
}

/* Every ACK: takes this ACK's parameters into the socket's state (the
 * hooks below and the transmit tracer use that copy); the first ACK after a
 * transmission ends that gap's silence.  Returns the state for the hooks. */
static void *bbr_hook_after_model(struct sock *sk, const struct rate_sample *rs,
				  const struct ccctl_params *params)
{
	struct patched *p = patched_of(sk);

	if (!p)
		return NULL;
	p->m = patched_params(params);
	patched_check_tracer(sk, p);
	if (!p->acked) {
		p->acked = 1;
		p->first_ack_ns = bpf_ktime_get_ns();
	}
	return p;
}

/* Eq. 37: B* x p / Θ while probing up (p > 1) with Θ <= theta_little. */
static u32 bbr_hook_pacing_gain(struct sock *sk, u32 gain, void *v)
{
	struct patched *p = v;
	u32 theta;

	if (!patched_active(sk, p) || gain <= BBR_UNIT)
		return gain;
	theta = patched_theta(p);
	if (theta > p->m.theta_little)
		return gain;
#ifdef CCCTL_MUTANT_PACING_NOT_DIVIDED
	return gain; /* mutant (tests only): eq. 37 without the division by Θ */
#endif
	return (u32)min((u64)gain * THETA_UNIT / theta, (u64)~0U);
}

/* Eq. 39: cwnd = B* x min_rtt x (w + alpha). */
static u32 bbr_hook_cwnd_gain(struct sock *sk, u32 gain, void *v)
{
	struct patched *p = v;

	if (!patched_active(sk, p))
		return gain;
#ifdef CCCTL_MUTANT_ALPHA_IGNORED
	return gain; /* mutant (tests only): eq. 39 without alpha */
#endif
	return gain + patched_alpha(patched_theta(p), &p->m);
}

static u32 bbr_hook_cwnd(struct sock *sk, const struct rate_sample *rs, u32 cwnd, void *v)
{
	return cwnd;
}

/* Which mode the transmit tracer's next gap opens in. */
static void bbr_hook_mode_change(struct sock *sk, u8 from, u8 to)
{
	struct patched *p = patched_of(sk);

	if (p)
		p->in_probe_bw = to == BBR_PROBE_BW;
}

/* Patched BBR has no loss state of its own to take back. */
static void bbr_hook_undo(struct sock *sk) {}

/* A socket starting with this algorithm: no send seen yet, Θ = 1. */
static void bbr_hook_init(struct sock *sk)
{
	struct ccctl_params params;
	struct patched *p;

	p = bpf_sk_storage_get(&patched_sk, sk, NULL, BPF_SK_STORAGE_GET_F_CREATE);
	if (!p)
		return; /* no memory: plain BBR */
	__builtin_memset(p, 0, sizeof(*p));
	p->theta = THETA_UNIT;
	/* The tracer counts data segments from here (the algorithm may be set
	 * on a socket that has sent already). */
	p->data_segs_out = tcp_sk(sk)->data_segs_out;
	p->tracer_seen_ns = bpf_ktime_get_ns();
	/* Until the first ACK, the transmit tracer uses the set in force now. */
	ccctl_params_read(&params);
	p->m = patched_params(&params);
	if (p->m.stall_filter)
		patched_start_heartbeat(p->m.off_thresh_us);
}

static void bbr_hook_release(struct sock *sk)
{
	bpf_sk_storage_delete(&patched_sk, sk);
}

/* bw in BW_UNIT pkts/us -> bytes/s. */
static __always_inline u64 patched_bytes_per_sec(struct sock *sk, u32 bw)
{
	return ((u64)bw * tcp_sk(sk)->mss_cache * USEC_PER_SEC) >> BW_SCALE;
}

static void bbr_hook_trace(struct sock *sk, struct ccctl_event *e, void *v)
{
	struct patched *p = v;
	struct bbr *bbr = bbr_of(sk);

	if (!p)
		return;
	e->theta = p->theta;
	e->alpha = patched_active(sk, p) ? patched_alpha(patched_theta(p), &p->m) : 0;
	e->on_us = (u32)min(p->win_on_ns / NSEC_PER_USEC, (u64)~0U);
	e->off_us = (u32)min(p->win_off_ns / NSEC_PER_USEC, (u64)~0U);
	e->theta_on_us = p->theta_on_us;
	e->theta_off_us = p->theta_off_us;
	e->bbr_pacing_gain = bbr->pacing_gain;
	e->stall_us = (u32)min(p->stall_ns / NSEC_PER_USEC, (u64)~0U);
	if (e->delivery_rate) {
		e->bw_raw = patched_bytes_per_sec(sk, p->bw_raw);
		e->bw_corrected = patched_bytes_per_sec(sk, p->bw_corrected);
	}
}

BBR_STRUCT_OPS("patched_bbr");

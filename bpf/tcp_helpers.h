/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Small TCP accessors every congestion control needs.  The kernel has most
 * of these as inline functions (tcp_snd_cwnd_set, tcp_packets_in_flight,
 * tcp_min_rtt, minmax), but inline functions are not kfuncs: a BPF program
 * cannot call them, so we write our own from their definitions.
 */
#ifndef __CCCTL_TCP_HELPERS_H
#define __CCCTL_TCP_HELPERS_H

#define USEC_PER_MSEC 1000ULL
#define USEC_PER_SEC 1000000ULL
#define NSEC_PER_USEC 1000ULL
#define NSEC_PER_SEC 1000000000ULL

/* ssthresh meaning "no threshold yet" (include/net/tcp.h) */
#define TCP_INFINITE_SSTHRESH 0x7fffffff
/* RFC 6928 initial window, packets */
#define TCP_INIT_CWND 10

#define min(a, b) ((a) < (b) ? (a) : (b))
#define max(a, b) ((a) > (b) ? (a) : (b))

/* Sequence-space style comparisons for wrapping u32 counters and clocks. */
#define before(a, b) ((__s32)((__u32)(a) - (__u32)(b)) < 0)
#define after(a, b) before(b, a)

static __always_inline struct tcp_sock *tcp_sk(const struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static __always_inline struct inet_connection_sock *inet_csk(const struct sock *sk)
{
	return (struct inet_connection_sock *)sk;
}

/* The 104-byte per-socket area reserved for the congestion control. */
static __always_inline void *inet_csk_ca(const struct sock *sk)
{
	return (void *)inet_csk(sk)->icsk_ca_priv;
}

/* icsk_ca_state is a 5-bit field; read it through a CO-RE bitfield reloc. */
static __always_inline u8 tcp_ca_state(const struct sock *sk)
{
	const struct inet_connection_sock *icsk = inet_csk(sk);

	return BPF_CORE_READ_BITFIELD(icsk, icsk_ca_state);
}

static __always_inline u32 tcp_snd_cwnd(const struct tcp_sock *tp)
{
	return tp->snd_cwnd;
}

static __always_inline void tcp_snd_cwnd_set(struct tcp_sock *tp, u32 cwnd)
{
	tp->snd_cwnd = cwnd;
}

/* Packets the sender believes are in the network: out - (sacked + lost) + retrans. */
static __always_inline u32 tcp_packets_in_flight(const struct tcp_sock *tp)
{
	return tp->packets_out - (tp->sacked_out + tp->lost_out) + tp->retrans_out;
}

/* The kernel's own windowed min RTT (us), head of its minmax filter. */
static __always_inline u32 tcp_min_rtt(const struct tcp_sock *tp)
{
	return tp->rtt_min.s[0].v;
}

/* t1 - t0 in us, never negative. */
static __always_inline u32 tcp_stamp_us_delta(u64 t1, u64 t0)
{
	return t1 > t0 ? (u32)(t1 - t0) : 0;
}

/* A millisecond clock derived from the per-ACK us timestamp TCP keeps. */
static __always_inline u32 tcp_clock_ms(const struct tcp_sock *tp)
{
	return (u32)(tp->tcp_mstamp / USEC_PER_MSEC);
}

/*
 * Windowed maximum over a sliding time window (K. Nichols' algorithm, as in
 * lib/win_minmax.c): keep the best, second-best and third-best samples of
 * the window so that when the best one ages out, a good replacement is
 * already known.  O(1) per sample, 24 bytes of state.
 */
static __always_inline u32 win_max_reset(struct minmax *m, u32 t, u32 v)
{
	m->s[0].t = m->s[1].t = m->s[2].t = t;
	m->s[0].v = m->s[1].v = m->s[2].v = v;
	return v;
}

static __always_inline u32 win_max_update(struct minmax *m, u32 win, u32 t, u32 v)
{
	u32 age;

	/* A new best, or nothing left in the window: start over from v. */
	if (v >= m->s[0].v || t - m->s[2].t > win)
		return win_max_reset(m, t, v);

	if (v >= m->s[1].v) {
		m->s[1].t = m->s[2].t = t;
		m->s[1].v = m->s[2].v = v;
	} else if (v >= m->s[2].v) {
		m->s[2].t = t;
		m->s[2].v = v;
	}

	/* Age the samples so the three cover the window in thirds-ish. */
	age = t - m->s[0].t;
	if (age > win) {
		m->s[0] = m->s[1];
		m->s[1] = m->s[2];
		m->s[2].t = t;
		m->s[2].v = v;
		if (t - m->s[0].t > win) {
			m->s[0] = m->s[1];
			m->s[1] = m->s[2];
		}
	} else if (m->s[1].t == m->s[0].t && age > win / 4) {
		m->s[1].t = m->s[2].t = t;
		m->s[1].v = m->s[2].v = v;
	} else if (m->s[2].t == m->s[1].t && age > win / 2) {
		m->s[2].t = t;
		m->s[2].v = v;
	}
	return m->s[0].v;
}

#endif /* __CCCTL_TCP_HELPERS_H */

/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Per-ACK tracing, shared by every ccctl congestion control.
 *
 * An algorithm calls ccctl_trace_begin() once per call of its main per-ACK
 * hook.  When tracing is off that costs one load: the enabled flag of the
 * one-entry trace_cfg array (the verifier inlines array lookups into a
 * pointer computation).  When on, the filters (algorithm, port, addresses
 * of either family, by prefix)
 * and the sampling (every Nth ACK, or once per round trip) run before
 * anything is reserved; then one struct ccctl_event is reserved in the ring
 * buffer, the common fields are filled in here, the algorithm adds its own
 * state and calls ccctl_trace_commit().  A failed reservation (the consumer
 * fell behind and the ring is full) is counted per CPU in trace_drops, so
 * nothing is lost silently; every attempted reservation (an event that
 * passed the filters and the sampling) is counted per CPU in trace_produced,
 * so a consumer can check written + dropped == produced.
 *
 * All maps here are pinned by name under <bpffs>/ccctl/shared/ (the loader
 * sets libbpf's pin_root_path), so every algorithm object reuses the same
 * ring buffer, configuration and flow-id counter.
 */
#ifndef __CCCTL_TRACE_H
#define __CCCTL_TRACE_H

#include "ccctl_common.h"
#include <bpf/bpf_endian.h>

/* Ring buffer size, bytes: 8 MiB is ~32 000 events (256 bytes plus an 8-byte
 * record header each), ~0.08 s of a 10 Gbit/s flow traced on every ACK (one
 * ACK per two 1500-byte segments).  The loader may override it (tests shrink it). */
#define CCCTL_TRACE_RING_BYTES (8u << 20)

/* Wake the consumer only once this much is waiting, bytes: one wakeup per
 * ~400 events instead of one per event (a context switch per ACK would cost
 * the traced flow more than the event itself).  The consumer also drains
 * every 100 ms, so a slow flow's events are never held longer than that. */
#define CCCTL_TRACE_WAKEUP_BYTES (64u << 10)

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, CCCTL_TRACE_RING_BYTES);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} trace_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct ccctl_trace_cfg);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} trace_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} trace_drops SEC(".maps");

/* Events produced: reservations attempted, whether they succeeded or not. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} trace_produced SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct ccctl_trace_state);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} trace_state SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct ccctl_trace_sk);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} trace_sk SEC(".maps");

static __always_inline u16 ccctl_bswap16(u16 v)
{
	return (u16)((v >> 8) | (v << 8));
}

/* Address families (include/linux/socket.h). */
#define CCCTL_AF_INET 2
#define CCCTL_AF_INET6 10

/* An address as four 32-bit words in network order (CCCTL_ADDR_BYTES). */
struct ccctl_addr {
	u32 w[4];
};

_Static_assert(sizeof(struct ccctl_addr) == CCCTL_ADDR_BYTES, "16-byte addresses");
_Static_assert(sizeof(struct ccctl_event) == CCCTL_EVENT_SIZE, "event size as the ABI states it");

/* Word 2 of ::ffff:a.b.c.d in memory order: bytes 00 00 ff ff. */
#define CCCTL_V4MAPPED_WORD bpf_htonl(0x0000ffffu)

/*
 * The socket's local and remote addresses as the trace sees them: an
 * AF_INET6 socket's own (v4-mapped already when it talks IPv4), an AF_INET
 * socket's IPv4 addresses written ::ffff:a.b.c.d.
 */
static __always_inline void ccctl_sk_addrs(const struct sock *sk, struct ccctl_addr *local, struct ccctl_addr *remote)
{
	int i;

	if (sk->__sk_common.skc_family == CCCTL_AF_INET6) {
#pragma unroll
		for (i = 0; i < 4; i++) {
			local->w[i] = sk->__sk_common.skc_v6_rcv_saddr.in6_u.u6_addr32[i];
			remote->w[i] = sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[i];
		}
		return;
	}
	local->w[0] = 0;
	local->w[1] = 0;
	local->w[2] = CCCTL_V4MAPPED_WORD;
	local->w[3] = sk->__sk_common.skc_rcv_saddr;
	remote->w[0] = 0;
	remote->w[1] = 0;
	remote->w[2] = CCCTL_V4MAPPED_WORD;
	remote->w[3] = sk->__sk_common.skc_daddr;
}

/*
 * Do the first prefix bits of have equal those of want (both network
 * order)?  A prefix of 0 matches every address; 128 only want itself.
 * Word by word: the word holding the prefix's end is compared under a mask
 * of its leading bits, built in host order and turned to network order.
 */
static __always_inline bool ccctl_addr_match(const u8 *want, u32 prefix, const struct ccctl_addr *have)
{
	u32 w, bits, mask, want_w;
	int i;

#pragma unroll
	for (i = 0; i < 4; i++) {
		if (prefix <= 32 * i)
			break;
		bits = prefix - 32 * i;
		mask = bits >= 32 ? ~0u : bpf_htonl(~0u << (32 - bits));
		__builtin_memcpy(&want_w, want + 4 * i, sizeof(want_w));
		w = have->w[i];
		if ((w ^ want_w) & mask)
			return false;
	}
	return true;
}

/* Does this flow pass the filters of cfg? */
static __always_inline bool ccctl_trace_match(const struct ccctl_trace_cfg *cfg, u8 algo, u16 sport, u16 dport,
					      const struct ccctl_addr *local, const struct ccctl_addr *remote)
{
	if (cfg->algo_mask && !(cfg->algo_mask & (1u << algo)))
		return false;
	if (cfg->port && cfg->port != sport && cfg->port != dport)
		return false;
	if (cfg->sport && cfg->sport != sport)
		return false;
	if (cfg->dport && cfg->dport != dport)
		return false;
	if (cfg->saddr_prefix && !ccctl_addr_match(cfg->saddr, cfg->saddr_prefix, local))
		return false;
	if (cfg->daddr_prefix && !ccctl_addr_match(cfg->daddr, cfg->daddr_prefix, remote))
		return false;
	return true;
}

/* Delivery rate of this ACK's rate sample, bytes/s (0 without a valid sample). */
static __always_inline u64 ccctl_sample_rate(const struct rate_sample *rs, u32 mss)
{
	if (rs->interval_us <= 0 || rs->delivered <= 0)
		return 0;
	return (u64)rs->delivered * mss * 1000000ULL / (u64)rs->interval_us;
}

/*
 * How far the socket's pacing schedule runs ahead of this ACK's clock, ms
 * (saturating): the kernel stamps each segment it sends with the next
 * departure time and moves that on by the segment's length at the pacing
 * rate, and internal pacing holds the next segment until the clock reaches
 * it. So the lead is about one segment's slot while paced; segments that
 * left in a burst leave it far ahead, and tcp_bbr.c's DRAIN (in-flight at
 * the departure time) counts them as already delivered.
 */
static __always_inline u16 ccctl_edt_lead_ms(const struct tcp_sock *tp)
{
	u64 edt = tp->tcp_wstamp_ns, now = tp->tcp_clock_cache;
	u64 lead = edt > now ? (edt - now) / 1000000ULL : 0;

	return lead > 0xffff ? 0xffff : (u16)lead;
}

/*
 * Start an event for this ACK, or NULL when tracing is off, this flow is
 * filtered or sampled out, or the ring is full (counted as a drop).
 */
static __always_inline struct ccctl_event *ccctl_trace_begin(struct sock *sk, const struct rate_sample *rs, u8 algo,
							     u32 param_version)
{
	struct tcp_sock *tp = tcp_sk(sk);
	const struct ccctl_trace_cfg *cfg;
	struct ccctl_trace_state *state;
	struct ccctl_trace_sk *ts;
	struct ccctl_event *e;
	u32 zero = 0;
	u16 sport, dport;
	struct ccctl_addr local, remote;
	u64 *drops, *produced;

	cfg = bpf_map_lookup_elem(&trace_cfg, &zero);
	if (!cfg || !cfg->enabled)
		return NULL;

	sport = sk->__sk_common.skc_num;
	dport = ccctl_bswap16(sk->__sk_common.skc_dport);
	ccctl_sk_addrs(sk, &local, &remote);
	if (!ccctl_trace_match(cfg, algo, sport, dport, &local, &remote))
		return NULL;

	ts = bpf_sk_storage_get(&trace_sk, sk, NULL, BPF_SK_STORAGE_GET_F_CREATE);
	if (!ts)
		return NULL;
	if (!ts->flow_id) {
		state = bpf_map_lookup_elem(&trace_state, &zero);
		if (!state)
			return NULL;
		ts->flow_id = __sync_fetch_and_add(&state->next_flow_id, 1) + 1;
		ts->next_round_delivered = tp->delivered;
	}
	ts->acks++;
	if (cfg->sample_every > 1 && ts->acks % cfg->sample_every)
		return NULL;
	if (cfg->once_per_rtt) {
		if ((s32)(tp->delivered - ts->next_round_delivered) < 0)
			return NULL;
		/* What is in flight now is delivered one round trip from now. */
		ts->next_round_delivered = tp->delivered + tcp_packets_in_flight(tp) + 1;
	}

	/* Atomic although per CPU: an ACK from a socket's backlog (process
	 * context) can be interrupted on this CPU by one in softirq, and a
	 * plain read-modify-write would lose one of the two counts. */
	produced = bpf_map_lookup_elem(&trace_produced, &zero);
	if (produced)
		__sync_fetch_and_add(produced, 1);
	e = bpf_ringbuf_reserve(&trace_events, sizeof(*e), 0);
	if (!e) {
		drops = bpf_map_lookup_elem(&trace_drops, &zero);
		/* Atomic although per CPU: an ACK processed from a socket's
		 * backlog (process context, softirqs enabled) can be
		 * interrupted on this CPU by one processed in softirq, and a
		 * plain read-modify-write would lose one of the two counts. */
		if (drops)
			__sync_fetch_and_add(drops, 1);
		return NULL;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->ts_ns = bpf_ktime_get_ns();
	e->flow_id = ts->flow_id;
	__builtin_memcpy(e->saddr, &local, sizeof(local));
	__builtin_memcpy(e->daddr, &remote, sizeof(remote));
	e->sport = sport;
	e->dport = dport;
	e->family = sk->__sk_common.skc_family;
	e->algo = algo;
	e->ca_state = tcp_ca_state(sk);
	e->cwnd = tcp_snd_cwnd(tp);
	e->ssthresh = tp->snd_ssthresh;
	e->mss = tp->mss_cache;
	e->pacing_rate = sk->sk_pacing_rate;
	e->delivery_rate = ccctl_sample_rate(rs, tp->mss_cache);
	e->srtt_us = tp->srtt_us >> 3;
	e->min_rtt_us = tcp_min_rtt(tp);
	e->in_flight = tcp_packets_in_flight(tp);
	e->edt_lead_ms = ccctl_edt_lead_ms(tp);
	e->delivered = tp->delivered;
	e->lost = tp->lost;
	e->total_retrans = tp->total_retrans;
	e->param_version = param_version;
	return e;
}

static __always_inline void ccctl_trace_commit(struct ccctl_event *e)
{
	u64 flags = bpf_ringbuf_query(&trace_events, BPF_RB_AVAIL_DATA) >= CCCTL_TRACE_WAKEUP_BYTES ?
			    BPF_RB_FORCE_WAKEUP :
			    BPF_RB_NO_WAKEUP;

	bpf_ringbuf_submit(e, flags);
}

#endif /* __CCCTL_TRACE_H */

/* SPDX-License-Identifier: GPL-2.0 */
/*
 * BBR's pacing-rate arithmetic, alone: no kernel type, no helper, so the
 * same lines compile into the BPF objects (through bbr_core.h) and into a
 * host program that ccctl-core's tests drive at the edge of u64
 * (core/build/rate_probe.c).
 *
 * Units, as tcp_bbr.c: a bandwidth is packets per microsecond << BW_SCALE;
 * a gain is << BBR_SCALE (256 = 1.0); a rate is bytes per second.
 */
#ifndef __BBR_RATE_H
#define __BBR_RATE_H

#define BW_SCALE 24 /* bandwidth: packets/us << 24 keeps 1 pkt/s above 0 */
#define BW_UNIT (1ULL << BW_SCALE)
#define BBR_SCALE 8 /* gains: 1/256 resolution is plenty */
#define BBR_UNIT (1 << BBR_SCALE)

/* Pace 1% below the estimated bandwidth, as tcp_bbr.c: the queue BBR's
 * own estimate error would build drains. */
#define BBR_PACING_MARGIN_PCT 1

#define BBR_RATE_SAT (~0ULL)

/* a x b, or ~0 where it would wrap.  The bound is hidden from clang, which
 * would otherwise turn the test into a 128-bit multiply BPF does not have. */
static inline __attribute__((always_inline)) unsigned long long
bbr_mul_sat(unsigned long long a, unsigned long long b)
{
	unsigned long long max = BBR_RATE_SAT;

	asm volatile("" : "+r"(max));
	return b && a > max / b ? BBR_RATE_SAT : a * b;
}

/* bw (BW_UNIT pkts/us) x gain -> bytes/s, less the pacing margin.  tcp_bbr.c's
 * arithmetic, saturating at ~0 (unpaced, capped below by sk_max_pacing_rate)
 * where it would wrap: a variant's gains (patched_bbr: up to 32 x 1.25 on a
 * bandwidth itself corrected up to 32x) wrap the u64 product for delivery
 * rates of a few Gbit/s.  Below that the result is the same bit for bit. */
static inline __attribute__((always_inline)) unsigned long long
bbr_rate_of(unsigned long long bw, unsigned int mss, unsigned int gain)
{
	unsigned long long rate;

	rate = bbr_mul_sat(bw, mss);
	rate = bbr_mul_sat(rate, gain);
	if (rate == BBR_RATE_SAT)
		return rate;
	rate >>= BBR_SCALE;
	rate = bbr_mul_sat(rate, 1000000ULL / 100 * (100 - BBR_PACING_MARGIN_PCT));
	if (rate == BBR_RATE_SAT)
		return rate;
	return rate >> BW_SCALE;
}

#endif /* __BBR_RATE_H */

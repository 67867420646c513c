/*
 * The BPF objects' pacing-rate arithmetic (bpf/bbr_rate.h) on the host, for
 * ccctl-core's tests (tests/pacing_rate_edge.rs): reads lines
 * "bw mss gain" from stdin and prints bbr_rate_of() of each, one per line.
 * Compiled by build.rs with the host's cc; never part of ccctl.
 */
#include <stdio.h>

#include "bbr_rate.h"

int main(void)
{
	unsigned long long bw;
	unsigned int mss, gain;

	while (scanf("%llu %u %u", &bw, &mss, &gain) == 3)
		printf("%llu\n", bbr_rate_of(bw, mss, gain));
	return 0;
}

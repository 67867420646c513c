/* SPDX-License-Identifier: GPL-2.0 */
/* The BPF target has no asm/ of its own: the generic UAPI definitions (64-bit
 * long, int-ll64) are the right ones.  Lets policy.bpf.c include <linux/bpf.h>
 * for the sockops, sockopt and bpf_sock context layouts. */
#include <asm-generic/posix_types.h>

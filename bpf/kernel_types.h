/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The few kernel types our congestion controls touch, declared by hand.
 *
 * Every struct carries preserve_access_index, so clang emits a CO-RE
 * relocation for each field access and libbpf rewrites the offsets against
 * the running kernel's BTF at load time.  That is what lets one object load
 * on Debian's 6.1 and on 6.18: only the field *names* and types below must
 * exist in both kernels, never their positions.  We list only what we use,
 * which doubles as a record of how much of struct tcp_sock we depend on.
 *
 * Why not a generated vmlinux.h?  It ties the build to the build host's
 * kernel and pulls in 130k lines; this file builds anywhere.
 */
#ifndef __CCCTL_KERNEL_TYPES_H
#define __CCCTL_KERNEL_TYPES_H

typedef unsigned char __u8;
typedef signed char __s8;
typedef unsigned short __u16;
typedef short __s16;
typedef unsigned int __u32;
typedef int __s32;
typedef unsigned long long __u64;
typedef long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;

typedef __u8 u8;
typedef __u16 u16;
typedef __u32 u32;
typedef __s32 s32;
typedef __u64 u64;
typedef __s64 s64;

typedef _Bool bool;
#define true 1
#define false 0

/* uapi (include/uapi/linux/bpf.h): a lock inside a map value, taken with
 * bpf_spin_lock() and by the kernel for BPF_F_LOCK map reads and writes. */
struct bpf_spin_lock {
	__u32 val;
};
/* uapi struct bpf_timer: opaque, embedded in a map value. */
struct bpf_timer {
	__u64 __opaque[2];
} __attribute__((aligned(8)));

#define CLOCK_MONOTONIC 1

/* uapi constants (include/uapi/linux/bpf.h) */
enum bpf_map_type {
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_SK_STORAGE = 24,
	BPF_MAP_TYPE_RINGBUF = 27,
};
/* bpf_ringbuf_submit() flags and bpf_ringbuf_query() selectors */
enum {
	BPF_RB_NO_WAKEUP = 1,
	BPF_RB_FORCE_WAKEUP = 2,
};
enum {
	BPF_RB_AVAIL_DATA = 0,
};
enum {
	BPF_ANY = 0,
	BPF_F_NO_PREALLOC = 1,
	BPF_SK_STORAGE_GET_F_CREATE = 1,
};

/* include/net/sock.h, include/net/tcp.h */
enum sk_pacing {
	SK_PACING_NONE = 0,
	SK_PACING_NEEDED = 1,
	SK_PACING_FQ = 2,
};

enum tcp_ca_state {
	TCP_CA_Open = 0,
	TCP_CA_Disorder = 1,
	TCP_CA_CWR = 2,
	TCP_CA_Recovery = 3,
	TCP_CA_Loss = 4,
};

enum tcp_ca_event {
	CA_EVENT_TX_START = 0,
	CA_EVENT_CWND_RESTART = 1,
	CA_EVENT_COMPLETE_CWR = 2,
	CA_EVENT_LOSS = 3,
	CA_EVENT_ECN_NO_CE = 4,
	CA_EVENT_ECN_IS_CE = 5,
};

#define TCP_CONG_NEEDS_ECN 0x2

struct in6_addr {
	union {
		__u8 u6_addr8[16];
		__be16 u6_addr16[8];
		__be32 u6_addr32[4];
	} in6_u;
} __attribute__((preserve_access_index));

struct sock_common {
	__be32 skc_daddr;
	__be32 skc_rcv_saddr;
	__be16 skc_dport;
	__u16 skc_num;
	unsigned short skc_family;
	struct in6_addr skc_v6_daddr;     /* AF_INET6 sockets (CONFIG_IPV6) */
	struct in6_addr skc_v6_rcv_saddr;
} __attribute__((preserve_access_index));

struct sock {
	struct sock_common __sk_common;
	unsigned long sk_pacing_rate;     /* bytes per second; BPF CCs may write */
	unsigned long sk_max_pacing_rate; /* SO_MAX_PACING_RATE cap */
	__u32 sk_pacing_status;           /* enum sk_pacing; BPF CCs may write */
	__u8 sk_pacing_shift;
} __attribute__((preserve_access_index));

struct inet_connection_sock {
	__u8 icsk_ca_state : 5;
	__u8 icsk_ca_initialized : 1;
	__u8 icsk_ca_setsockopt : 1;
	__u8 icsk_ca_dst_locked : 1;
	__u32 icsk_rto;                   /* retransmission timeout, jiffies */
	__u64 icsk_ca_priv[13];           /* 104 bytes of private CC state */
} __attribute__((preserve_access_index));

struct minmax_sample {
	__u32 t;
	__u32 v;
};

struct minmax {
	struct minmax_sample s[3];
};

struct tcp_sock {
	struct inet_connection_sock inet_conn;
	__u32 mss_cache;
	__u32 snd_una;
	__u32 snd_nxt;
	__u32 srtt_us;          /* smoothed RTT << 3, in us */
	struct minmax rtt_min;
	__u32 packets_out;
	__u32 retrans_out;
	__u32 sacked_out;
	__u32 lost_out;
	__u32 lost;             /* total packets marked lost */
	__u32 delivered;        /* total packets delivered, incl. retransmits */
	__u32 app_limited;      /* delivered count at which app-limit ends; writable from 6.4 */
	__u32 lsndtime;         /* jiffies of the last data sent */
	__u64 delivered_mstamp; /* us time of the last delivery */
	__u64 tcp_mstamp;       /* us time of the most recent packet received/sent */
	__u64 tcp_clock_cache;  /* ns clock, refreshed per event */
	__u64 tcp_wstamp_ns;    /* earliest departure time of the next packet */
	__u32 snd_cwnd;
	__u32 snd_cwnd_cnt;
	__u32 snd_cwnd_clamp;
	__u32 snd_cwnd_stamp;   /* writable from 6.10 */
	__u32 snd_ssthresh;
	__u32 total_retrans;
	__u32 data_segs_out;
	__u64 bytes_acked;
	__u64 bytes_retrans;
} __attribute__((preserve_access_index));

/* Only what patched BBR's transmit tracer reads (include/linux/skbuff.h). */
struct sk_buff {
	struct sock *sk;        /* owning socket, NULL if none */
} __attribute__((preserve_access_index));

struct rate_sample {
	__u64 prior_mstamp;     /* start of the sampling interval */
	__u32 prior_delivered;  /* tp->delivered at prior_mstamp */
	__s32 delivered;        /* packets delivered over the interval */
	long interval_us;       /* length of the interval */
	__u32 snd_interval_us;
	__u32 rcv_interval_us;
	long rtt_us;            /* RTT of the last (S)ACKed packet, -1 if none */
	int losses;             /* packets newly marked lost */
	__u32 acked_sacked;     /* packets newly (S)ACKed */
	__u32 prior_in_flight;
	bool is_app_limited;
	bool is_retrans;
	bool is_ack_delayed;
} __attribute__((preserve_access_index));

/*
 * The struct_ops type.  libbpf matches members with the kernel's by name,
 * so the two prototypes of cong_control (pre-6.10 and 6.10+) both fit the
 * one member below; which program goes into it is decided by the loader.
 */
struct tcp_congestion_ops {
	__u32 (*ssthresh)(struct sock *sk);
	void (*cong_avoid)(struct sock *sk, __u32 ack, __u32 acked);
	void (*set_state)(struct sock *sk, __u8 new_state);
	void (*cwnd_event)(struct sock *sk, enum tcp_ca_event ev);
	void (*in_ack_event)(struct sock *sk, __u32 flags);
	void (*pkts_acked)(struct sock *sk, const void *sample);
	__u32 (*min_tso_segs)(struct sock *sk);
	void (*cong_control)(struct sock *sk, __u32 ack, int flag, const struct rate_sample *rs);
	__u32 (*undo_cwnd)(struct sock *sk);
	__u32 (*sndbuf_expand)(struct sock *sk);
	char name[16];
	__u32 flags;
	void (*init)(struct sock *sk);
	void (*release)(struct sock *sk);
};

#endif /* __CCCTL_KERNEL_TYPES_H */

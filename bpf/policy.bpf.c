// SPDX-License-Identifier: GPL-2.0
/*
 * ccctl's rollout policy: which congestion control a new TCP connection
 * gets, by rules ccctl writes into pinned maps (ccctl_abi.h, "Rollout
 * policy"; ccctl_core::policy is the other half).
 *
 * Three programs, one object:
 *
 *   ccctl_policy_sockops      sockops, attached to a cgroup v2 (the root by
 *                             default, so every socket of the machine, in
 *                             every network namespace).  At
 *                             ACTIVE/PASSIVE_ESTABLISHED, when the 4-tuple
 *                             is final and before the kernel initialises
 *                             the congestion control, it finds the first
 *                             rule that matches and calls
 *                             bpf_setsockopt(TCP_CONGESTION).
 *   ccctl_policy_setsockopt   cgroup/setsockopt on the same cgroup: notes
 *                             that an application chose TCP_CONGESTION
 *                             itself (so a rule without enforce leaves it),
 *                             and refuses (EPERM) a change of a connection
 *                             an enforcing rule has set.
 *   ccctl_policy_rollback     iter/tcp: moves the live connections of one
 *                             rule's canary group back (bpf_setsockopt on
 *                             each), run by `ccctl policy rollback`.
 *   ccctl_policy_migrate      iter/tcp: gives the live (ESTABLISHED)
 *                             connections the rules match what the sockops
 *                             program would have given them at their
 *                             establishment, run by `ccctl policy apply
 *                             --migrate` (opt-in) after the flip.
 *
 * Both decide with one function, first_match() (and rule_pick() for the
 * canary split), so a migrated connection ends where a new one with its
 * 4-tuple would.  Everything a rule may ask for (the tuple, the namespace,
 * the cgroup ancestry) is read before the rule loop, never inside it: a
 * lazily read value doubles the states the verifier walks per rule, and
 * Linux 6.1's verifier gives up at 1 000 000 instructions.
 *
 * Why a socket's cgroup and not the attach point: one program at the root
 * serves every rule, so "first match wins" is one loop in one place; a
 * program per cgroup would run in an order set by the cgroup tree, not by
 * the policy file.  The socket's cgroup (sk_cgrp_data, set when the socket
 * was created, i.e. the creating process's cgroup) is read here, not the
 * current task's: ESTABLISHED runs in softirq, where "current" is whoever
 * was interrupted.
 */
#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "ccctl_abi.h"

typedef _Bool bool;
#define true 1
#define false 0

char _license[] SEC("license") = "GPL";

#define SOL_TCP 6
#define TCP_CONGESTION 13
#define AF_INET 2
#define AF_INET6 10
#define EPERM 1
#define TCP_ESTABLISHED 1

/* The kernel types read here, CO-RE (the `___pol` flavour matches the
 * kernel's type of the name before the three underscores). */
struct kernfs_node___pol {
	__u64 id;
} __attribute__((preserve_access_index));

struct cgroup_subsys_state___pol {
	struct cgroup_subsys_state___pol *parent;
} __attribute__((preserve_access_index));

struct cgroup___pol {
	struct cgroup_subsys_state___pol self; /* first member: a css is its cgroup */
	int level;
	struct kernfs_node___pol *kn;
} __attribute__((preserve_access_index));

struct sock_cgroup_data___pol {
	struct cgroup___pol *cgroup;
} __attribute__((preserve_access_index));

struct sock___pol {
	struct sock_cgroup_data___pol sk_cgrp_data;
} __attribute__((preserve_access_index));

struct in6_addr___pol {
	union {
		__u32 u6_addr32[4];
	} in6_u;
} __attribute__((preserve_access_index));

/* skc_daddr, skc_rcv_saddr: in anonymous members of the kernel's type;
 * libbpf's CO-RE matching finds them there by name. */
struct sock_common___pol {
	unsigned short skc_family;
	unsigned char skc_state;
	__u32 skc_daddr;
	__u32 skc_rcv_saddr;
	__u16 skc_dport; /* network order */
	__u16 skc_num;   /* host order */
	struct in6_addr___pol skc_v6_daddr;
	struct in6_addr___pol skc_v6_rcv_saddr;
} __attribute__((preserve_access_index));

struct bpf_iter_meta___pol {
	void *seq;
} __attribute__((preserve_access_index));

struct bpf_iter__tcp {
	struct bpf_iter_meta___pol *meta;
	struct sock_common___pol *sk_common;
	__u32 uid;
} __attribute__((preserve_access_index));

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * CCCTL_POLICY_MAX_RULES);
	__type(key, __u32);
	__type(value, struct ccctl_policy_rule);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} policy_rules SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ccctl_policy_hdr);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} policy_hdr SEC(".maps");

struct ccctl_policy_doc {
	__u32 len;
	__u8 json[CCCTL_POLICY_DOC_MAX];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct ccctl_policy_doc);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} policy_doc SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4 * CCCTL_POLICY_MAX_RULES);
	__type(key, __u32);
	__type(value, struct ccctl_policy_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} policy_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ccctl_policy_iter_cfg);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} policy_iter_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ccctl_policy_mig_cfg);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} policy_mig_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4 * CCCTL_POLICY_MAX_RULES);
	__type(key, __u32);
	__type(value, struct ccctl_policy_mig_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} policy_mig_stats SEC(".maps");

/* BPF_F_CLONE: an accepted connection starts with its listener's state, so
 * an application that chose TCP_CONGESTION on the listener keeps its choice
 * on the connections it accepts (as the kernel itself does). */
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC | BPF_F_CLONE);
	__type(key, int);
	__type(value, struct ccctl_policy_sk);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} policy_sk SEC(".maps");

/* The connection as the rules see it: addresses IPv4-mapped, network order. */
struct tuple {
	__u32 local[4];
	__u32 remote[4];
	__u16 lport; /* host order */
	__u16 rport;
};

/* FNV-1a over 32-bit words, then murmur3's finaliser so every output bit
 * depends on every input bit (the share is taken modulo 10000).  ccctl
 * computes the same (policy::canary_hash) for the dry run. */
static __always_inline __u32 mix_word(__u32 h, __u32 w)
{
	return (h ^ w) * 16777619u;
}

static __always_inline __u32 tuple_hash(const struct tuple *t)
{
	__u32 h = 2166136261u;
	int i;

	for (i = 0; i < 4; i++)
		h = mix_word(h, t->local[i]);
	for (i = 0; i < 4; i++)
		h = mix_word(h, t->remote[i]);
	h = mix_word(h, ((__u32)t->lport << 16) | t->rport);
	h ^= h >> 16;
	h *= 0x85ebca6bu;
	h ^= h >> 13;
	h *= 0xc2b2ae35u;
	h ^= h >> 16;
	return h;
}

static __always_inline bool in_net(const __u32 *addr, const __u32 *net, const __u32 *mask)
{
	return (addr[0] & mask[0]) == net[0] && (addr[1] & mask[1]) == net[1] &&
	       (addr[2] & mask[2]) == net[2] && (addr[3] & mask[3]) == net[3];
}

static __always_inline void stat_add(__u32 rule_id, int field)
{
	struct ccctl_policy_stats zero = {}, *s;

	s = bpf_map_lookup_elem(&policy_stats, &rule_id);
	if (!s) {
		bpf_map_update_elem(&policy_stats, &rule_id, &zero, BPF_NOEXIST);
		s = bpf_map_lookup_elem(&policy_stats, &rule_id);
		if (!s)
			return;
	}
	switch (field) {
	case 0: __sync_fetch_and_add(&s->canary, 1); break;
	case 1: __sync_fetch_and_add(&s->control, 1); break;
	case 2: __sync_fetch_and_add(&s->app_kept, 1); break;
	case 3: __sync_fetch_and_add(&s->failed, 1); break;
	case 4: __sync_fetch_and_add(&s->app_refused, 1); break;
	default: __sync_fetch_and_add(&s->rolled_back, 1); break;
	}
}

/* The ids of the socket's cgroup and its ancestors, by level (0 = root). */
static __always_inline void cgroup_ancestors(void *sk, __u64 *ids)
{
	struct cgroup___pol *cg = BPF_CORE_READ((struct sock___pol *)sk, sk_cgrp_data.cgroup);
	int i;

	for (i = 0; i < CCCTL_POLICY_CGROUP_LEVELS + 16; i++) {
		int level;

		if (!cg)
			break;
		level = BPF_CORE_READ(cg, level);
		if (level >= 0 && level < CCCTL_POLICY_CGROUP_LEVELS)
			ids[level & (CCCTL_POLICY_CGROUP_LEVELS - 1)] = BPF_CORE_READ(cg, kn, id);
		cg = (struct cgroup___pol *)BPF_CORE_READ(cg, self.parent);
	}
}

static __always_inline bool name_empty(const char *n)
{
	return n[0] == 0;
}

static __always_inline bool same_name(const char *a, const char *b)
{
	int i;

	for (i = 0; i < CCCTL_CA_NAME_MAX; i++) {
		if (a[i] != b[i])
			return false;
		if (!a[i])
			return true;
	}
	return true;
}

static __always_inline void mig_add(__u32 rule_id, int field)
{
	struct ccctl_policy_mig_stats zero = {}, *s;

	s = bpf_map_lookup_elem(&policy_mig_stats, &rule_id);
	if (!s) {
		bpf_map_update_elem(&policy_mig_stats, &rule_id, &zero, BPF_NOEXIST);
		s = bpf_map_lookup_elem(&policy_mig_stats, &rule_id);
		if (!s)
			return;
	}
	switch (field) {
	case 0: __sync_fetch_and_add(&s->canary, 1); break;
	case 1: __sync_fetch_and_add(&s->control, 1); break;
	case 2: __sync_fetch_and_add(&s->left, 1); break;
	case 3: __sync_fetch_and_add(&s->app_kept, 1); break;
	default: __sync_fetch_and_add(&s->failed, 1); break;
	}
}

/*
 * The rules in force: the half and its count, or false when none are.
 */
static __always_inline bool rules_in_force(__u32 *half, __u32 *count, __u32 *generation)
{
	struct ccctl_policy_hdr *hdr;
	__u32 zero = 0;

	hdr = bpf_map_lookup_elem(&policy_hdr, &zero);
	if (!hdr || hdr->active == 0 || hdr->active > 2)
		return false;
	*half = hdr->active == 2 ? 1 : 0;
	*count = *half ? hdr->count[1] : hdr->count[0];
	if (*count > CCCTL_POLICY_MAX_RULES)
		*count = CCCTL_POLICY_MAX_RULES;
	*generation = hdr->generation;
	return true;
}

/*
 * The first rule of `half` (of `count`) that matches the connection, or
 * NULL: the one decision both the sockops and the migration program make.
 * Its inputs are read by the caller, before the loop.
 */
static __always_inline struct ccctl_policy_rule *
first_match(const struct tuple *t, __u64 netns, const __u64 *cg_ids, __u32 half, __u32 count)
{
	__u32 i;

	for (i = 0; i < CCCTL_POLICY_MAX_RULES; i++) {
		struct ccctl_policy_rule *r;
		__u32 key = half * CCCTL_POLICY_MAX_RULES + i;

		if (i >= count)
			break;
		r = bpf_map_lookup_elem(&policy_rules, &key);
		if (!r)
			break;
		if ((r->match & CCCTL_PM_LOCAL_PORT) && r->local_port != t->lport)
			continue;
		if ((r->match & CCCTL_PM_REMOTE_PORT) && r->remote_port != t->rport)
			continue;
		if ((r->match & CCCTL_PM_LOCAL) && !in_net(t->local, r->local_net, r->local_mask))
			continue;
		if ((r->match & CCCTL_PM_REMOTE) && !in_net(t->remote, r->remote_net, r->remote_mask))
			continue;
		if ((r->match & CCCTL_PM_NETNS) && r->netns_cookie != netns)
			continue;
		if ((r->match & CCCTL_PM_CGROUP) &&
		    cg_ids[r->cgroup_level & (CCCTL_POLICY_CGROUP_LEVELS - 1)] != r->cgroup_id)
			continue;
		return r;
	}
	return NULL;
}

/* Canary or not (by the tuple's hash), and the name it gets ("" = leave it). */
static __always_inline bool rule_pick(const struct ccctl_policy_rule *r, const struct tuple *t,
				      char *name)
{
	bool canary = !(r->flags & CCCTL_POLICY_F_ROLLED_BACK) &&
		      (tuple_hash(t) % CCCTL_POLICY_SHARE_ONE) < r->share_bp;

	if (canary)
		__builtin_memcpy(name, r->algo, CCCTL_CA_NAME_MAX);
	else
		__builtin_memcpy(name, r->control, CCCTL_CA_NAME_MAX);
	name[CCCTL_CA_NAME_MAX - 1] = 0;
	return canary;
}

SEC("sockops")
int ccctl_policy_sockops(struct bpf_sock_ops *skops)
{
	__u64 cg_ids[CCCTL_POLICY_CGROUP_LEVELS] = {};
	struct ccctl_policy_rule *r;
	struct ccctl_policy_sk *st;
	struct tuple t = {};
	char name[CCCTL_CA_NAME_MAX] = {};
	__u32 half, count, generation, rule_id, rflags, i;
	__u32 family, l4, r4, l6[4], r6[4], lport, rport;
	__u64 netns;
	void *sk, *tp;
	bool canary;

	if (skops->op != BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB &&
	    skops->op != BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB)
		return 1;
	if (!rules_in_force(&half, &count, &generation))
		return 1;
	sk = skops->sk;
	if (!sk)
		return 1;

	/* Every context field read once, straight-line: the verifier refuses
	 * a context pointer the compiler has offset for a later branch. */
	family = skops->family;
	l4 = skops->local_ip4;
	r4 = skops->remote_ip4;
	l6[0] = skops->local_ip6[0];
	l6[1] = skops->local_ip6[1];
	l6[2] = skops->local_ip6[2];
	l6[3] = skops->local_ip6[3];
	r6[0] = skops->remote_ip6[0];
	r6[1] = skops->remote_ip6[1];
	r6[2] = skops->remote_ip6[2];
	r6[3] = skops->remote_ip6[3];
	lport = skops->local_port;
	rport = skops->remote_port;
	barrier_var(family);
	if (family == AF_INET) {
		t.local[2] = bpf_htonl(0xffff);
		t.local[3] = l4;
		t.remote[2] = bpf_htonl(0xffff);
		t.remote[3] = r4;
	} else if (family == AF_INET6) {
		for (i = 0; i < 4; i++) {
			t.local[i] = l6[i];
			t.remote[i] = r6[i];
		}
	} else {
		return 1;
	}
	t.lport = (__u16)lport;
	t.rport = (__u16)bpf_ntohl(rport);
	netns = bpf_get_netns_cookie(skops);
	/*
	 * The cgroup ancestry once, before the rules, whether or not a rule
	 * asks for it (16 reads per new connection).  Read lazily inside the
	 * loop, its "read yet?" flag doubled the states the verifier walks per
	 * rule: Linux 6.1's verifier gave up after 1 000 000 instructions
	 * (E2BIG), 6.18's did not.  No tcp_sock: ids stay 0, no cgroup rule
	 * matches (cgroup ids are never 0).
	 */
	tp = bpf_skc_to_tcp_sock(sk);
	if (tp)
		cgroup_ancestors(tp, cg_ids);

	r = first_match(&t, netns, cg_ids, half, count);
	if (!r)
		return 1;
	/* First match: this rule decides. */
	rule_id = r->rule_id;
	rflags = r->flags;
	canary = rule_pick(r, &t, name);
	st = bpf_sk_storage_get(&policy_sk, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!st)
		return 1;
	if ((st->flags & CCCTL_POLICY_SK_APP_SET) && !(rflags & CCCTL_POLICY_F_ENFORCE)) {
		stat_add(rule_id, 2);
		return 1;
	}
	st->rule_id = rule_id;
	st->group = canary ? CCCTL_POLICY_GROUP_CANARY : CCCTL_POLICY_GROUP_CONTROL;
	st->gen = (__u16)generation;
	if (name_empty(name)) {
		stat_add(rule_id, 1);
		return 1;
	}
	bpf_getsockopt(skops, SOL_TCP, TCP_CONGESTION, st->prev, sizeof(st->prev));
	if (bpf_setsockopt(skops, SOL_TCP, TCP_CONGESTION, name, sizeof(name))) {
		st->group = CCCTL_POLICY_GROUP_NONE;
		stat_add(rule_id, 3);
		return 1;
	}
	if (rflags & CCCTL_POLICY_F_ENFORCE)
		st->flags |= CCCTL_POLICY_SK_ENFORCED;
	stat_add(rule_id, canary ? 0 : 1);
	return 1;
}

SEC("cgroup/setsockopt")
int ccctl_policy_setsockopt(struct bpf_sockopt *ctx)
{
	struct ccctl_policy_sk *st;
	struct bpf_sock *sk;

	if (ctx->level != SOL_TCP || ctx->optname != TCP_CONGESTION) {
		/* Not ours: an optval beyond a page is the kernel's to read. */
		if (ctx->optlen > 4096)
			ctx->optlen = 0;
		return 1;
	}
	sk = ctx->sk;
	if (!sk)
		return 1;
	st = bpf_sk_storage_get(&policy_sk, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!st)
		return 1;
	if (st->flags & CCCTL_POLICY_SK_ENFORCED) {
		stat_add(st->rule_id, 4);
		return 0; /* EPERM: an enforcing rule chose this connection's algorithm */
	}
	st->flags |= CCCTL_POLICY_SK_APP_SET;
	return 1;
}

SEC("iter/tcp")
int ccctl_policy_rollback(struct bpf_iter__tcp *ctx)
{
	struct sock_common___pol *skc = ctx->sk_common;
	struct ccctl_policy_iter_cfg *cfg;
	struct ccctl_policy_sk *st;
	char name[CCCTL_CA_NAME_MAX] = {};
	__u32 zero = 0;
	void *tp;

	if (!skc)
		return 0;
	tp = bpf_skc_to_tcp_sock(skc);
	if (!tp)
		return 0;
	cfg = bpf_map_lookup_elem(&policy_iter_cfg, &zero);
	if (!cfg || cfg->rule_id == 0)
		return 0;
	st = bpf_sk_storage_get(&policy_sk, tp, 0, 0);
	if (!st || st->rule_id != cfg->rule_id || st->group != CCCTL_POLICY_GROUP_CANARY)
		return 0;
	if (cfg->to[0])
		__builtin_memcpy(name, cfg->to, CCCTL_CA_NAME_MAX);
	else
		__builtin_memcpy(name, st->prev, CCCTL_CA_NAME_MAX);
	name[CCCTL_CA_NAME_MAX - 1] = 0;
	if (!name[0])
		return 0;
	if (bpf_setsockopt(tp, SOL_TCP, TCP_CONGESTION, name, sizeof(name))) {
		__sync_fetch_and_add(&cfg->failed, 1);
		return 0;
	}
	st->group = CCCTL_POLICY_GROUP_ROLLED_BACK;
	st->flags &= ~CCCTL_POLICY_SK_ENFORCED;
	__sync_fetch_and_add(&cfg->moved, 1);
	stat_add(cfg->rule_id, 5);
	return 0;
}

/*
 * The connection's tuple from its sock_common (IPv4 written IPv4-mapped,
 * as the sockops program writes it); false for other families.
 */
static __always_inline bool sk_tuple(struct sock_common___pol *skc, struct tuple *t)
{
	unsigned short family = BPF_CORE_READ(skc, skc_family);

	if (family == AF_INET) {
		t->local[2] = bpf_htonl(0xffff);
		t->local[3] = BPF_CORE_READ(skc, skc_rcv_saddr);
		t->remote[2] = bpf_htonl(0xffff);
		t->remote[3] = BPF_CORE_READ(skc, skc_daddr);
	} else if (family == AF_INET6) {
		bpf_core_read(t->local, sizeof(t->local), &skc->skc_v6_rcv_saddr);
		bpf_core_read(t->remote, sizeof(t->remote), &skc->skc_v6_daddr);
	} else {
		return false;
	}
	t->lport = BPF_CORE_READ(skc, skc_num);
	t->rport = bpf_ntohs(BPF_CORE_READ(skc, skc_dport));
	return true;
}

/*
 * Opt-in migration (`ccctl policy apply --migrate`), run after the new
 * rules are in force, once per network namespace (cfg->netns_cookie is
 * the one walked).  An ESTABLISHED connection the rules match gets what
 * the sockops program gives a new one with its tuple, and the same socket
 * storage (rule, group, the algorithm it had), so a later rollback moves
 * it back.  Skipped: connections this apply's rules already took at their
 * establishment (st->gen), and, unless the rule enforces, connections
 * whose application chose TCP_CONGESTION itself.  That choice is known
 * only for sockets the setsockopt program saw (created while a policy was
 * installed); for the others a congestion control other than the
 * namespace's default, not set by a rule of ours, is presumed to be the
 * application's (or a route's, or a listener's) and left alone.
 */
SEC("iter/tcp")
int ccctl_policy_migrate(struct bpf_iter__tcp *ctx)
{
	struct sock_common___pol *skc = ctx->sk_common;
	__u64 cg_ids[CCCTL_POLICY_CGROUP_LEVELS] = {};
	struct ccctl_policy_mig_cfg *cfg;
	struct ccctl_policy_rule *r;
	struct ccctl_policy_sk *st;
	struct tuple t = {};
	char name[CCCTL_CA_NAME_MAX] = {};
	char cur[CCCTL_CA_NAME_MAX] = {};
	__u32 zero = 0, half, count, generation, rule_id, rflags;
	bool canary, chosen;
	void *tp;

	if (!skc)
		return 0;
	tp = bpf_skc_to_tcp_sock(skc);
	if (!tp)
		return 0;
	if (BPF_CORE_READ(skc, skc_state) != TCP_ESTABLISHED)
		return 0;
	cfg = bpf_map_lookup_elem(&policy_mig_cfg, &zero);
	if (!cfg || cfg->generation == 0)
		return 0;
	if (!rules_in_force(&half, &count, &generation) || generation != cfg->generation)
		return 0;
	if (!sk_tuple(skc, &t))
		return 0;
	__sync_fetch_and_add(&cfg->seen, 1);
	st = bpf_sk_storage_get(&policy_sk, tp, 0, 0);
	if (st && st->rule_id && st->gen == (__u16)generation)
		return 0;
	cgroup_ancestors(tp, cg_ids);

	r = first_match(&t, cfg->netns_cookie, cg_ids, half, count);
	if (!r)
		return 0;
	rule_id = r->rule_id;
	rflags = r->flags;
	canary = rule_pick(r, &t, name);
	bpf_getsockopt(tp, SOL_TCP, TCP_CONGESTION, cur, sizeof(cur));
	cur[CCCTL_CA_NAME_MAX - 1] = 0;
	if (st && (st->flags & CCCTL_POLICY_SK_APP_SET))
		chosen = true;
	else if (st && st->rule_id)
		chosen = false; /* a rule of ours set it */
	else
		chosen = !same_name(cur, cfg->dflt);
	if (chosen && !(rflags & CCCTL_POLICY_F_ENFORCE)) {
		mig_add(rule_id, 3);
		return 0;
	}
	if (!st)
		st = bpf_sk_storage_get(&policy_sk, tp, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!st)
		return 0;
	st->rule_id = rule_id;
	st->group = canary ? CCCTL_POLICY_GROUP_CANARY : CCCTL_POLICY_GROUP_CONTROL;
	st->gen = (__u16)generation;
	if (name_empty(name)) {
		mig_add(rule_id, 2);
		return 0;
	}
	__builtin_memcpy(st->prev, cur, CCCTL_CA_NAME_MAX);
	if (bpf_setsockopt(tp, SOL_TCP, TCP_CONGESTION, name, sizeof(name))) {
		st->group = CCCTL_POLICY_GROUP_NONE;
		mig_add(rule_id, 4);
		return 0;
	}
	if (rflags & CCCTL_POLICY_F_ENFORCE)
		st->flags |= CCCTL_POLICY_SK_ENFORCED;
	mig_add(rule_id, canary ? 0 : 1);
	return 0;
}

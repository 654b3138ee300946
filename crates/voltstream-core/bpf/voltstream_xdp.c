// SPDX-License-Identifier: BSD-3-Clause
/*
 * voltstream's XDP program: hands the capture's UDP flow to its AF_XDP socket.
 *
 * Redirected into the XSKMAP entry of the receiving queue: IPv4/UDP (with at
 * most one 802.1Q/802.1ad tag) to our destination port, and to our address
 * unless it is 0.0.0.0 (with multicast groups: unicast or a joined group),
 * first fragments included (user space counts those malformed, as the
 * packet-ring engine does); and, when the capture is bound to an IPv6
 * address (or [::], which takes both families), IPv6/UDP to our port and
 * address whose fixed header is followed by UDP directly. IPv6 extension
 * headers are not walked here (a bounded loop over them costs verifier
 * complexity for traffic our senders never emit): such frames are passed to
 * the stack. Everything else - ARP, ssh, other ports, non-first fragments -
 * gets XDP_PASS and reaches the kernel stack unchanged.
 *
 * Configuration is read-only global data (`vs_cfg`) that the loader writes
 * before the program is loaded, so the verifier sees constants.
 *
 * Built by build.rs with `clang -O2 -g -target bpf` (the -g gives the BTF that
 * libbpf needs for the map definitions below) and embedded in the Rust crate.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

/* Most multicast groups: `MAX_GROUPS` in src/capture/multicast.rs. */
#define VS_MAX_GROUPS 16

/* Keep in sync with `BpfConfig` in src/capture/xdp.rs. */
struct vs_config {
	__u32 addr;    /* destination address, network order; 0: any */
	__u16 port;    /* destination port, network order */
	__u16 pad;
	__u32 max_len; /* non-zero: cut longer frames to this many bytes */
	__u32 ngroups; /* non-zero: only these multicast groups (and unicast) */
	__u32 groups[VS_MAX_GROUPS]; /* network order */
	__u32 families; /* VS_IPV4 | VS_IPV6: which IP versions are ours */
	__u32 addr6[4]; /* IPv6 destination address, network order; all zero: any */
};

#define VS_IPV4 1
#define VS_IPV6 2

const volatile struct vs_config vs_cfg = {};

/* Counters, one slot per CPU: user space sums them. */
enum {
	VS_MATCHED = 0,   /* frames of our flow (redirected or not) */
	VS_NO_SOCKET = 1, /* ours, but no socket on the receiving queue: dropped */
	VS_CUT = 2,       /* ours, longer than a UMEM frame: cut (user space sees it truncated) */
	VS_NCOUNTERS = 3,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, VS_NCOUNTERS);
	__type(key, __u32);
	__type(value, __u64);
} vs_counters SEC(".maps");

/* Queue index -> AF_XDP socket; max_entries is set by the loader. */
struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} vs_xsks SEC(".maps");

static __always_inline void count(__u32 which)
{
	__u64 *c = bpf_map_lookup_elem(&vs_counters, &which);

	if (c)
		*c += 1;
}

/* With groups configured: unicast, or one of the joined groups. Other groups
 * are not ours: XDP_PASS, and the stack drops them (no membership) or hands
 * them to the program that joined them. */
static __always_inline int dst_wanted(__be32 daddr)
{
	int i;

	if (!vs_cfg.ngroups)
		return 1;
	if ((daddr & bpf_htonl(0xf0000000)) != bpf_htonl(0xe0000000))
		return 1;
#pragma unroll
	for (i = 0; i < VS_MAX_GROUPS; i++)
		if (i < vs_cfg.ngroups && vs_cfg.groups[i] == daddr)
			return 1;
	return 0;
}

/* The IPv6 destination is ours: any (all zero configured) or exactly it.
 * Without branches per word: a branch per byte made the verifier walk every
 * combination and give up. */
static __always_inline int addr6_wanted(const struct in6_addr *daddr)
{
	__u32 any = 0, diff = 0;
	int i;

#pragma unroll
	for (i = 0; i < 4; i++) {
		any |= vs_cfg.addr6[i];
		diff |= vs_cfg.addr6[i] ^ daddr->in6_u.u6_addr32[i];
	}
	return !any || !diff;
}

struct vlan_tag {
	__be16 tci;
	__be16 proto;
};

SEC("xdp")
int voltstream_xdp(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip;
	struct udphdr *udp;
	__u32 ihl, len;
	__be16 proto;
	long act;

	if ((void *)(eth + 1) > end)
		return XDP_PASS;
	proto = eth->h_proto;
	ip = (void *)(eth + 1);
	if (proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD)) {
		struct vlan_tag *tag = (void *)(eth + 1);

		if ((void *)(tag + 1) > end)
			return XDP_PASS;
		proto = tag->proto;
		ip = (void *)(tag + 1);
	}
	if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)ip;

		if (!(vs_cfg.families & VS_IPV6))
			return XDP_PASS;
		if ((void *)(ip6 + 1) > end)
			return XDP_PASS;
		if (ip6->nexthdr != IPPROTO_UDP)
			return XDP_PASS; /* another protocol, or extension headers */
		if (!addr6_wanted(&ip6->daddr))
			return XDP_PASS;
		udp = (void *)(ip6 + 1);
	} else {
		if (proto != bpf_htons(ETH_P_IP) || !(vs_cfg.families & VS_IPV4))
			return XDP_PASS;
		if ((void *)(ip + 1) > end)
			return XDP_PASS;
		if (ip->protocol != IPPROTO_UDP)
			return XDP_PASS;
		if (ip->frag_off & bpf_htons(0x1fff))
			return XDP_PASS; /* a later fragment: no UDP header to match */
		if (vs_cfg.addr && ip->daddr != vs_cfg.addr)
			return XDP_PASS;
		if (!dst_wanted(ip->daddr))
			return XDP_PASS;
		ihl = ip->ihl * 4;
		if (ihl < sizeof(*ip))
			return XDP_PASS;
		udp = (void *)ip + ihl;
	}
	if ((void *)(udp + 1) > end)
		return XDP_PASS;
	if (udp->dest != vs_cfg.port)
		return XDP_PASS;

	count(VS_MATCHED);
	len = end - data;
	if (vs_cfg.max_len && len > vs_cfg.max_len) {
		/* The socket cannot take a frame this long whole (no multi-buffer):
		 * cut it, so user space sees an IP length longer than what arrived
		 * and counts one malformed packet instead of the kernel silently
		 * dropping it. */
		if (bpf_xdp_adjust_tail(ctx, (int)vs_cfg.max_len - (int)len) == 0)
			count(VS_CUT);
	}
	act = bpf_redirect_map(&vs_xsks, ctx->rx_queue_index, 0);
	if (act != XDP_REDIRECT) {
		count(VS_NO_SOCKET);
		return XDP_DROP;
	}
	return XDP_REDIRECT;
}

char _license[] SEC("license") = "BSD";

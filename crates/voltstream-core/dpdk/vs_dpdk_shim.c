/* The few DPDK calls the DPDK capture engine (src/capture/dpdk.rs) needs, as
 * plain functions: rte_eth_rx_burst and the mbuf accessors are static inline
 * in DPDK's headers, so Rust cannot call them directly. Compiled by build.rs
 * (build_dpdk.rs) only with the `dpdk` cargo feature.
 *
 * Every function that can fail returns 0 or a negative errno and, where it
 * takes `err`, writes a sentence saying which step failed into it. */

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include <rte_dev.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

static int fail(char *err, size_t len, int code, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(err, len, fmt, ap);
	va_end(ap);
	if (n >= 0 && (size_t)n < len)
		snprintf(err + n, len - n, ": %s", rte_strerror(code < 0 ? -code : code));
	return code < 0 ? code : -code;
}

int vs_eal_init(int argc, char **argv, char *err, size_t len)
{
	int r = rte_eal_init(argc, argv);

	if (r < 0)
		return fail(err, len, rte_errno, "rte_eal_init failed (see the EAL log above)");
	return 0;
}

/* Registers the calling (capture) thread with the EAL, so that it gets an
 * lcore id and with it a per-lcore mempool cache. */
int vs_thread_register(void)
{
	return rte_thread_register() < 0 ? -rte_errno : 0;
}

void vs_thread_unregister(void)
{
	rte_thread_unregister();
}

/* Finds the ethdev called `name`, probing `devargs` first when none exists. */
int vs_port_open(const char *name, const char *devargs, uint16_t *port, char *err,
		 size_t len)
{
	int r;

	if (rte_eth_dev_get_port_by_name(name, port) == 0)
		return 0;
	r = rte_dev_probe(devargs);
	if (r < 0)
		return fail(err, len, r, "cannot probe DPDK device '%s'", devargs);
	r = rte_eth_dev_get_port_by_name(name, port);
	if (r < 0)
		return fail(err, len, r, "probed '%s' but found no port named '%s'", devargs,
			    name);
	return 0;
}

struct vs_port_info {
	char driver[64];
	int32_t numa_node;
	uint16_t min_mtu;
	uint16_t max_mtu;
	uint32_t max_rx_pktlen;
	uint16_t rx_desc_max;
	uint16_t rx_desc_min;
	uint16_t rx_desc_align;
	uint8_t scatter_capable;
	uint8_t started;
};

int vs_port_info(uint16_t port, struct vs_port_info *out, char *err, size_t len)
{
	struct rte_eth_dev_info info;
	int r = rte_eth_dev_info_get(port, &info);

	if (r < 0)
		return fail(err, len, r, "rte_eth_dev_info_get(port %u) failed", port);
	memset(out, 0, sizeof(*out));
	snprintf(out->driver, sizeof(out->driver), "%s", info.driver_name ? info.driver_name : "");
	out->numa_node = rte_eth_dev_socket_id(port);
	out->min_mtu = info.min_mtu;
	out->max_mtu = info.max_mtu;
	out->max_rx_pktlen = info.max_rx_pktlen;
	out->rx_desc_max = info.rx_desc_lim.nb_max;
	out->rx_desc_min = info.rx_desc_lim.nb_min;
	out->rx_desc_align = info.rx_desc_lim.nb_align;
	out->scatter_capable = (info.rx_offload_capa & RTE_ETH_RX_OFFLOAD_SCATTER) != 0;
	return 0;
}

struct rte_mempool *vs_pool_create(const char *name, unsigned int n, unsigned int cache,
				   uint16_t data_room, int numa_node, char *err, size_t len)
{
	struct rte_mempool *mp =
		rte_pktmbuf_pool_create(name, n, cache, 0, data_room, numa_node);

	if (mp == NULL)
		fail(err, len, rte_errno,
		     "cannot create a pool of %u mbufs of %u bytes on NUMA node %d", n,
		     (unsigned int)data_room, numa_node);
	return mp;
}

static void lock_chunk(struct rte_mempool *mp, void *opaque,
		       struct rte_mempool_memhdr *memhdr, unsigned int idx)
{
	int *failed = opaque;

	(void)mp;
	(void)idx;
	if (mlock(memhdr->addr, memhdr->len) != 0)
		*failed = -errno;
}

/* Locks the pool's memory (already populated) so it is never swapped out. */
int vs_pool_lock(struct rte_mempool *mp)
{
	int failed = 0;

	rte_mempool_mem_iter(mp, lock_chunk, &failed);
	return failed;
}

void vs_pool_free(struct rte_mempool *mp)
{
	rte_mempool_free(mp);
}

unsigned int vs_pool_in_use(const struct rte_mempool *mp)
{
	return rte_mempool_in_use_count(mp);
}

/* One RX queue (and no TX queue) on `port`, `nb_rxd` descriptors filled from
 * `mp`; `mtu` 0 leaves the port's MTU alone. */
int vs_port_start(uint16_t port, struct rte_mempool *mp, uint16_t nb_rxd, uint16_t mtu,
		  int scatter, int promiscuous, int numa_node, char *err, size_t len)
{
	struct rte_eth_conf conf;
	int r;

	memset(&conf, 0, sizeof(conf));
	conf.rxmode.mtu = mtu;
	if (scatter)
		conf.rxmode.offloads |= RTE_ETH_RX_OFFLOAD_SCATTER;
	r = rte_eth_dev_configure(port, 1, 0, &conf);
	if (r < 0)
		return fail(err, len, r, "rte_eth_dev_configure(port %u, mtu %u) failed", port,
			    (unsigned int)mtu);
	r = rte_eth_dev_adjust_nb_rx_tx_desc(port, &nb_rxd, NULL);
	if (r < 0)
		return fail(err, len, r, "rte_eth_dev_adjust_nb_rx_tx_desc(port %u) failed", port);
	r = rte_eth_rx_queue_setup(port, 0, nb_rxd, numa_node, NULL, mp);
	if (r < 0)
		return fail(err, len, r, "rte_eth_rx_queue_setup(port %u, %u descriptors) failed",
			    port, (unsigned int)nb_rxd);
	r = rte_eth_dev_start(port);
	if (r < 0)
		return fail(err, len, r, "rte_eth_dev_start(port %u) failed", port);
	if (promiscuous)
		rte_eth_promiscuous_enable(port); /* best effort: unicast to us works anyway */
	rte_eth_stats_reset(port);
	return nb_rxd;
}

/* Stops and closes `port`; `remove` also detaches its device (for a vdev we
 * probed), so that the same name can be probed again later in this process. */
void vs_port_close(uint16_t port, int remove)
{
	struct rte_eth_dev_info info;
	struct rte_device *dev = NULL;

	if (rte_eth_dev_info_get(port, &info) == 0)
		dev = info.device;
	rte_eth_dev_stop(port);
	rte_eth_dev_close(port);
	if (remove && dev != NULL)
		rte_dev_remove(dev);
}

/* What the engine reads of one received mbuf. */
struct vs_frame {
	const uint8_t *data; /* first segment */
	uint32_t data_len;   /* bytes in the first segment */
	uint32_t pkt_len;    /* bytes in all segments */
	uint16_t nb_segs;
};

uint16_t vs_rx(uint16_t port, struct rte_mbuf **bufs, uint16_t n, struct vs_frame *frames)
{
	uint16_t got = rte_eth_rx_burst(port, 0, bufs, n);

	for (uint16_t i = 0; i < got; i++) {
		const struct rte_mbuf *m = bufs[i];

		frames[i].data = rte_pktmbuf_mtod(m, const uint8_t *);
		frames[i].data_len = m->data_len;
		frames[i].pkt_len = m->pkt_len;
		frames[i].nb_segs = m->nb_segs;
	}
	return got;
}

/* Copies every segment of `m` into `dst`; returns the bytes copied, or
 * UINT32_MAX when they do not fit in `cap`. */
uint32_t vs_mbuf_join(const struct rte_mbuf *m, uint8_t *dst, uint32_t cap)
{
	uint32_t at = 0;

	for (; m != NULL; m = m->next) {
		if (m->data_len > cap - at)
			return UINT32_MAX;
		memcpy(dst + at, rte_pktmbuf_mtod(m, const uint8_t *), m->data_len);
		at += m->data_len;
	}
	return at;
}

void vs_free(struct rte_mbuf **bufs, unsigned int n)
{
	rte_pktmbuf_free_bulk(bufs, n);
}

struct vs_stats {
	uint64_t ipackets;
	uint64_t ibytes;
	uint64_t imissed;
	uint64_t ierrors;
	uint64_t rx_nombuf;
};

int vs_stats(uint16_t port, struct vs_stats *out)
{
	struct rte_eth_stats s;
	int r = rte_eth_stats_get(port, &s);

	if (r < 0)
		return r;
	out->ipackets = s.ipackets;
	out->ibytes = s.ibytes;
	out->imissed = s.imissed;
	out->ierrors = s.ierrors;
	out->rx_nombuf = s.rx_nombuf;
	return 0;
}

//! DPDK engine: one receive queue of one DPDK port, read with `rte_eth_rx_burst`
//! from a poll-mode driver, built with the cargo feature `dpdk` (off by default;
//! needs libdpdk 22.11+, Debian: dpdk-dev). The DPDK calls go through a small C
//! shim (dpdk/vs_dpdk_shim.c, compiled by build_dpdk.rs) because the burst and
//! mbuf functions are static inline in DPDK's headers.
//!
//! Ports ([`DpdkPort`]):
//! - `AfPacket { interface }`: a kernel interface through DPDK's `net_af_packet`
//!   virtual device, with its ring sized by us so that every frame of the
//!   configured size fits (see truncation below). For tests (a veth) and for
//!   hosts without a NIC bound to a DPDK driver. As in the packet-ring engine, a
//!   plain UDP socket (the *guard*) holds the port with a drop-all filter, so no
//!   other capture takes it and the kernel never answers with ICMP.
//! - `Device(devargs)`: what the EAL would take after `-a`/`--vdev`: a PCI
//!   address (`0000:3b:00.0`, the NIC bound to vfio-pci) or a virtual device
//!   (`net_af_packet0,iface=eth1,framesz=...`). No guard: the NIC is DPDK's.
//!
//! EAL: initialised once per process, on the first open, with `--in-memory`
//! (`--no-shconf` and a per-process file prefix with `--no-huge`: no shared
//! files in /var/run/dpdk, so several processes can run side by side),
//! `--no-telemetry`, the main lcore on every CPU the process may use (so the
//! caller's thread is not pinned), `--no-pci` unless the port is a PCI device
//! (then `-a` that device), `--no-huge -m N` with a warning when no huge pages
//! are reserved, then [`DpdkConfig::eal_args`]. The EAL cannot be initialised
//! twice, so later captures in the process reuse it; devices are probed per
//! capture (hotplug) and removed again when the capture ends.
//!
//! Memory: the mbuf pool is created on the port's NUMA node (any node when the
//! port has none, or when that node has no memory, with a warning), its memory
//! is populated when the pool is created and locked (`mlock`), and with huge
//! pages it lives in them. The capture thread registers itself with the EAL on
//! its first batch, for a per-lcore mempool cache.
//!
//! Classification (`capture/flow.rs`, as in the packet-ring and AF_XDP
//! engines): the engine sees every frame of the port. Frames that are not
//! UDP (IPv4, or IPv6 with any extension headers) to our port and address
//! (any, when bound to 0.0.0.0; either family, bound to `[::]`), and later IP
//! fragments, are counted in [`DpdkCounts::other`] and not passed on. Ours
//! that are cut short are counted in [`DpdkCounts::cut`]; those, a payload
//! longer than `max_packet`, a first fragment, or lengths that do not add up
//! are [`Received::Truncated`] (counted malformed by the assembler).
//!
//! Truncation: `net_af_packet` copies at most `framesz - 80` bytes of each frame
//! (from the IP header on; the TPACKET_V2 frame starts with its header) and says
//! nothing when it cuts one. A frame shorter than its IP length field is
//! therefore reported truncated and counted in [`DpdkCounts::cut`]. At open, a
//! `framesz` that cannot hold `max_packet` is refused with what to set instead:
//! a capture that would cut every packet of its own format never starts.
//!
//! Multi-segment mbufs (scattered RX of jumbo frames on NICs whose buffers are
//! smaller than a frame) are joined into a scratch buffer of the largest frame
//! size and counted in [`DpdkCounts::joined`]; one longer than that is truncated.
//!
//! Loss ([`Engine::kernel_drops`]): `rte_eth_stats` `imissed` (the NIC or the
//! kernel ring had no room) + `rx_nombuf` (no mbuf to refill a descriptor) +
//! `ierrors` (frames the NIC received in error, e.g. longer than the MTU).

// Without the feature only the stub engine and the tests use the helpers.
#![cfg_attr(not(feature = "dpdk"), allow(dead_code))]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::limits::within;
use super::{Engine, NetworkSpec, Sink};
use crate::{Error, Result};

/// Bytes in front of the frame's IP header in a TPACKET_V2 ring frame of
/// `net_af_packet`: TPACKET_ALIGN(TPACKET2_HDRLEN (52) + 16), the Ethernet
/// header ending there.
const AF_PACKET_NET_OFFSET: usize = 80;
/// IPv4 header without options plus UDP header.
const IP_UDP: usize = 28;
/// Ethernet header with one VLAN tag.
const ETH_VLAN: usize = 18;
/// `net_af_packet`'s default `framesz`.
const AF_PACKET_DEFAULT_FRAMESZ: usize = 2048;

/// Which DPDK port the engine receives from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DpdkPort {
    /// A kernel interface through `net_af_packet`, ring sized by voltstream.
    AfPacket { interface: String },
    /// EAL device arguments: a PCI address or a virtual device with its options.
    Device(String),
}

impl DpdkPort {
    /// A PCI address (`0000:3b:00.0` or `3b:00.0`) or device arguments
    /// (`net_...,key=value,...`) as a [`DpdkPort::Device`]; anything else is
    /// taken as the name of a kernel interface ([`DpdkPort::AfPacket`]).
    pub fn parse(s: &str) -> Result<Self> {
        let s = s.trim();
        if s.is_empty() {
            return Err(Error::Config(
                "empty DPDK port; give a PCI address (0000:3b:00.0), device arguments \
                 (net_af_packet0,iface=eth1,framesz=9216) or an interface name"
                    .into(),
            ));
        }
        if let Some(pci) = pci_address(s) {
            return Ok(DpdkPort::Device(pci));
        }
        if s.starts_with("net_") || s.starts_with("eth_") || s.contains(',') {
            return Ok(DpdkPort::Device(s.to_string()));
        }
        Ok(DpdkPort::AfPacket {
            interface: s.to_string(),
        })
    }

    /// True for a PCI device (the EAL must scan the PCI bus for it).
    pub fn is_pci(&self) -> bool {
        matches!(self, DpdkPort::Device(d) if pci_address(d).is_some())
    }
}

/// `dddd:bb:dd.f` (domain added when missing) when `s` is a PCI address.
fn pci_address(s: &str) -> Option<String> {
    let (head, func) = s.split_once('.')?;
    let parts: Vec<&str> = head.split(':').collect();
    let hex = |p: &str, n: usize| p.len() == n && p.chars().all(|c| c.is_ascii_hexdigit());
    let ok = func.len() == 1 && func.chars().all(|c| c.is_ascii_digit());
    match parts.as_slice() {
        [b, d] if ok && hex(b, 2) && hex(d, 2) => Some(format!("0000:{head}.{func}")),
        [dom, b, d] if ok && hex(dom, 4) && hex(b, 2) && hex(d, 2) => Some(s.to_string()),
        _ => None,
    }
}

/// Settings of the DPDK engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DpdkConfig {
    /// Where packets come from: `bind` is the `ip:port` the traffic is sent
    /// to (port 0 picks a free port, only with [`DpdkPort::AfPacket`], whose
    /// guard socket binds it); `interface` the AF_PACKET port's when no `port`
    /// is named; the queue is the receive queue's memory (the `net_af_packet`
    /// ring, or the mbufs behind a NIC's descriptors). No multicast groups.
    pub net: NetworkSpec,
    /// The port; `None`: `net_af_packet` on `net.interface`, else on the
    /// interface that owns the bind address ([`DpdkConfig::port`]).
    pub port: Option<DpdkPort>,
    /// More EAL arguments, after ours (e.g. `--log-level=pmd.net.af_packet:debug`).
    pub eal_args: Vec<String>,
    /// Use huge pages when the kernel has them reserved (`--no-huge` otherwise).
    pub huge_pages: bool,
    /// RX descriptors asked of a NIC (adjusted to its limits).
    pub rx_descriptors: u16,
    /// Largest UDP payload accepted whole; longer ones are reported truncated.
    pub max_packet: usize,
    /// Most mbufs read per burst.
    pub batch: usize,
    /// Never sleep between empty polls (one core spins); otherwise the thread
    /// sleeps 20 us after 1000 empty polls in a row.
    pub busy_poll: bool,
}

impl DpdkConfig {
    /// Defaults: [`NetworkSpec::new`] (64 MiB of queue), 4096 descriptors,
    /// bursts of 64, huge pages when reserved, adaptive polling.
    pub fn new(bind: impl Into<String>) -> Self {
        DpdkConfig {
            net: NetworkSpec::new(bind),
            port: None,
            eal_args: Vec::new(),
            huge_pages: true,
            rx_descriptors: 4096,
            max_packet: 9000,
            batch: 64,
            busy_poll: false,
        }
    }

    /// The port named, else an AF_PACKET port on the interface named (`None`:
    /// the engine takes the interface that owns the bind address).
    pub fn port(&self) -> Option<DpdkPort> {
        match (&self.port, &self.net.interface) {
            (Some(p), _) => Some(p.clone()),
            (None, Some(i)) => Some(DpdkPort::AfPacket {
                interface: i.clone(),
            }),
            (None, None) => None,
        }
    }

    fn validate(&self) -> Result<()> {
        within("max_packet (UDP payload)", self.max_packet, 1..=65_507)?;
        within("DPDK burst size", self.batch, 1..=1024)?;
        if self.rx_descriptors == 0 {
            return Err(Error::Config("rx_descriptors must be positive".into()));
        }
        if !self.net.multicast.is_empty() {
            return Err(Error::Config(
                "the DPDK engine joins no multicast groups; capture groups with engine='socket', \
                 'packet_ring' or 'xdp'"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Longest Ethernet frame of a packet we accept whole (one VLAN tag, no IP options).
    fn max_frame(&self) -> usize {
        self.max_packet + IP_UDP + ETH_VLAN
    }
}

/// The smallest `net_af_packet` `framesz` that holds a UDP payload of
/// `max_packet` bytes without IP options (a multiple of 16, as TPACKET needs).
pub fn af_packet_framesz_for(max_packet: usize) -> usize {
    (AF_PACKET_NET_OFFSET + IP_UDP + max_packet).next_multiple_of(16)
}

/// The `net_af_packet` ring of an [`DpdkPort::AfPacket`] port: frame size,
/// block size and frame count.
///
/// The driver addresses frame `i` at `i * framesz` from the start of the ring,
/// while the kernel never lets a frame span two blocks: the two agree only when
/// `framesz` divides `blocksz` (otherwise every block but the first is read at
/// the wrong offsets). Blocks are page multiples that the kernel allocates as a
/// power of two of pages, so a power-of-two `framesz` wastes no more kernel
/// memory than any other choice that holds `max_packet`; it is what we use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AfPacketRing {
    pub framesz: usize,
    pub blocksz: usize,
    pub framecnt: usize,
}

impl AfPacketRing {
    pub fn for_config(max_packet: usize, queue_bytes: usize, page: usize) -> Self {
        let framesz = af_packet_framesz_for(max_packet).next_power_of_two();
        let blocksz = framesz.max(page).max(64 << 10);
        let blocks = (queue_bytes / blocksz).max(2);
        AfPacketRing {
            framesz,
            blocksz,
            framecnt: blocks * (blocksz / framesz),
        }
    }

    /// The device arguments for `net_af_packet` device `name` on `interface`.
    fn devargs(&self, name: &str, interface: &str) -> String {
        format!(
            "{name},iface={interface},qpairs=1,framesz={},blocksz={},framecnt={}",
            self.framesz, self.blocksz, self.framecnt
        )
    }
}

/// Checks user-given `net_af_packet` device arguments: one queue pair, and a
/// `framesz` that holds `max_packet` (the driver would cut longer frames silently).
fn check_af_packet_devargs(devargs: &str, max_packet: usize) -> Result<()> {
    let mut parts = devargs.split(',');
    let name = parts.next().unwrap_or("");
    if !(name.starts_with("net_af_packet") || name.starts_with("eth_af_packet")) {
        return Ok(());
    }
    let mut framesz = AF_PACKET_DEFAULT_FRAMESZ;
    let (mut blocksz, mut framecnt) = (None, None);
    for kv in parts {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        let num = || {
            v.parse::<usize>().map_err(|_| {
                Error::Config(format!("'{kv}' in DPDK device '{devargs}' is not a number"))
            })
        };
        match k.trim() {
            "framesz" => framesz = num()?,
            "blocksz" => blocksz = Some(num()?),
            "framecnt" => framecnt = Some(num()?),
            "qpairs" if num()? != 1 => {
                return Err(Error::Config(format!(
                    "DPDK device '{devargs}': the engine reads one queue, so qpairs must be 1 \
                     (with more, the kernel fans frames out to queues nobody reads)"
                )))
            }
            _ => {}
        }
    }
    // The driver's defaults: one page per block, 512 frames.
    let blocksz = blocksz.unwrap_or_else(crate::memory::page_size);
    if framesz == 0 || blocksz % framesz != 0 {
        return Err(Error::Config(format!(
            "DPDK device '{devargs}': net_af_packet needs blocksz ({blocksz}) to be a multiple of \
             framesz ({framesz}); otherwise it reads frames at the wrong offsets after the \
             first block"
        )));
    }
    if framecnt.unwrap_or(512) % (blocksz / framesz) != 0 {
        return Err(Error::Config(format!(
            "DPDK device '{devargs}': framecnt must be a multiple of blocksz / framesz ({})",
            blocksz / framesz
        )));
    }
    let need = af_packet_framesz_for(max_packet);
    if framesz < need {
        return Err(Error::Config(format!(
            "DPDK device '{devargs}': net_af_packet framesz={framesz} holds at most {} bytes \
             of UDP payload, but this capture accepts packets of up to {max_packet} bytes; the \
             kernel would cut longer frames without telling. Set framesz={need} or more (a \
             multiple of 16; a power of two wastes no memory) and blocksz to a multiple of \
             it and of the page size, or pass the interface name instead and voltstream \
             sizes the ring",
            framesz.saturating_sub(AF_PACKET_NET_OFFSET + IP_UDP)
        )));
    }
    Ok(())
}

/// Counters of one DPDK capture, as of the last [`Engine::kernel_drops`] call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DpdkCounts {
    /// Frames read from the port (every mbuf chain).
    pub frames: u64,
    /// Frames that were not UDP to our address and port (not passed on).
    pub other: u64,
    /// Our frames shorter than their IP length says (cut by the driver or
    /// the sender); reported truncated.
    pub cut: u64,
    /// Multi-segment frames joined.
    pub joined: u64,
    /// `rte_eth_stats`: frames the port received.
    pub ipackets: u64,
    /// `rte_eth_stats`: frames lost for want of room in the queue.
    pub imissed: u64,
    /// `rte_eth_stats`: frames received in error.
    pub ierrors: u64,
    /// `rte_eth_stats`: mbuf allocation failures.
    pub rx_nombuf: u64,
}

/// What a DPDK capture runs with, for reports; shared with the capture thread.
#[derive(Debug)]
pub struct DpdkInfo {
    /// The device arguments probed (or the PCI address).
    pub device: String,
    pub driver: String,
    pub port_id: u16,
    /// The port's NUMA node (-1: none) and the node the mbufs are on (-1: any).
    pub numa_node: i32,
    pub pool_numa_node: i32,
    pub huge_pages: bool,
    pub mbufs: usize,
    pub mbuf_data_room: usize,
    pub rx_descriptors: usize,
    /// The `net_af_packet` ring, for those ports.
    pub af_packet: Option<AfPacketRing>,
    /// The EAL arguments this process was initialised with.
    pub eal_args: Vec<String>,
    counts: Mutex<DpdkCounts>,
}

impl DpdkInfo {
    pub fn counts(&self) -> DpdkCounts {
        *self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(not(feature = "dpdk"))]
mod imp {
    use super::*;

    const NOT_BUILT: &str = "voltstream was built without the DPDK engine: install dpdk-dev \
                             (Debian/Ubuntu) and rebuild with the cargo feature `dpdk` (Python: \
                             `maturin develop --release -F dpdk`; make dpdk-test)";

    unbuilt_engine!(DpdkEngine, DpdkConfig, DpdkInfo, "dpdk", NOT_BUILT);
}

mod deliver;
mod eal;
#[cfg(feature = "dpdk")]
mod engine;
#[cfg(test)]
mod tests;

#[cfg(feature = "dpdk")]
pub use engine::{DpdkEngine, AVAILABLE};
#[cfg(not(feature = "dpdk"))]
pub use imp::{DpdkEngine, AVAILABLE};

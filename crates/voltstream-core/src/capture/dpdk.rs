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
//! Classification: the engine sees every frame of the port. Frames that are not
//! IPv4/UDP to our port (and to our address, unless bound to 0.0.0.0), and later
//! IP fragments, are counted in [`DpdkCounts::other`] and not passed on. Ours are
//! parsed as in the packet-ring engine: a payload longer than `max_packet`, a
//! first fragment, or lengths that do not add up are [`Received::Truncated`]
//! (counted malformed by the assembler).
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

use super::flow::{pass, Flow, Frame};
use super::{Engine, Received};
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
    /// `ipv4:port` the traffic is sent to; port 0 picks a free port (only with
    /// [`DpdkPort::AfPacket`], whose guard socket binds it).
    pub bind: String,
    /// The port; `None`: `net_af_packet` on the interface that owns the bind address.
    pub port: Option<DpdkPort>,
    /// More EAL arguments, after ours (e.g. `--log-level=pmd.net.af_packet:debug`).
    pub eal_args: Vec<String>,
    /// Use huge pages when the kernel has them reserved (`--no-huge` otherwise).
    pub huge_pages: bool,
    /// Memory for the receive queue: the `net_af_packet` ring, or the mbufs
    /// behind a NIC's descriptors.
    pub queue_bytes: usize,
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
    /// Defaults: 64 MiB of queue, 4096 descriptors, bursts of 64, huge pages
    /// when reserved, adaptive polling.
    pub fn new(bind: impl Into<String>) -> Self {
        DpdkConfig {
            bind: bind.into(),
            port: None,
            eal_args: Vec::new(),
            huge_pages: true,
            queue_bytes: 64 << 20,
            rx_descriptors: 4096,
            max_packet: 9000,
            batch: 64,
            busy_poll: false,
        }
    }

    fn validate(&self) -> Result<()> {
        if self.max_packet == 0 || self.max_packet > 65_507 {
            return Err(Error::Config(format!(
                "max_packet must be 1..=65507 (the largest UDP payload), got {}",
                self.max_packet
            )));
        }
        if self.batch == 0 || self.batch > 1024 {
            return Err(Error::Config(format!(
                "DPDK burst size must be 1..=1024, got {}",
                self.batch
            )));
        }
        if self.rx_descriptors == 0 {
            return Err(Error::Config("rx_descriptors must be positive".into()));
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
    let blocksz = blocksz.unwrap_or_else(super::packet_ring::page_size);
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
    /// Frames that were not IPv4/UDP to our address and port (not passed on).
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

/// Per-frame work of a burst: classification, parsing, counting.
struct Deliver {
    flow: Flow,
    max_packet: usize,
    counts: DpdkCounts,
}

impl Deliver {
    /// Passes one whole frame on; returns how many packets reached `sink` (0 or 1).
    fn frame<F: FnMut(Received<'_>)>(&mut self, l2: Option<&[u8]>, sink: &mut F) -> usize {
        self.counts.frames += 1;
        let Some(l2) = l2 else {
            sink(Received::Truncated); // a chain longer than the scratch buffer
            return 1;
        };
        match self.flow.frame(l2) {
            Frame::Udp(p) => pass(p, self.max_packet, sink),
            Frame::Cut => {
                self.counts.cut += 1;
                sink(Received::Truncated)
            }
            Frame::Malformed => sink(Received::Truncated),
            Frame::Other => {
                self.counts.other += 1;
                return 0;
            }
        }
        1
    }
}

/// Whether the kernel has huge pages of the default size free, and where
/// hugetlbfs is mounted (the EAL needs both).
fn huge_pages_free() -> bool {
    let free = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("HugePages_Free:"))
                .and_then(|v| v.trim().parse::<u64>().ok())
        })
        .unwrap_or(0);
    let mounted = std::fs::read_to_string("/proc/mounts")
        .map(|m| {
            m.lines()
                .any(|l| l.split_whitespace().nth(2) == Some("hugetlbfs"))
        })
        .unwrap_or(false);
    free > 0 && mounted
}

/// `--lcores` value putting lcore 0 on every CPU this process may run on, so
/// the EAL's pinning of the calling thread changes nothing.
fn lcore_all_cpus() -> String {
    // SAFETY: a zeroed cpu_set_t is valid; sched_getaffinity fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a cpu_set_t of the size passed.
    let ok = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) } == 0;
    let cpus: Vec<String> = (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `cpu` is below CPU_SETSIZE.
        .filter(|&cpu| ok && unsafe { libc::CPU_ISSET(cpu, &set) })
        .map(|c| c.to_string())
        .collect();
    if cpus.is_empty() {
        "0@(0)".into()
    } else {
        format!("0@({})", cpus.join(","))
    }
}

/// The EAL arguments for the first capture of the process (argv[0] included).
fn eal_args(config: &DpdkConfig, huge: bool, pool_bytes: usize) -> Vec<String> {
    let mut a: Vec<String> = vec!["voltstream".into(), "--no-telemetry".into()];
    // No files in /var/run/dpdk, so processes never collide: --in-memory with
    // huge pages; --no-huge implies legacy memory, which refuses --in-memory.
    if huge {
        a.push("--in-memory".into());
    } else {
        a.push("--no-shconf".into());
        a.push(format!("--file-prefix=vs{}", std::process::id()));
    }
    a.push(format!("--lcores={}", lcore_all_cpus()));
    a.push("--log-level=*:warning".into());
    match &config.port {
        Some(p @ DpdkPort::Device(d)) if p.is_pci() => a.extend(["-a".into(), d.clone()]),
        _ => a.push("--no-pci".into()),
    }
    if !huge {
        // Without huge pages the EAL's memory is fixed at start-up (mapped lazily).
        let mb = ((pool_bytes * 2) >> 20).max(512);
        a.extend(["--no-huge".into(), "-m".into(), mb.to_string()]);
    }
    a.extend(config.eal_args.iter().cloned());
    a
}

#[cfg(not(feature = "dpdk"))]
mod imp {
    use super::*;

    const NOT_BUILT: &str = "voltstream was built without the DPDK engine: install dpdk-dev \
                             (Debian/Ubuntu) and rebuild with the cargo feature `dpdk` (Python: \
                             `maturin develop --release -F dpdk`; make dpdk-test)";

    unbuilt_engine!(DpdkEngine, DpdkConfig, DpdkInfo, "dpdk", NOT_BUILT);
}

#[cfg(feature = "dpdk")]
mod imp {
    use std::ffi::{c_char, c_int, c_uint, CStr, CString};
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::OnceLock;
    use std::time::Instant;

    use super::*;
    use crate::capture::bind_udp;
    use crate::capture::packet_ring::{attach_drop_all, interface_of_ip, page_size, resolve_ip};

    /// Whether this build has the DPDK engine.
    pub const AVAILABLE: bool = true;

    const RTE_PKTMBUF_HEADROOM: usize = 128;
    const SOCKET_ID_ANY: c_int = -1;
    const MEMPOOL_CACHE: c_uint = 256;
    const ERR_LEN: usize = 512;

    #[repr(C)]
    struct Mempool {
        _opaque: [u8; 0],
    }
    #[repr(C)]
    struct Mbuf {
        _opaque: [u8; 0],
    }

    #[repr(C)]
    struct PortInfo {
        driver: [c_char; 64],
        numa_node: i32,
        min_mtu: u16,
        max_mtu: u16,
        max_rx_pktlen: u32,
        rx_desc_max: u16,
        rx_desc_min: u16,
        rx_desc_align: u16,
        scatter_capable: u8,
        started: u8,
    }

    #[repr(C)]
    #[derive(Clone, Copy)]
    struct RxFrame {
        data: *const u8,
        data_len: u32,
        pkt_len: u32,
        nb_segs: u16,
    }

    #[repr(C)]
    #[derive(Default)]
    struct EthStats {
        ipackets: u64,
        ibytes: u64,
        imissed: u64,
        ierrors: u64,
        rx_nombuf: u64,
    }

    extern "C" {
        fn vs_eal_init(argc: c_int, argv: *mut *mut c_char, err: *mut c_char, len: usize) -> c_int;
        fn vs_thread_register() -> c_int;
        fn vs_thread_unregister();
        fn vs_port_open(
            name: *const c_char,
            devargs: *const c_char,
            port: *mut u16,
            err: *mut c_char,
            len: usize,
        ) -> c_int;
        fn vs_port_info(port: u16, out: *mut PortInfo, err: *mut c_char, len: usize) -> c_int;
        fn vs_pool_create(
            name: *const c_char,
            n: c_uint,
            cache: c_uint,
            data_room: u16,
            numa_node: c_int,
            err: *mut c_char,
            len: usize,
        ) -> *mut Mempool;
        fn vs_pool_lock(mp: *mut Mempool) -> c_int;
        fn vs_pool_free(mp: *mut Mempool);
        fn vs_port_start(
            port: u16,
            mp: *mut Mempool,
            nb_rxd: u16,
            mtu: u16,
            scatter: c_int,
            promiscuous: c_int,
            numa_node: c_int,
            err: *mut c_char,
            len: usize,
        ) -> c_int;
        fn vs_port_close(port: u16, remove: c_int);
        fn vs_rx(port: u16, bufs: *mut *mut Mbuf, n: u16, frames: *mut RxFrame) -> u16;
        fn vs_mbuf_join(m: *const Mbuf, dst: *mut u8, cap: u32) -> u32;
        fn vs_free(bufs: *mut *mut Mbuf, n: c_uint);
        fn vs_stats(port: u16, out: *mut EthStats) -> c_int;
    }

    /// Calls `f` with an error buffer; on a negative result returns the shim's message.
    fn checked(what: &str, f: impl FnOnce(*mut c_char, usize) -> c_int) -> Result<c_int> {
        let mut err = [0 as c_char; ERR_LEN];
        let r = f(err.as_mut_ptr(), ERR_LEN);
        if r < 0 {
            // SAFETY: the shim NUL-terminates what it writes; the buffer starts zeroed.
            let msg = unsafe { CStr::from_ptr(err.as_ptr()) }.to_string_lossy();
            return Err(Error::Config(format!("DPDK: {what}: {msg}")));
        }
        Ok(r)
    }

    fn cstring(s: &str) -> Result<CString> {
        CString::new(s).map_err(|_| Error::Config(format!("{s:?} contains a NUL byte")))
    }

    /// The process's EAL: the arguments and huge-page mode it started with, or why it failed.
    struct Eal {
        args: Vec<String>,
        huge: bool,
        pci: bool,
    }

    static EAL: OnceLock<std::result::Result<Eal, String>> = OnceLock::new();
    static SERIAL: AtomicUsize = AtomicUsize::new(0);
    /// Probing, starting and closing ports is not thread-safe in DPDK.
    static CONTROL: Mutex<()> = Mutex::new(());

    fn eal(config: &DpdkConfig, pool_bytes: usize) -> Result<&'static Eal> {
        let r = EAL.get_or_init(|| {
            let huge = config.huge_pages && huge_pages_free();
            if !huge {
                eprintln!(
                    "voltstream: warning: no huge pages reserved (or hugetlbfs not mounted); \
                     DPDK runs with --no-huge: 4 KiB pages (more TLB misses), and a PCI NIC then \
                     needs vfio with an IOMMU. Reserve some: echo 1024 > \
                     /proc/sys/vm/nr_hugepages"
                );
            }
            let args = eal_args(config, huge, pool_bytes);
            // The EAL keeps pointers into argv: leak it (once per process).
            let mut argv: Vec<*mut c_char> = args
                .iter()
                .map(|a| CString::new(a.as_str()).unwrap_or_default().into_raw())
                .collect();
            let argc = argv.len() as c_int;
            argv.push(std::ptr::null_mut());
            let argv = Box::leak(argv.into_boxed_slice());
            checked("initialising the EAL", |e, l| unsafe {
                // SAFETY: argv is a NULL-terminated array of C strings that lives forever.
                vs_eal_init(argc, argv.as_mut_ptr(), e, l)
            })
            .map_err(|e| format!("{e} (EAL arguments: {})", args.join(" ")))?;
            let pci = config.port.as_ref().is_some_and(DpdkPort::is_pci);
            Ok(Eal { args, huge, pci })
        });
        let eal = r.as_ref().map_err(|e| Error::Config(e.clone()))?;
        let pci = config.port.as_ref().is_some_and(DpdkPort::is_pci);
        if pci && !eal.pci {
            return Err(Error::Config(
                "the DPDK EAL of this process was started with --no-pci by an earlier capture \
                 of a virtual device; capture a PCI port in a separate process"
                    .into(),
            ));
        }
        if !config.eal_args.is_empty() && !eal.args.ends_with(&config.eal_args) {
            return Err(Error::Config(format!(
                "the DPDK EAL of this process already runs with '{}'; EAL arguments cannot \
                 change within a process",
                eal.args.join(" ")
            )));
        }
        Ok(eal)
    }

    /// The DPDK engine: one RX queue of one port.
    pub struct DpdkEngine {
        port_id: u16,
        pool: *mut Mempool,
        bufs: Vec<*mut Mbuf>,
        frames: Vec<RxFrame>,
        scratch: Vec<u8>,
        deliver: Deliver,
        local: SocketAddr,
        _guard: Option<UdpSocket>,
        busy_poll: bool,
        registered: bool,
        queue_bytes: u64,
        info: Arc<DpdkInfo>,
    }

    // SAFETY: the port and the pool are used by one thread at a time (the one
    // that owns the engine); DPDK objects are not tied to the thread that made them.
    unsafe impl Send for DpdkEngine {}

    impl DpdkEngine {
        /// Initialises the EAL (first capture of the process), probes the port,
        /// creates the mbuf pool on its NUMA node and starts one RX queue.
        pub fn open(config: &DpdkConfig) -> Result<Self> {
            config.validate()?;
            let bind = resolve_ip(&config.bind)?;
            let port = match &config.port {
                Some(p) => p.clone(),
                None => DpdkPort::AfPacket {
                    interface: interface_of_ip(bind.ip())?.ok_or_else(|| {
                        Error::Config(format!(
                            "no interface has address {}; pass the DPDK port (an interface, a \
                             PCI address or device arguments)",
                            bind.ip()
                        ))
                    })?,
                },
            };
            let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
            let (devargs, ring, guard) = match &port {
                DpdkPort::AfPacket { interface } => {
                    crate::capture::packet_ring::if_index(interface)?;
                    let ring = AfPacketRing::for_config(
                        config.max_packet,
                        config.queue_bytes,
                        page_size(),
                    );
                    let guard = bind_udp(bind)?;
                    attach_drop_all(guard.as_raw_fd())
                        .map_err(|e| Error::io("cannot filter the guard socket", e))?;
                    let name = format!("net_af_packet_vs{}_{serial}", std::process::id());
                    (ring.devargs(&name, interface), Some(ring), Some(guard))
                }
                DpdkPort::Device(d) => {
                    check_af_packet_devargs(d, config.max_packet)?;
                    if bind.port() == 0 {
                        return Err(Error::Config(
                            "a DPDK device port needs an explicit UDP port in the bind address \
                             (nothing binds a kernel socket to pick one)"
                                .into(),
                        ));
                    }
                    (d.clone(), None, None)
                }
            };
            let local = guard
                .as_ref()
                .and_then(|g| g.local_addr().ok())
                .unwrap_or(bind);
            let data_room = match ring {
                Some(r) => r.framesz + RTE_PKTMBUF_HEADROOM,
                None => (config.max_frame() + RTE_PKTMBUF_HEADROOM).next_multiple_of(128),
            }
            .min(u16::MAX as usize);
            // A NIC's queue is its descriptors' mbufs; an af_packet queue is the
            // kernel ring, and mbufs only carry one burst at a time.
            let mbufs = match ring {
                Some(_) => 2047,
                None => {
                    (config.queue_bytes / (data_room + 256))
                        .max(2 * config.rx_descriptors as usize + 2 * config.batch + 1024)
                        .next_power_of_two()
                        - 1
                }
            };
            let eal = eal(config, mbufs * (data_room + 256))?;
            let _control = CONTROL.lock().unwrap_or_else(|e| e.into_inner());
            let name = devargs.split(',').next().unwrap_or("").to_string();
            let (c_name, c_args) = (cstring(&name)?, cstring(&devargs)?);
            let mut port_id = 0u16;
            checked("opening the port", |e, l| unsafe {
                // SAFETY: valid C strings and out-pointer for the call.
                vs_port_open(c_name.as_ptr(), c_args.as_ptr(), &mut port_id, e, l)
            })?;
            // From here on the port is ours to close on every error path.
            let close = |e: Error| {
                // SAFETY: the port was opened above and nothing else uses it.
                unsafe { vs_port_close(port_id, 1) };
                e
            };
            // SAFETY: PortInfo is plain data; all zeroes is a valid value.
            let mut pi: PortInfo = unsafe { std::mem::zeroed() };
            checked("reading the port's information", |e, l| {
                // SAFETY: an open port, an out-struct and an error buffer of `l` bytes.
                unsafe { vs_port_info(port_id, &mut pi, e, l) }
            })
            .map_err(close)?;
            // SAFETY: the shim NUL-terminates the driver name.
            let driver = unsafe { CStr::from_ptr(pi.driver.as_ptr()) }
                .to_string_lossy()
                .into_owned();
            let is_af_packet = driver.contains("af_packet");
            let mtu = (config.max_packet + IP_UDP) as u16;
            let set_mtu = !is_af_packet && mtu as usize > 1500;
            if set_mtu && pi.max_mtu != 0 && mtu > pi.max_mtu {
                return Err(close(Error::Config(format!(
                    "DPDK port {devargs} ({driver}) has a largest MTU of {}, but packets of {} \
                     bytes need {mtu}",
                    pi.max_mtu, config.max_packet
                ))));
            }
            let scatter = !is_af_packet && pi.scatter_capable != 0 && config.max_frame() > 2048;
            let pool_name = cstring(&format!("vs_pool_{}_{serial}", std::process::id()))?;
            let mut pool_node = if pi.numa_node >= 0 {
                pi.numa_node
            } else {
                SOCKET_ID_ANY
            };
            let create = |node: c_int| {
                let mut p = std::ptr::null_mut();
                let r = checked("creating the mbuf pool", |e, l| {
                    // SAFETY: valid name; the shim reports failure as NULL.
                    p = unsafe {
                        vs_pool_create(
                            pool_name.as_ptr(),
                            mbufs as c_uint,
                            MEMPOOL_CACHE,
                            data_room as u16,
                            node,
                            e,
                            l,
                        )
                    };
                    if p.is_null() {
                        -1
                    } else {
                        0
                    }
                });
                r.map(|_| p)
            };
            let pool = match create(pool_node) {
                Ok(p) => p,
                Err(first) if pool_node != SOCKET_ID_ANY => {
                    eprintln!(
                        "voltstream: warning: {first}; placing the mbufs on any NUMA node \
                         instead of the port's ({pool_node})"
                    );
                    pool_node = SOCKET_ID_ANY;
                    create(SOCKET_ID_ANY).map_err(close)?
                }
                Err(e) => return Err(close(e)),
            };
            let fail = |e: Error| {
                // SAFETY: the port (whose queue holds mbufs of the pool) goes first.
                unsafe {
                    vs_port_close(port_id, 1);
                    vs_pool_free(pool);
                }
                e
            };
            // SAFETY: a live pool.
            if unsafe { vs_pool_lock(pool) } < 0 {
                eprintln!(
                    "voltstream: warning: cannot lock the DPDK mbuf pool in memory (raise \
                     RLIMIT_MEMLOCK); it may be swapped out"
                );
            }
            let rxd = checked("starting the port", |e, l| unsafe {
                // SAFETY: a live port and pool.
                vs_port_start(
                    port_id,
                    pool,
                    config.rx_descriptors,
                    if set_mtu { mtu } else { 0 },
                    scatter as c_int,
                    1,
                    pool_node,
                    e,
                    l,
                )
            })
            .map_err(fail)?;
            let info = Arc::new(DpdkInfo {
                device: devargs,
                driver,
                port_id,
                numa_node: pi.numa_node,
                pool_numa_node: pool_node,
                huge_pages: eal.huge,
                mbufs,
                mbuf_data_room: data_room,
                rx_descriptors: rxd as usize,
                af_packet: ring,
                eal_args: eal.args.clone(),
                counts: Mutex::new(DpdkCounts::default()),
            });
            let queue_bytes = match ring {
                Some(r) => (r.framecnt * r.framesz) as u64,
                None => (mbufs * data_room) as u64,
            };
            Ok(DpdkEngine {
                port_id,
                pool,
                bufs: vec![std::ptr::null_mut(); config.batch],
                frames: vec![
                    RxFrame {
                        data: std::ptr::null(),
                        data_len: 0,
                        pkt_len: 0,
                        nb_segs: 0,
                    };
                    config.batch
                ],
                scratch: vec![0; config.max_frame().max(data_room)],
                deliver: Deliver {
                    flow: Flow::new(SocketAddr::new(bind.ip(), local.port())),
                    max_packet: config.max_packet,
                    counts: DpdkCounts::default(),
                },
                local,
                _guard: guard,
                busy_poll: config.busy_poll,
                registered: false,
                queue_bytes,
                info,
            })
        }

        /// Settings and counters, shared with whoever reports them.
        pub fn info(&self) -> Arc<DpdkInfo> {
            self.info.clone()
        }

        /// One burst: returns (frames read, packets passed).
        fn burst<F: FnMut(Received<'_>)>(&mut self, sink: &mut F) -> (usize, usize) {
            // SAFETY: `bufs` and `frames` hold `batch` entries each.
            let n = unsafe {
                vs_rx(
                    self.port_id,
                    self.bufs.as_mut_ptr(),
                    self.bufs.len() as u16,
                    self.frames.as_mut_ptr(),
                )
            } as usize;
            let mut passed = 0;
            for i in 0..n {
                let f = self.frames[i];
                let l2 = if f.nb_segs <= 1 {
                    // SAFETY: the first segment's data, alive until the mbuf is freed below.
                    Some(unsafe { std::slice::from_raw_parts(f.data, f.data_len as usize) })
                } else {
                    self.deliver.counts.joined += 1;
                    let cap = self.scratch.len() as u32;
                    // SAFETY: a received mbuf chain and a buffer of `cap` bytes.
                    let len = unsafe { vs_mbuf_join(self.bufs[i], self.scratch.as_mut_ptr(), cap) };
                    (len != u32::MAX).then(|| &self.scratch[..len as usize])
                };
                passed += self.deliver.frame(l2, sink);
            }
            if n > 0 {
                // SAFETY: the mbufs just received; no slice of them outlives this call.
                unsafe { vs_free(self.bufs.as_mut_ptr(), n as c_uint) };
            }
            (n, passed)
        }
    }

    impl Engine for DpdkEngine {
        fn name(&self) -> &'static str {
            "dpdk"
        }

        fn recv_batch<F: FnMut(Received<'_>)>(
            &mut self,
            timeout: Duration,
            mut sink: F,
        ) -> Result<usize> {
            if !self.registered {
                // SAFETY: registers the calling thread; failure only costs the cache.
                self.registered = unsafe { vs_thread_register() } == 0;
            }
            let start = Instant::now();
            let mut empty = 0u32;
            loop {
                let (n, passed) = self.burst(&mut sink);
                if passed > 0 {
                    return Ok(passed);
                }
                if n > 0 {
                    empty = 0; // frames of others: keep reading, but not forever
                    if start.elapsed() >= timeout {
                        return Ok(0);
                    }
                    continue;
                }
                if timeout.is_zero() || start.elapsed() >= timeout {
                    return Ok(0);
                }
                empty += 1;
                if !self.busy_poll && empty >= 1000 {
                    std::thread::sleep(Duration::from_micros(20));
                }
            }
        }

        fn kernel_drops(&mut self) -> u64 {
            let mut s = EthStats::default();
            // SAFETY: a live port and an out-struct.
            if unsafe { vs_stats(self.port_id, &mut s) } == 0 {
                let c = &mut self.deliver.counts;
                (c.ipackets, c.imissed, c.ierrors, c.rx_nombuf) =
                    (s.ipackets, s.imissed, s.ierrors, s.rx_nombuf);
            }
            let c = self.deliver.counts;
            *self.info.counts.lock().unwrap_or_else(|e| e.into_inner()) = c;
            c.imissed + c.rx_nombuf + c.ierrors
        }

        fn rcvbuf(&self) -> u64 {
            self.queue_bytes
        }

        fn local_addr(&self) -> Option<SocketAddr> {
            Some(self.local)
        }
    }

    impl Drop for DpdkEngine {
        fn drop(&mut self) {
            let _control = CONTROL.lock().unwrap_or_else(|e| e.into_inner());
            // SAFETY: the port goes first (its queue holds mbufs of the pool);
            // nothing uses either afterwards.
            unsafe {
                vs_port_close(self.port_id, 1);
                vs_pool_free(self.pool);
                if self.registered {
                    vs_thread_unregister();
                }
            }
        }
    }
}

pub use imp::{DpdkEngine, AVAILABLE};

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn ports_parse_as_pci_devices_or_interfaces() {
        assert_eq!(
            DpdkPort::parse("3b:00.1").unwrap(),
            DpdkPort::Device("0000:3b:00.1".into())
        );
        assert!(DpdkPort::parse("0000:3b:00.1").unwrap().is_pci());
        let v = DpdkPort::parse("net_af_packet0,iface=eth1").unwrap();
        assert_eq!(v, DpdkPort::Device("net_af_packet0,iface=eth1".into()));
        assert!(!v.is_pci());
        assert_eq!(
            DpdkPort::parse("eth1").unwrap(),
            DpdkPort::AfPacket {
                interface: "eth1".into()
            }
        );
        assert!(DpdkPort::parse(" ").is_err());
    }

    #[test]
    fn af_packet_ring_holds_the_largest_packet_in_frames_that_tile_blocks() {
        for max_packet in [1, 1074, 1472, 8266, 9000, 65_507] {
            let r = AfPacketRing::for_config(max_packet, 64 << 20, 4096);
            assert!(r.framesz - AF_PACKET_NET_OFFSET - IP_UDP >= max_packet);
            assert!(r.framesz < 2 * af_packet_framesz_for(max_packet), "{r:?}");
            assert_eq!(r.blocksz % r.framesz, 0, "{r:?}");
            assert_eq!(r.blocksz % 4096, 0);
            assert_eq!(r.framecnt % (r.blocksz / r.framesz), 0);
            assert!(r.framecnt * r.framesz <= 64 << 20);
            check_af_packet_devargs(&r.devargs("net_af_packet0", "x"), max_packet).unwrap();
        }
        assert_eq!(af_packet_framesz_for(1074), 1184);
        assert_eq!(AfPacketRing::for_config(1074, 1 << 20, 4096).framesz, 2048);
    }

    #[test]
    fn a_framesz_too_small_for_the_packets_is_refused() {
        let e = check_af_packet_devargs("net_af_packet0,iface=x,framesz=2048", 8266)
            .unwrap_err()
            .to_string();
        assert!(e.contains("framesz=8384") && e.contains("cut"), "{e}");
        // The driver's default framesz is 2048.
        assert!(check_af_packet_devargs("net_af_packet0,iface=x", 2000).is_err());
        check_af_packet_devargs("net_af_packet0,iface=x", 1940).unwrap();
        check_af_packet_devargs("net_af_packet0,iface=x,framesz=8192,blocksz=8192", 8000).unwrap();
        let e = check_af_packet_devargs("net_af_packet0,framesz=8384,blocksz=65536", 8266);
        assert!(e.unwrap_err().to_string().contains("multiple of framesz"));
        let e = check_af_packet_devargs("net_af_packet0,framesz=2048,blocksz=8192,framecnt=6", 10);
        assert!(e
            .unwrap_err()
            .to_string()
            .contains("framecnt must be a multiple of"));
        let e = check_af_packet_devargs("net_af_packet0,iface=x,qpairs=2,framesz=4096", 10)
            .unwrap_err();
        assert!(e.to_string().contains("qpairs must be 1"));
        assert!(check_af_packet_devargs("net_af_packet0,framesz=big", 10).is_err());
        check_af_packet_devargs("0000:3b:00.0", 9000).unwrap(); // not af_packet
    }

    fn frame(dst: [u8; 4], proto: u8, port: u16, payload: &[u8], cut: usize) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x08, 0x00]);
        let total = (IP_UDP + payload.len()) as u16;
        let mut ip = [0u8; 20];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        ip[9] = proto;
        ip[16..20].copy_from_slice(&dst);
        f.extend_from_slice(&ip);
        f.extend_from_slice(&9999u16.to_be_bytes());
        f.extend_from_slice(&port.to_be_bytes());
        f.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend_from_slice(payload);
        f.truncate(f.len() - cut);
        f
    }

    #[test]
    fn frames_are_passed_cut_or_counted_as_others() {
        let mut d = Deliver {
            flow: Flow::new(SocketAddr::from((Ipv4Addr::new(10, 0, 0, 1), 7148))),
            max_packet: 100,
            counts: DpdkCounts::default(),
        };
        let mut got = Vec::new();
        let mut sink = |r: Received<'_>| {
            got.push(match r {
                Received::Packet(p) => p.len() as i64,
                Received::Truncated => -1,
            })
        };
        let us = [10, 0, 0, 1];
        assert_eq!(
            d.frame(Some(&frame(us, 17, 7148, &[7; 100], 0)), &mut sink),
            1
        );
        assert_eq!(
            d.frame(Some(&frame(us, 17, 7148, &[7; 101], 0)), &mut sink),
            1
        );
        assert_eq!(
            d.frame(Some(&frame(us, 17, 7148, &[7; 100], 30)), &mut sink),
            1
        );
        assert_eq!(
            d.frame(Some(&frame(us, 17, 7149, &[7; 100], 30)), &mut sink),
            0
        );
        assert_eq!(
            d.frame(Some(&frame([10, 0, 0, 2], 17, 7148, &[7; 9], 0)), &mut sink),
            0
        );
        assert_eq!(d.frame(Some(&frame(us, 6, 7148, &[7; 9], 0)), &mut sink), 0);
        assert_eq!(d.frame(Some(&[0xff; 42]), &mut sink), 0); // not IPv4 (ARP-sized)
        assert_eq!(d.frame(None, &mut sink), 1);
        assert_eq!(got, vec![100, -1, -1, -1]);
        let c = d.counts;
        assert_eq!((c.frames, c.other, c.cut), (8, 4, 1));
    }
}

//! A whole capture described by one value, validated and opened here.
//!
//! [`CaptureSpec`] says what arrives ([`FormatSpec`]), where from
//! ([`NetworkSpec`]), which engine reads it ([`EngineChoice`] and
//! [`EngineOptions`]), how it is chunked ([`ChunkConfig`]) and how it is spread
//! over threads ([`ThreadsConfig`]). [`CaptureSpec::validate`] checks every part
//! and how they fit together, with [`Error::Config`] naming the setting;
//! [`CaptureSpec::start`] opens the engine (trying the `auto` order) and starts
//! the capture threads. Bindings and tools only build a spec: the decisions (how
//! one kernel-memory budget becomes a socket buffer, a ring, a UMEM or a DPDK
//! queue; which engines may run several threads) are made once, here, in the
//! way spead2's stream configs are built and checked in its core library.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::{
    multicast_plan_ip, packet_ring_chunk_fanout, packet_ring_fanout, CaptureGroup, ChunkConfig,
    DpdkConfig, DpdkEngine, DpdkInfo, DpdkPort, Engine, PacketRingConfig, PacketRingEngine, Sink,
    SocketConfig, SocketEngine, ThreadsConfig, XdpConfig, XdpEngine, XdpInfo, XdpMode,
};
use crate::assemble::ChunkLayout;
use crate::wire::{FormatSpec, Locator, StreamKeyed};
use crate::{Error, Result};

/// Slack above the format's packet length, so that over-long packets arrive
/// flagged as truncated rather than silently fitting.
const PACKET_MARGIN: usize = 64;

/// Which capture engine reads the packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineChoice {
    /// The first of [`EngineChoice::AUTO_ORDER`] that opens.
    Auto,
    /// A UDP socket read with `recvmmsg`; every host has it.
    Socket,
    /// An AF_PACKET `TPACKET_V3` ring; needs CAP_NET_RAW.
    PacketRing,
    /// An AF_XDP socket fed by voltstream's XDP program; needs root.
    Xdp,
    /// A DPDK port (cargo feature `dpdk`).
    Dpdk,
}

impl EngineChoice {
    /// The order `auto` tries. The packet ring comes first: in bench/capture.py
    /// it lost nothing at the sender's limit where the socket engine lost 44%.
    /// It needs CAP_NET_RAW, so an unprivileged capture falls back to the
    /// socket, which every host has. AF_XDP is not tried: it takes over the
    /// interface's XDP hook, on loopback it runs only in generic mode where
    /// UDP-GSO super-frames cannot be split, and over a veth it drained slower
    /// than the ring (docs/architecture.md, "AF_XDP engine"). Nor is DPDK: it
    /// takes the whole port and needs its device named.
    pub const AUTO_ORDER: [EngineChoice; 2] = [EngineChoice::PacketRing, EngineChoice::Socket];

    /// Parses the name the CLI and the binding use.
    pub fn parse(name: &str) -> Result<Self> {
        Ok(match name {
            "auto" => EngineChoice::Auto,
            "socket" => EngineChoice::Socket,
            "packet_ring" => EngineChoice::PacketRing,
            "xdp" => EngineChoice::Xdp,
            "dpdk" => EngineChoice::Dpdk,
            other => {
                return Err(Error::Config(format!(
                    "unknown capture engine '{other}'; use 'auto', 'socket', 'packet_ring', \
                     'xdp' or 'dpdk'"
                )))
            }
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            EngineChoice::Auto => "auto",
            EngineChoice::Socket => "socket",
            EngineChoice::PacketRing => "packet_ring",
            EngineChoice::Xdp => "xdp",
            EngineChoice::Dpdk => "dpdk",
        }
    }

    /// The engines to try, in order, for a capture on `threads` threads. Only
    /// packet rings are steered by stream id across threads (one fanout group).
    pub fn candidates(self, threads: usize) -> Result<Vec<EngineChoice>> {
        let order = match self {
            EngineChoice::Auto => Self::AUTO_ORDER.to_vec(),
            one => vec![one],
        };
        if threads <= 1 {
            return Ok(order);
        }
        if order.contains(&EngineChoice::PacketRing) {
            return Ok(vec![EngineChoice::PacketRing]);
        }
        Err(Error::Config(format!(
            "threads={threads} needs engine='packet_ring' (or 'auto'): only the packet ring \
             steers streams to several threads"
        )))
    }
}

/// Where the packets come from, and how much kernel memory may queue them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkSpec {
    /// `host:port` the traffic is sent to; port 0 picks a free port.
    pub bind: String,
    /// Interface to capture on (`None`: the one that owns the bind address);
    /// also the interface whose counters and NUMA node the capture reports. The
    /// socket engine joins groups on it (`None`: where the routing table says).
    pub interface: Option<String>,
    /// Multicast groups to join (a group as the bind host is joined too): IPv4
    /// for every engine, IPv6 (with an IPv6 bind) for the socket engine.
    pub multicast: Vec<IpAddr>,
    /// Bytes of kernel memory for packets not yet read: the socket's receive
    /// buffer, the packet ring, the AF_XDP UMEM or the DPDK queue, whichever
    /// engine runs; so switching engines keeps the same headroom.
    pub queue_bytes: usize,
    /// More addresses, each sent a copy of the format's streams (a band that
    /// arrives as several streams: subbands on several ports or groups). The
    /// streams of address `a` are `a * k .. (a + 1) * k` (`k` the format's),
    /// each address captured by its own thread, all on one chunk timeline.
    pub more_binds: Vec<String>,
}

impl NetworkSpec {
    /// Defaults: the interface that owns `bind`, no groups, 64 MiB queue.
    pub fn new(bind: impl Into<String>) -> Self {
        NetworkSpec {
            bind: bind.into(),
            interface: None,
            multicast: Vec::new(),
            queue_bytes: 64 << 20,
            more_binds: Vec::new(),
        }
    }

    /// The groups the capture joins (a group bind host included); empty for
    /// unicast or a bind address that is not yet an IP literal.
    pub fn groups(&self) -> Result<Vec<IpAddr>> {
        let Ok(addr) = self.bind.parse::<SocketAddr>() else {
            return Ok(Vec::new());
        };
        Ok(multicast_plan_ip(addr, &self.multicast)?.map_or_else(Vec::new, |p| p.groups))
    }

    /// The IPv4 groups: what the packet ring's, AF_XDP's and DPDK's filters hold.
    fn groups_v4(&self) -> Vec<Ipv4Addr> {
        let v4 = |g: &IpAddr| match g {
            IpAddr::V4(g) => Some(*g),
            IpAddr::V6(_) => None,
        };
        self.multicast.iter().filter_map(v4).collect()
    }

    fn has_v6_groups(&self) -> bool {
        self.multicast.iter().any(IpAddr::is_ipv6)
    }
}

/// Settings that only one engine reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineOptions {
    /// Socket engine: packets per `recvmmsg` call.
    pub batch: usize,
    /// Packet ring: bytes per ring block.
    pub ring_block_size: usize,
    /// AF_XDP: the interface queue to bind.
    pub xdp_queue: u32,
    /// AF_XDP: driver, generic (skb) or auto.
    pub xdp_mode: XdpMode,
    /// DPDK: the port (`None`: an AF_PACKET port on [`NetworkSpec::interface`]).
    pub dpdk_port: Option<DpdkPort>,
    /// DPDK: extra EAL arguments.
    pub dpdk_eal_args: Vec<String>,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            batch: 64,
            ring_block_size: 1 << 20,
            xdp_queue: 0,
            xdp_mode: XdpMode::Auto,
            dpdk_port: None,
            dpdk_eal_args: Vec::new(),
        }
    }
}

/// A whole capture: format, network, engine, chunking and threads.
#[derive(Debug, Clone, PartialEq)]
pub struct CaptureSpec {
    pub format: FormatSpec,
    pub network: NetworkSpec,
    pub engine: EngineChoice,
    pub options: EngineOptions,
    pub chunks: ChunkConfig,
    pub threads: ThreadsConfig,
}

impl CaptureSpec {
    /// Defaults for everything but what arrives and where: the `auto` engine,
    /// [`NetworkSpec::new`], [`EngineOptions::default`], [`ChunkConfig::default`]
    /// (256 packets per chunk, 16 chunks, window 4) and one thread. These are
    /// the only defaults of a capture: the bindings fill in what a spec leaves
    /// out from here, and the Python settings read them from here.
    pub fn new(format: FormatSpec, bind: impl Into<String>) -> Self {
        CaptureSpec {
            format,
            network: NetworkSpec::new(bind),
            engine: EngineChoice::Auto,
            options: EngineOptions::default(),
            chunks: ChunkConfig::default(),
            threads: ThreadsConfig::new(1),
        }
    }

    /// Checks every part and how they fit; returns the thread owning each
    /// stream. Nothing is opened.
    pub fn validate(&self) -> Result<Vec<usize>> {
        let format = &self.format;
        format.validate()?;
        let per_chunk = self.chunks.assembler.packets_per_chunk;
        if per_chunk % format.packets_per_heap() != 0 {
            return Err(Error::Config(format!(
                "packets_per_chunk ({per_chunk}) must be a multiple of packets_per_heap \
                 ({}) so that each chunk holds whole heaps",
                format.packets_per_heap()
            )));
        }
        self.chunks.validate()?;
        if self.chunks.whole_packets && matches!(format, FormatSpec::Spead { .. }) {
            return Err(Error::Config(
                "whole packets in chunks need packets of one length; SPEAD's vary (record \
                 SPEAD streams with their payloads only)"
                    .into(),
            ));
        }
        ChunkLayout {
            streams: format.streams(),
            packets_per_chunk: per_chunk,
            payload_len: self.slot_len(),
        }
        .validate()?;
        if self.addresses() > 1 {
            return self.validate_addresses();
        }
        let by_chunks = self.by_chunks()?;
        let owners = self.threads.owners(format.streams(), by_chunks)?;
        if by_chunks {
            // The steering program must be writable for these sizes.
            packet_ring_chunk_program_check(&self.locator()?, per_chunk, self.threads.threads)?;
        }
        self.engines()?;
        self.network.groups()?; // bad groups fail here, not at start
        Ok(owners)
    }

    /// Validates, and says where each thread's chunks sit: the global stream
    /// indices each thread's chunks hold, and the chunk stride (thread `t`
    /// owns the chunk ids `c` with `c % stride == t`; 1: every chunk id, of
    /// its own streams).
    pub fn placement(&self) -> Result<(Vec<Vec<usize>>, usize)> {
        let owners = self.validate()?;
        let n = self.threads.threads.max(1);
        if self.addresses() > 1 {
            let k = self.format.streams();
            return Ok(((0..n).map(|a| (a * k..(a + 1) * k).collect()).collect(), 1));
        }
        if self.by_chunks()? {
            let all: Vec<usize> = (0..self.format.streams()).collect();
            return Ok((vec![all; n], n));
        }
        Ok((super::thread_streams(&owners, n), 1))
    }

    /// Listen addresses: `network.bind` and `network.more_binds`.
    pub fn addresses(&self) -> usize {
        1 + self.network.more_binds.len()
    }

    /// Streams of the whole capture: the format's, once per listen address.
    pub fn streams(&self) -> usize {
        self.format.streams() * self.addresses()
    }

    /// This spec for listen address `a` alone (its own engine and thread).
    fn for_address(&self, a: usize) -> CaptureSpec {
        let mut one = self.clone();
        if a > 0 {
            one.network.bind = self.network.more_binds[a - 1].clone();
        }
        one.network.more_binds.clear();
        one.threads = ThreadsConfig::new(1);
        one
    }

    /// Whether the capture threads own chunks (rather than streams).
    pub fn by_chunks(&self) -> Result<bool> {
        if self.addresses() > 1 {
            return Ok(false);
        }
        let keyed = self.format.locator()?.stream_key().is_some();
        self.threads.by_chunks(self.format.streams(), keyed)
    }

    /// Several listen addresses: one thread each, each a whole capture of the
    /// format on its address. Returns the (unused) owner list.
    fn validate_addresses(&self) -> Result<Vec<usize>> {
        let n = self.addresses();
        if self.threads.threads != n {
            return Err(Error::Config(format!(
                "{n} listen addresses need {n} capture threads (one per address), not {}",
                self.threads.threads
            )));
        }
        if matches!(self.engine, EngineChoice::Xdp | EngineChoice::Dpdk) {
            return Err(Error::Config(format!(
                "several listen addresses are captured with the packet ring or the socket \
                 engine, not {}",
                self.engine.name()
            )));
        }
        for a in 0..n {
            let one = self.for_address(a);
            one.format.validate()?;
            one.chunks.validate()?;
            one.network.groups()?;
        }
        if !self.threads.cpus.is_empty() && self.threads.cpus.len() != n {
            return Err(Error::Config(format!(
                "{} CPUs given for {n} capture threads; give one CPU per thread",
                self.threads.cpus.len()
            )));
        }
        Ok(vec![0; self.streams()])
    }

    /// The engines to try, in order: the choice's candidates for the thread
    /// count, less those that cannot join IPv6 groups when some are asked for.
    pub fn engines(&self) -> Result<Vec<EngineChoice>> {
        let threads = if self.addresses() > 1 {
            1
        } else {
            self.threads.threads
        };
        let mut order = self.engine.candidates(threads)?;
        if self.network.has_v6_groups() {
            order.retain(|&e| e == EngineChoice::Socket);
            if order.is_empty() {
                return Err(Error::Config(
                    "IPv6 multicast groups need the socket engine (engine='socket' or 'auto', \
                     one thread): the packet ring's and AF_XDP's group filters hold IPv4 \
                     addresses"
                        .into(),
                ));
            }
        }
        Ok(order)
    }

    /// The largest packet any engine accepts whole.
    fn max_packet(&self) -> usize {
        (self.format.packet_len() + PACKET_MARGIN).min(65_536)
    }

    pub fn socket_config(&self) -> SocketConfig {
        SocketConfig {
            net: self.network.clone(),
            max_packet: self.max_packet(),
            batch: self.options.batch,
        }
    }

    pub fn ring_config(&self) -> PacketRingConfig {
        let net = &self.network;
        let mut c = PacketRingConfig::new(net.bind.clone());
        c.interface = net.interface.clone();
        c.multicast = net.groups_v4();
        c.block_size = self.options.ring_block_size;
        c.blocks = net.queue_bytes.div_ceil(c.block_size.max(1)).max(2);
        c.max_packet = self.max_packet();
        c
    }

    pub fn xdp_config(&self) -> XdpConfig {
        let net = &self.network;
        let mut c = XdpConfig::new(net.bind.clone());
        c.interface = net.interface.clone();
        c.queue = self.options.xdp_queue;
        c.mode = self.options.xdp_mode;
        c.frames = XdpConfig::frames_for(net.queue_bytes, c.frame_size);
        c.max_packet = self.max_packet();
        c.multicast = net.groups_v4();
        c
    }

    pub fn dpdk_config(&self) -> DpdkConfig {
        DpdkConfig {
            net: self.network.clone(),
            port: self.options.dpdk_port.clone(),
            eal_args: self.options.dpdk_eal_args.clone(),
            max_packet: self.max_packet(),
            ..DpdkConfig::new("")
        }
    }

    /// Validates, opens the first engine of the choice that works and starts
    /// the capture threads. Nothing is read while `gate` is closed (packets
    /// queue in the kernel). When no engine opens, the error is the first
    /// (preferred) engine's, so its type and hint survive.
    pub fn start(&self, gate: &Arc<AtomicBool>) -> Result<Started> {
        let owners = self.validate()?;
        let mut first = None;
        for choice in self.engines()? {
            match self.start_with(choice, &owners, gate) {
                Ok(started) => return Ok(started),
                Err(e) => {
                    first.get_or_insert(e);
                }
            }
        }
        Err(first.unwrap_or_else(|| Error::Config("no capture engine was selected".into())))
    }

    fn start_with(
        &self,
        choice: EngineChoice,
        owners: &[usize],
        gate: &Arc<AtomicBool>,
    ) -> Result<Started> {
        let (group, xdp, dpdk) = match choice {
            EngineChoice::PacketRing | EngineChoice::Socket if self.addresses() > 1 => {
                (self.start_addresses(choice, gate)?, None, None)
            }
            EngineChoice::PacketRing if self.threads.threads > 1 && self.by_chunks()? => {
                let locator = self.locator()?;
                let n = self.threads.threads;
                let ppc = self.chunks.assembler.packets_per_chunk;
                let engines = packet_ring_chunk_fanout(&self.ring_config(), &locator, ppc, n)?
                    .into_iter()
                    .map(|e| Gated::new(e, gate))
                    .collect();
                let cpus = &self.threads.cpus;
                let max = self.max_packet();
                let group = CaptureGroup::start_chunks(engines, locator, cpus, &self.chunks, max)?;
                (group, None, None)
            }
            EngineChoice::PacketRing if self.threads.threads > 1 => {
                let locator = self.locator()?;
                let n = self.threads.threads;
                let engines = packet_ring_fanout(&self.ring_config(), &locator, owners, n)?
                    .into_iter()
                    .map(|e| Gated::new(e, gate))
                    .collect();
                let cpus = &self.threads.cpus;
                let group = CaptureGroup::start(engines, locator, owners, cpus, &self.chunks)?;
                (group, None, None)
            }
            EngineChoice::PacketRing => {
                let e = PacketRingEngine::open(&self.ring_config())?;
                (self.start_one(Gated::new(e, gate))?, None, None)
            }
            EngineChoice::Socket => {
                let e = SocketEngine::bind(&self.socket_config())?;
                (self.start_one(Gated::new(e, gate))?, None, None)
            }
            EngineChoice::Xdp => {
                let e = XdpEngine::open(&self.xdp_config())?;
                let info = e.info();
                (self.start_one(Gated::new(e, gate))?, Some(info), None)
            }
            EngineChoice::Dpdk => {
                let e = DpdkEngine::open(&self.dpdk_config())?;
                let info = e.info();
                (self.start_one(Gated::new(e, gate))?, None, Some(info))
            }
            EngineChoice::Auto => {
                return Err(Error::Config("'auto' names no engine to open".into()));
            }
        };
        Ok(Started { group, xdp, dpdk })
    }

    /// Bytes each packet's slot in a chunk holds: the sample bytes, or the whole
    /// packet with `chunks.whole_packets`.
    pub fn slot_len(&self) -> usize {
        if self.chunks.whole_packets {
            self.format.packet_len()
        } else {
            self.format.payload_len()
        }
    }

    /// The format's classifier, keeping whole packets where the chunks ask so.
    fn locator(&self) -> Result<Locator> {
        let locator = self.format.locator()?;
        Ok(if self.chunks.whole_packets {
            locator.whole_packets(self.format.packet_len())
        } else {
            locator
        })
    }

    /// One engine (and thread) per listen address, each with the format's
    /// streams, on one timeline.
    fn start_addresses(
        &self,
        choice: EngineChoice,
        gate: &Arc<AtomicBool>,
    ) -> Result<CaptureGroup> {
        let locator = self.locator()?;
        let cpus = &self.threads.cpus;
        let n = self.addresses();
        if choice == EngineChoice::PacketRing {
            let engines = (0..n)
                .map(|a| {
                    Ok(Gated::new(
                        PacketRingEngine::open(&self.for_address(a).ring_config())?,
                        gate,
                    ))
                })
                .collect::<Result<Vec<_>>>()?;
            CaptureGroup::start_addresses(engines, locator, cpus, &self.chunks)
        } else {
            let engines = (0..n)
                .map(|a| {
                    Ok(Gated::new(
                        SocketEngine::bind(&self.for_address(a).socket_config())?,
                        gate,
                    ))
                })
                .collect::<Result<Vec<_>>>()?;
            CaptureGroup::start_addresses(engines, locator, cpus, &self.chunks)
        }
    }

    /// One engine is a group of one thread, owning every stream.
    fn start_one<E: Engine>(&self, engine: E) -> Result<CaptureGroup> {
        let owners = vec![0; self.format.streams()];
        let locator = self.locator()?;
        CaptureGroup::start(
            vec![engine],
            locator,
            &owners,
            &self.threads.cpus,
            &self.chunks,
        )
    }
}

/// A started capture, with the engine-specific reports of the engine that won.
pub struct Started {
    /// The running capture threads.
    pub group: CaptureGroup,
    /// The AF_XDP engine's settings and counters, when it runs.
    pub xdp: Option<Arc<XdpInfo>>,
    /// The DPDK engine's settings and counters, when it runs.
    pub dpdk: Option<Arc<DpdkInfo>>,
}

/// An engine behind a gate: while closed, nothing is read and packets wait in
/// the kernel's queue (used to measure how fast a pre-filled queue drains).
struct Gated<E> {
    inner: E,
    open: Arc<AtomicBool>,
}

impl<E> Gated<E> {
    fn new(inner: E, open: &Arc<AtomicBool>) -> Self {
        Gated {
            inner,
            open: open.clone(),
        }
    }
}

impl<E: Engine> Engine for Gated<E> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn recv_batch<F: Sink>(&mut self, timeout: Duration, sink: F) -> Result<usize> {
        if !self.open.load(Ordering::Acquire) {
            std::thread::sleep(timeout.min(Duration::from_millis(1)));
            return Ok(0);
        }
        self.inner.recv_batch(timeout, sink)
    }

    fn kernel_drops(&mut self) -> u64 {
        self.inner.kernel_drops()
    }

    fn rcvbuf(&self) -> u64 {
        self.inner.rcvbuf()
    }

    fn local_addr(&self) -> Option<SocketAddr> {
        self.inner.local_addr()
    }

    fn interface(&self) -> Option<&str> {
        self.inner.interface()
    }
}

/// Checks that a chunk-steering program can be written for this format and
/// these sizes (the error says which sizes work), without opening anything.
fn packet_ring_chunk_program_check(
    locator: &Locator,
    packets_per_chunk: usize,
    threads: usize,
) -> Result<()> {
    let key = locator.index_key().ok_or_else(|| {
        Error::Config(
            "this format keeps its packet index at no fixed place (SPEAD heaps of several \
             packets, or samples per heap not a power of two) or computes it (scaled layout \
             indices), so chunks cannot be spread over capture threads; use threads=1"
                .into(),
        )
    })?;
    super::steer_chunks::chunk_program(&key, packets_per_chunk, threads).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::Spread;
    use crate::wire::SpeadHeapIndex;
    use std::net::UdpSocket;
    use std::net::{IpAddr, Ipv4Addr};
    use std::time::Instant;

    const LEN: usize = 64;

    fn counter(streams: usize) -> CaptureSpec {
        let format = FormatSpec::Counter {
            streams,
            payload_len: LEN,
        };
        let mut spec = CaptureSpec::new(format, "127.0.0.1:0");
        spec.chunks.assembler.packets_per_chunk = 16;
        spec
    }

    fn config_error(spec: &CaptureSpec) -> String {
        match spec.validate() {
            Err(Error::Config(m)) => m,
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    #[test]
    fn engine_names_round_trip_and_unknown_names_are_refused() {
        for name in ["auto", "socket", "packet_ring", "xdp", "dpdk"] {
            assert_eq!(EngineChoice::parse(name).unwrap().name(), name);
        }
        let err = EngineChoice::parse("rdma").unwrap_err().to_string();
        assert!(err.contains("unknown capture engine 'rdma'"), "{err}");
    }

    #[test]
    fn several_threads_need_the_packet_ring() {
        let ring = [EngineChoice::PacketRing];
        assert_eq!(
            EngineChoice::Auto.candidates(1).unwrap(),
            EngineChoice::AUTO_ORDER
        );
        assert_eq!(EngineChoice::Auto.candidates(2).unwrap(), ring);
        assert_eq!(EngineChoice::PacketRing.candidates(3).unwrap(), ring);
        let mut spec = counter(4);
        spec.engine = EngineChoice::Socket;
        spec.threads = ThreadsConfig::new(2);
        assert!(config_error(&spec).contains("threads=2 needs engine='packet_ring'"));
    }

    #[test]
    fn validation_names_the_setting_at_fault() {
        let mut spec = counter(2);
        spec.chunks.nchunks = 4;
        assert!(config_error(&spec).contains("nchunks (4) must exceed window (4)"));

        let mut spec = counter(2);
        spec.threads = ThreadsConfig::new(3);
        spec.threads.spread = Spread::Streams;
        assert!(config_error(&spec).contains("3 capture threads for 2 streams"));
        // More threads than streams: by default they take turns by chunk.
        spec.threads.spread = Spread::Auto;
        assert!(spec.by_chunks().unwrap());
        let (streams, stride) = spec.placement().unwrap();
        assert_eq!((streams, stride), (vec![vec![0, 1]; 3], 3));
        spec.chunks.assembler.packets_per_chunk = 40_000;
        assert!(config_error(&spec).contains("power of two"));

        let mut spec = counter(2);
        spec.network.bind = "0.0.0.0:7000".into();
        spec.network.multicast = vec![Ipv4Addr::new(10, 0, 0, 1).into()];
        assert!(config_error(&spec).contains("10.0.0.1 is not an IPv4 multicast group"));

        let index = SpeadHeapIndex::Timestamp;
        let format = FormatSpec::spead_heaps(vec![0], 4096, 8192, 2, index).unwrap();
        let mut spec = CaptureSpec::new(format, "127.0.0.1:0");
        spec.chunks.assembler.packets_per_chunk = 3;
        assert!(config_error(&spec).contains("multiple of packets_per_heap (2)"));

        assert_eq!(counter(3).validate().unwrap(), vec![0, 0, 0]);
    }

    #[test]
    fn ipv6_groups_go_to_the_socket_engine_and_ipv4_groups_to_every_filter() {
        let mut spec = counter(1);
        spec.network.bind = "[::]:7148".into();
        spec.network.multicast = vec!["ff15::7".parse().unwrap()];
        assert_eq!(spec.engines().unwrap(), [EngineChoice::Socket]);
        assert_eq!(spec.socket_config().net.multicast, spec.network.multicast);
        assert!(spec.ring_config().multicast.is_empty());
        spec.engine = EngineChoice::PacketRing;
        assert!(config_error(&spec).contains("IPv6 multicast groups need the socket engine"));

        let mut spec = counter(1);
        spec.network.bind = "0.0.0.0:7148".into();
        let g = Ipv4Addr::new(239, 1, 2, 3);
        spec.network.multicast = vec![g.into()];
        assert_eq!(spec.engines().unwrap(), EngineChoice::AUTO_ORDER);
        assert_eq!(spec.ring_config().multicast, [g]);
        assert_eq!(spec.xdp_config().multicast, [g]);
        assert_eq!(spec.network.groups().unwrap(), [IpAddr::from(g)]);
    }

    #[test]
    fn one_queue_budget_sizes_every_engine() {
        let mut spec = counter(1);
        spec.network.queue_bytes = 8 << 20;
        spec.options.ring_block_size = 1 << 20;
        spec.network.interface = Some("veth0".into());
        assert_eq!(spec.socket_config().net.queue_bytes, 8 << 20);
        assert_eq!(spec.ring_config().blocks, 8);
        let xdp = spec.xdp_config();
        assert_eq!(xdp.frames, XdpConfig::frames_for(8 << 20, xdp.frame_size));
        assert_eq!(spec.dpdk_config().net.queue_bytes, 8 << 20);
        // Without a port named, DPDK reads the capture's interface.
        assert_eq!(
            spec.dpdk_config().port(),
            Some(DpdkPort::AfPacket {
                interface: "veth0".into()
            })
        );
        // Every engine accepts the format's packet (10-byte counter header) whole.
        let max = spec.socket_config().max_packet;
        assert!(max >= LEN + 10 && max == spec.ring_config().max_packet);
    }

    #[test]
    fn a_closed_gate_holds_packets_in_the_kernel_until_opened() {
        let mut spec = counter(1);
        spec.engine = EngineChoice::Socket;
        let gate = Arc::new(AtomicBool::new(false));
        let started = spec.start(&gate).unwrap();
        let group = started.group;
        assert!(started.xdp.is_none() && started.dpdk.is_none());
        let dest = group.threads()[0].local_addr().unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        for index in 0..32u64 {
            let mut p = index.to_be_bytes().to_vec();
            p.extend_from_slice(&0u16.to_be_bytes());
            p.resize(10 + LEN, 7);
            tx.send_to(&p, dest).unwrap();
        }
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(group.stats().total.counters.total().received, 0);
        gate.store(true, Ordering::Release);
        let deadline = Instant::now() + Duration::from_secs(5);
        while group.stats().total.counters.total().received < 32 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        group.stop().unwrap();
        assert_eq!(group.stats().total.counters.total().received, 32);
    }
}

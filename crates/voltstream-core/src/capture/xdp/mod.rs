//! AF_XDP engine: our own XDP program hands the capture's UDP flow, on one
//! receive queue of one interface, to an AF_XDP socket; packets land in a UMEM
//! (user memory registered with the kernel) and are read from a ring without a
//! system call per packet or per batch.
//!
//! How traffic reaches us:
//! - `bpf/voltstream_xdp.c` (compiled by build.rs, embedded here, loaded with
//!   libbpf) redirects IPv4/UDP frames to our port (and address, unless bound
//!   to 0.0.0.0), with at most one VLAN tag, into the XSKMAP slot of the queue
//!   they arrived on; bound to an IPv6 address, IPv6/UDP frames to it (bound to
//!   `[::]`, both families), when UDP follows the fixed header directly (the
//!   program does not walk extension headers; those frames go to the stack).
//!   Multicast groups are IPv4 only here. Everything else gets `XDP_PASS`: ARP, ssh and other ports
//!   reach the kernel stack as before. Non-first IP fragments are passed too
//!   (they carry no port); first fragments come to us and are counted malformed,
//!   as in the packet-ring engine.
//! - The program is attached with a BPF *link* (`BPF_LINK_CREATE`), not the
//!   netlink call: the kernel detaches it when the last descriptor of the link
//!   closes, so a capture that crashes or is killed never leaves a program
//!   behind that would swallow the port. One AF_XDP socket per queue and one
//!   XDP program per interface: a second capture on the same queue is refused
//!   when its socket binds, one on another queue of the same interface (or any
//!   other XDP user there) when its program attaches, with a clear error.
//! - Attach mode: native (driver) mode first, then generic (SKB) mode, unless
//!   [`XdpConfig::mode`] asks for one. Loopback has only generic mode. A veth has
//!   native mode: with our program attached the kernel runs it in the veth's
//!   NAPI poll and turns TSO/GSO off on the *peer*, so a sender using UDP GSO
//!   is segmented before the program sees it. (The often-quoted rule "the peer
//!   needs an XDP program or GRO" concerns frames *redirected into* a veth with
//!   `ndo_xdp_xmit`; we redirect into a socket, not a veth.) Native mode on a
//!   veth whose peer MTU exceeds one page needs a multi-buffer ("frags") program,
//!   which we load exactly when the socket is multi-buffer.
//! - In generic mode on loopback or a veth, a local UDP-GSO sender's
//!   super-frames reach the program unsegmented and XDP cannot learn the segment
//!   size; each such frame is reported as one truncated packet (counted
//!   malformed). Use native mode on a veth, or the packet-ring engine (which
//!   splits them) for local GSO senders. Native mode on a NIC runs before GRO; in
//!   generic mode a NIC's UDP frames are merged only where UDP GRO forwarding is
//!   switched on (`ethtool -K ... rx-udp-gro-forwarding on`), which it is not
//!   by default.
//! - A plain UDP socket (the *guard*) holds the port, with a drop-all filter, as
//!   in the packet-ring engine: no second capture can take it, and the stack
//!   never answers our flow with ICMP port-unreachable.
//!
//! Socket: the UMEM is `frames` chunks of `frame_size` bytes (2048 or 4096),
//! mapped with MAP_HUGETLB when huge pages are reserved (a warning on stderr
//! otherwise), pre-faulted and mlocked before the socket exists. The fill ring
//! and the RX ring both have `frames` slots, so every chunk fits in either and
//! neither can overflow; every chunk starts in the fill ring, and chunks are
//! handed back right after their batch was read: the fill ring stays full. No TX
//! ring; the completion ring exists only because the kernel requires one.
//! The bind tries, in order: zero-copy with multi-buffer, zero-copy, copy with
//! multi-buffer, copy (zero-copy only when the driver supports it, which veth
//! and loopback do not). The choice is in [`XdpInfo`].
//!
//! Jumbo frames: a frame longer than one chunk (4096 - 256 bytes of kernel
//! headroom = 3840) arrives as several descriptors when the socket is bound with
//! `XDP_USE_SG` (Linux 6.6+ in copy mode); they are joined into a scratch buffer.
//! Without multi-buffer the program cuts such frames to one chunk, so user space
//! sees an IP length longer than what arrived and reports [`Received::Truncated`]
//! (malformed), instead of the kernel dropping them with only a counter to show.
//!
//! Loss accounting ([`Engine::kernel_drops`]): from `XDP_STATISTICS`,
//! `rx_dropped` (no free chunk: the fill ring was empty, or a frame too long for
//! a non-multi-buffer socket) + `rx_ring_full` + `rx_invalid_descs`, plus the
//! program's count of our frames that arrived on a queue with no socket. In
//! copy mode `rx_fill_ring_empty_descs` is *not* added: the kernel counts every
//! such event in `rx_dropped` as well. In zero-copy mode a driver that finds the
//! fill ring empty drops in hardware and nothing per packet is counted; there
//! `rx_fill_ring_empty_descs` (allocation failures) is added as the best
//! available estimate, and the NIC's own counters (`ethtool -S`) are exact.
//!
//! Queues: one socket reads one queue (default 0). Loopback and a default veth
//! have one queue. On a multi-queue NIC the flow must be steered to that queue
//! (for example `ethtool -N eth0 flow-type udp4 dst-port 7148 action 0`), or
//! frames hashed to other queues are dropped by the program and counted in
//! `kernel_drops` (`no_socket`); one socket per queue would need one assembler
//! per queue or a merge step, as packet fan-out would, and is not implemented.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::batch::pass;
use super::flow::{Flow, Frame};
use super::limits::within;
use super::{Engine, Received, Sink};
use crate::{Error, Result};

/// Where the XDP program is attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpMode {
    /// Native (driver) mode when the driver has it, generic (SKB) mode otherwise.
    Auto,
    /// Native mode only.
    Native,
    /// Generic mode only: works on every interface, after the kernel built an skb.
    Skb,
}

impl XdpMode {
    /// Parses "auto", "native" or "skb" (also "drv" and "generic").
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(XdpMode::Auto),
            "native" | "drv" => Ok(XdpMode::Native),
            "skb" | "generic" => Ok(XdpMode::Skb),
            other => Err(Error::Config(format!(
                "unknown XDP mode '{other}'; use 'auto', 'native' or 'skb'"
            ))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            XdpMode::Auto => "auto",
            XdpMode::Native => "native",
            XdpMode::Skb => "skb",
        }
    }
}

/// Settings of the AF_XDP engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XdpConfig {
    /// `ipv4:port` the traffic is sent to; port 0 picks a free port.
    pub bind: String,
    /// Interface to capture on; `None`: the interface that owns the bind address.
    pub interface: Option<String>,
    /// Receive queue of the interface to read (see the module notes on steering).
    pub queue: u32,
    /// Attach mode of the XDP program.
    pub mode: XdpMode,
    /// Try zero-copy first (used only where the driver supports it).
    pub zero_copy: bool,
    /// Try multi-buffer (`XDP_USE_SG`) first, so frames longer than one chunk
    /// arrive whole; without it they are reported truncated.
    pub multi_buffer: bool,
    /// Bytes per UMEM chunk: 2048 or 4096 (one frame, 256 of them kernel headroom).
    pub frame_size: usize,
    /// Chunks in the UMEM (a power of two, 64 or more); also the size of the
    /// fill and RX rings.
    pub frames: usize,
    /// Back the UMEM with huge pages when the kernel has them reserved.
    pub huge_pages: bool,
    /// IPv4 multicast groups to receive (joined by the guard socket; the
    /// program takes these groups and unicast to the port). Needs `interface`.
    pub multicast: Vec<std::net::Ipv4Addr>,
    /// Largest UDP payload accepted whole; longer ones are reported truncated.
    pub max_packet: usize,
    /// Most descriptors read per batch.
    pub batch: usize,
}

impl XdpConfig {
    /// Defaults: queue 0, automatic mode, 16384 chunks of 4 KiB (64 MiB, the
    /// socket engine's receive buffer), batches of 256.
    pub fn new(bind: impl Into<String>) -> Self {
        XdpConfig {
            bind: bind.into(),
            interface: None,
            queue: 0,
            mode: XdpMode::Auto,
            zero_copy: true,
            multi_buffer: true,
            frame_size: 4096,
            frames: 16384,
            huge_pages: true,
            multicast: Vec::new(),
            max_packet: 9000,
            batch: 256,
        }
    }

    /// Chunks for a UMEM of about `bytes` bytes (at least 64, a power of two).
    pub fn frames_for(bytes: usize, frame_size: usize) -> usize {
        (bytes / frame_size.max(1))
            .clamp(64, 1 << 20)
            .next_power_of_two()
    }

    fn validate(&self) -> Result<()> {
        if !matches!(self.frame_size, 2048 | 4096) {
            return Err(Error::Config(format!(
                "AF_XDP frame size must be 2048 or 4096, got {}",
                self.frame_size
            )));
        }
        if !self.frames.is_power_of_two() || !(64..=1 << 20).contains(&self.frames) {
            return Err(Error::Config(format!(
                "AF_XDP frames must be a power of two in 64..=1048576, got {}",
                self.frames
            )));
        }
        within("max_packet", self.max_packet, 1..=65_536)?;
        within("AF_XDP batch (at most frames)", self.batch, 1..=self.frames)
    }
}

/// Counters of one AF_XDP capture, as of the last [`Engine::kernel_drops`] call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XdpCounts {
    /// `XDP_STATISTICS.rx_dropped`: no free chunk, or a frame too long.
    pub rx_dropped: u64,
    /// `XDP_STATISTICS.rx_ring_full`: the RX ring was full.
    pub rx_ring_full: u64,
    /// `XDP_STATISTICS.rx_fill_ring_empty_descs`: times the fill ring was empty.
    pub rx_fill_ring_empty_descs: u64,
    /// `XDP_STATISTICS.rx_invalid_descs`.
    pub rx_invalid_descs: u64,
    /// Frames of our flow that arrived on a queue without our socket (dropped).
    pub no_socket: u64,
    /// Frames of our flow the program saw (what `kernel_drops` is out of).
    pub matched: u64,
    /// Frames the program cut to one chunk (no multi-buffer; reported truncated).
    pub cut: u64,
}

/// What an AF_XDP capture runs with, for reports; shared with the capture thread.
#[derive(Debug)]
pub struct XdpInfo {
    pub interface: String,
    pub queue: u32,
    /// "native" or "skb".
    pub mode: &'static str,
    pub zero_copy: bool,
    pub multi_buffer: bool,
    pub huge_pages: bool,
    pub frame_size: usize,
    pub frames: usize,
    counts: Mutex<XdpCounts>,
}

impl XdpInfo {
    /// The counters as of the last [`Engine::kernel_drops`] call.
    pub fn counts(&self) -> XdpCounts {
        *self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Joins the descriptors of one multi-buffer frame into a buffer of fixed
/// capacity (set at start-up: no allocation per packet).
#[cfg_attr(not(voltstream_xdp), allow(dead_code))]
struct Reassembly {
    buf: Vec<u8>,
    active: bool,
    overflow: bool,
}

/// What one descriptor completed.
#[derive(Debug, PartialEq, Eq)]
#[cfg_attr(not(voltstream_xdp), allow(dead_code))]
enum Joined<'a> {
    /// The frame continues in the next descriptor.
    More,
    /// The whole frame.
    Frame(&'a [u8]),
    /// The frame was longer than the buffer (or a piece was unreadable).
    TooLong,
}

#[cfg_attr(not(voltstream_xdp), allow(dead_code))]
impl Reassembly {
    fn new(capacity: usize) -> Self {
        Reassembly {
            buf: Vec::with_capacity(capacity),
            active: false,
            overflow: false,
        }
    }

    /// Adds one piece (`None`: a descriptor outside the UMEM); `more` is the
    /// descriptor's `XDP_PKT_CONTD` flag.
    fn push(&mut self, piece: Option<&[u8]>, more: bool) -> Joined<'_> {
        if !self.active {
            self.buf.clear();
            self.active = true;
            self.overflow = false;
        }
        match piece {
            Some(p) if self.buf.len() + p.len() <= self.buf.capacity() => {
                self.buf.extend_from_slice(p)
            }
            _ => self.overflow = true,
        }
        if more {
            return Joined::More;
        }
        self.active = false;
        if self.overflow {
            Joined::TooLong
        } else {
            Joined::Frame(&self.buf)
        }
    }
}

/// Passes one whole frame on; returns how many packets reached `sink` (0 or 1).
#[cfg_attr(not(voltstream_xdp), allow(dead_code))]
fn deliver<F: Sink>(l2: &[u8], flow: Flow, max_packet: usize, sink: &mut F) -> usize {
    match flow.frame(l2) {
        Frame::Udp(p) => pass(p, max_packet, sink),
        Frame::Cut | Frame::Malformed => sink(Received::Truncated),
        Frame::Other => return 0, // the program lets only our flow through
    }
    1
}

#[cfg(not(voltstream_xdp))]
mod imp {
    use super::*;

    const NOT_BUILT: &str = "voltstream was built without AF_XDP: install libbpf-dev, clang \
                             and pkg-config (Debian/Ubuntu) and rebuild (see \
                             crates/voltstream-core/build.rs)";

    unbuilt_engine!(XdpEngine, XdpConfig, XdpInfo, "xdp", NOT_BUILT);
}

#[cfg(voltstream_xdp)]
mod bpf;
#[cfg(voltstream_xdp)]
mod engine;
#[cfg(voltstream_xdp)]
mod xsk;

#[cfg(voltstream_xdp)]
pub use engine::{XdpEngine, AVAILABLE};
#[cfg(not(voltstream_xdp))]
pub use imp::{XdpEngine, AVAILABLE};

#[cfg(test)]
mod tests;

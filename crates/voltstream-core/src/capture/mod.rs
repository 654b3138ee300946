//! Capture engines and the capture thread that feeds the assembler.
//!
//! Contract: an [`Engine`] hands over received packets in arrival order, in
//! batches, without allocating per packet; packets it could not receive whole are
//! reported as [`Received::Truncated`] (counted `malformed`), never passed on cut
//! short. [`Capture`] runs one engine and one [`crate::assemble::Assembler`] on a
//! dedicated thread, publishes [`crate::stats::Stats`] once per batch, and hands
//! chunks to consumers through the [`crate::ring`]. Stopping is honoured within
//! one poll timeout (100 ms).
//!
//! Engines: [`SocketEngine`] (UDP socket, `recvmmsg`), [`PacketRingEngine`]
//! (AF_PACKET `TPACKET_V3` ring, needs CAP_NET_RAW), [`XdpEngine`] (AF_XDP
//! socket fed by our own XDP program, needs root; built when libbpf and clang
//! are present, see build.rs), [`DpdkEngine`] (a DPDK port, cargo feature
//! `dpdk`). Kernel-bypass engines implement the same trait. Each is a folder
//! (set-up, receive loop, counters, tests); what they share is written once:
//! `flow.rs` (which frames are ours, through [`crate::wire::net::classify`]),
//! `batch.rs` (waiting for a batch, handing packets on), `host.rs` (addresses,
//! IPv4 or IPv6, interfaces, the guard socket), `cbpf.rs` (classic BPF).
//!
//! Configuration: [`CaptureSpec`] describes a whole capture (format, network,
//! engine, chunking, threads), validates it and opens it; each engine's own
//! config is derived from it, so bindings and tools only build a spec.
//!
//! Several threads: [`CaptureGroup`] runs one [`Capture`] per thread over
//! disjoint stream subsets, each with its own engine (packet rings in one
//! `PACKET_FANOUT_CBPF` group steered by stream id, [`packet_ring_fanout`]) and
//! its own CPU ([`ThreadsConfig::cpus`]).
//!
//! For tests: [`InMemoryEngine`] delivers packets a test feeds it from memory,
//! and [`Faults`] wraps any engine with a seeded [`FaultPlan`] (drop, duplicate,
//! reorder, truncate, garbage, foreign) that counts what it injected.

/// The stand-in for an engine this build left out (its native library was
/// missing, or its cargo feature off): `open` validates the config and then
/// fails with `$why`; the type cannot be constructed, so its methods are
/// unreachable. Gives `$engine`, `$engine::open`, `$engine::info` and `AVAILABLE`.
#[allow(unused_macros)] // a build with every engine has no stand-in
macro_rules! unbuilt_engine {
    ($engine:ident, $config:ty, $info:ty, $name:literal, $why:expr) => {
        /// Whether this build has the engine.
        pub const AVAILABLE: bool = false;

        /// The engine this build left out; `open` says how to get it.
        pub struct $engine {
            never: std::convert::Infallible,
        }

        impl $engine {
            /// Always fails in this build, saying what to install or enable.
            pub fn open(config: &$config) -> Result<Self> {
                config.validate()?;
                Err(Error::Config($why.into()))
            }

            pub fn info(&self) -> Arc<$info> {
                match self.never {}
            }
        }

        impl Engine for $engine {
            fn name(&self) -> &'static str {
                $name
            }

            fn recv_batch<F: Sink>(&mut self, _: Duration, _: F) -> Result<usize> {
                match self.never {}
            }

            fn kernel_drops(&mut self) -> u64 {
                match self.never {}
            }

            fn rcvbuf(&self) -> u64 {
                match self.never {}
            }

            fn local_addr(&self) -> Option<SocketAddr> {
                match self.never {}
            }
        }
    };
}

mod batch;
mod cbpf;
mod dpdk;
mod faults;
mod flow;
mod group;
pub(crate) mod host;
mod in_memory;
mod limits;
mod multicast;
mod packet_ring;
mod pin;
mod runner;
mod socket;
mod spec;
mod steer;
mod steer_chunks;
#[cfg(test)]
mod testutil;
mod xdp;

use std::net::SocketAddr;
use std::time::Duration;

use crate::Result;

pub use dpdk::{
    af_packet_framesz_for, AfPacketRing, DpdkConfig, DpdkCounts, DpdkEngine, DpdkInfo, DpdkPort,
    AVAILABLE as DPDK_AVAILABLE,
};
pub use faults::{Delivered, Fault, FaultPlan, FaultReport, Faults, Injected, Injector};
pub use group::{
    packet_ring_chunk_fanout, packet_ring_fanout, thread_streams, CaptureGroup, GroupSnapshot,
    Spread, Subset, ThreadSnapshot, ThreadsConfig,
};
pub use host::interface_of;
pub use in_memory::{Feeder, InMemoryEngine};
pub use multicast::{
    joined_groups, joined_groups_v6, plan as multicast_plan, plan_ip as multicast_plan_ip,
    MulticastPlan, MAX_GROUPS,
};
pub use packet_ring::{PacketRingConfig, PacketRingEngine};
pub use pin::{affinity, current_tid, pin_current_thread};
pub use runner::{Capture, ChunkConfig};
pub use socket::{SocketConfig, SocketEngine};
pub use spec::{CaptureSpec, EngineChoice, EngineOptions, NetworkSpec, Started};
pub use steer::contiguous_owners;
pub use xdp::{XdpConfig, XdpCounts, XdpEngine, XdpInfo, XdpMode, AVAILABLE as XDP_AVAILABLE};

/// One packet as an engine delivers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received<'a> {
    /// The whole UDP payload.
    Packet(&'a [u8]),
    /// A packet larger than the engine's receive buffer; its bytes are not usable.
    Truncated,
}

/// Where an engine hands each packet of a batch: the capture thread's closure
/// into the assembler, or a test's. A name for `FnMut(Received<'_>)`, so that
/// every receive path states its sink the same way; static dispatch, inlined.
pub trait Sink: FnMut(Received<'_>) {}

impl<F: FnMut(Received<'_>)> Sink for F {}

/// A capture backend.
pub trait Engine: Send + 'static {
    /// Short name for reports ("socket", ...).
    fn name(&self) -> &'static str;

    /// Waits at most `timeout` for packets, then passes every packet of one batch
    /// to `sink` in arrival order. Returns how many packets it passed (0 on
    /// timeout or interruption).
    fn recv_batch<F: Sink>(&mut self, timeout: Duration, sink: F) -> Result<usize>;

    /// Packets the kernel dropped before this engine could receive them, since it
    /// started. May make a system call: call it every few milliseconds, not per batch.
    fn kernel_drops(&mut self) -> u64;

    /// Receive buffer size achieved, as the kernel reports it (0 if not applicable).
    fn rcvbuf(&self) -> u64;

    /// The local address traffic is received on, when there is one.
    fn local_addr(&self) -> Option<SocketAddr>;

    /// The network interface traffic arrives on, when the engine knows it: its
    /// NUMA node places the chunk pool, its counters join the host drop report.
    fn interface(&self) -> Option<&str> {
        None
    }
}

/// Test helper shared by the engines' tests: receives until `want` packets (or
/// truncations) arrived or 5 s passed; returns the packets and the truncations.
#[cfg(test)]
pub(crate) fn test_collect<E: Engine>(e: &mut E, want: usize) -> (Vec<Vec<u8>>, usize) {
    let (mut got, mut truncated) = (Vec::new(), 0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while got.len() + truncated < want && std::time::Instant::now() < deadline {
        e.recv_batch(std::time::Duration::from_millis(50), |p| match p {
            Received::Packet(b) => got.push(b.to_vec()),
            Received::Truncated => truncated += 1,
        })
        .unwrap();
    }
    (got, truncated)
}

//! AF_PACKET engine: a `TPACKET_V3` receive ring mapped into our address space,
//! filled by the kernel and read without a system call per packet.
//!
//! How traffic reaches us:
//! - The socket is bound to one interface (`lo` for loopback, a veth or a NIC)
//!   with `ETH_P_ALL`, `PACKET_IGNORE_OUTGOING` set, and a classic BPF program
//!   attached before the bind, so the ring only ever holds UDP frames
//!   (optionally with one 802.1Q/802.1ad tag) addressed to our port (and our
//!   address, unless bound to 0.0.0.0 or `[::]`) that are not outgoing copies
//!   and not non-first IP fragments: IPv4, and IPv6 when bound to an IPv6
//!   address (UDP right after the fixed header: classic BPF cannot walk
//!   extension headers). Other traffic is filtered in the kernel and never
//!   counted, exactly as the socket engine never sees other ports. What
//!   reaches the ring is classified by `capture/flow.rs`.
//! - A plain UDP socket (the *guard*) is bound to the same address and port so
//!   the kernel neither answers with ICMP port-unreachable nor lets another
//!   capture take the port. A `ret 0` BPF program on the guard drops every
//!   datagram before it is queued: no second copy, no draining thread. The
//!   kernel counts those as UDP `InErrors` and in the guard's `sk_drops`; that
//!   is the price of not receiving everything twice.
//! - Senders using UDP GSO on loopback or veth hand the stack one super-frame
//!   of up to 64 datagrams, and AF_PACKET sees it unsegmented. With
//!   `PACKET_VNET_HDR` the kernel tells us the segment size, and the engine
//!   splits the payload into the datagrams the receiver would have seen.
//!
//! Loss accounting: a frame the kernel cut short (`tp_snaplen < tp_len`), a
//! first IP fragment (the datagram cannot be reassembled here; raise the MTU),
//! inconsistent IP/UDP lengths and payloads longer than `max_packet` reach the
//! sink as [`Received::Truncated`], one per datagram they carried.
//! [`Engine::kernel_drops`] sums `tp_drops` from `PACKET_STATISTICS` (read and
//! reset by the kernel on each call): it counts *frames*, and one GSO frame can
//! carry up to 64 datagrams; the assembler's `missing` counter is exact.
//!
//! Files: the configuration here, the ring and its receive loop in `ring.rs`,
//! the classic BPF filter in `filter.rs`, tests in `tests.rs`.
//!
//! Threads: one thread reads one ring. Several rings join one
//! `PACKET_FANOUT_CBPF` group ([`PacketRingEngine::open_fanout`]) whose BPF
//! program steers each packet by stream id to the ring of the thread owning
//! the stream (`capture::group`); the rings share one guard socket.
//!
//! Latency: the kernel hands a block over when it is full or `retire_ms` after
//! its first packet. Waits therefore last at least one retire period, so a
//! zero-timeout drain still sees packets sitting in a half-filled block.

use std::net::Ipv4Addr;

use crate::capture::limits::within;
use crate::memory::page_size;
use crate::{Error, Result};

/// Settings of the packet-ring engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PacketRingConfig {
    /// `ipv4:port` the traffic is sent to; port 0 picks a free port.
    pub bind: String,
    /// Interface to capture on; `None`: the interface that owns the bind address.
    pub interface: Option<String>,
    /// Bytes per ring block: a power-of-two multiple of the page size, large
    /// enough for the largest frame (a 64 KiB GSO frame on loopback).
    pub block_size: usize,
    /// Blocks in the ring (its size is `block_size * blocks`).
    pub blocks: usize,
    /// Nominal frame size (TPACKET_V3 packs frames of any size into blocks; the
    /// kernel only checks that it divides the block size).
    pub frame_size: usize,
    /// Milliseconds after which the kernel retires a block that is not full.
    pub retire_ms: u32,
    /// Largest UDP payload accepted whole; longer ones are reported truncated.
    pub max_packet: usize,
    /// IPv4 multicast groups to receive (joined by the guard socket; the filter
    /// accepts these groups and unicast to the port). Needs `interface`.
    pub multicast: Vec<Ipv4Addr>,
}

impl PacketRingConfig {
    /// Defaults: 64 blocks of 1 MiB (the socket engine's 64 MiB), 4 ms retire.
    pub fn new(bind: impl Into<String>) -> Self {
        PacketRingConfig {
            bind: bind.into(),
            interface: None,
            block_size: 1 << 20,
            blocks: 64,
            frame_size: 2048,
            retire_ms: 4,
            max_packet: 9000,
            multicast: Vec::new(),
        }
    }

    fn validate(&self) -> Result<()> {
        let page = page_size();
        if self.block_size < 128 << 10
            || !self.block_size.is_power_of_two()
            || self.block_size % page != 0
        {
            return Err(Error::Config(format!(
                "packet ring block size must be a power of two of at least 128 KiB (to hold a \
                 64 KiB GSO frame), got {}",
                self.block_size
            )));
        }
        if self.frame_size < 128
            || self.frame_size % 16 != 0
            || self.block_size % self.frame_size != 0
        {
            return Err(Error::Config(format!(
                "packet ring frame size must be a multiple of 16, at least 128, dividing the \
                 block size; got {}",
                self.frame_size
            )));
        }
        let total = self.block_size.checked_mul(self.blocks);
        if self.blocks < 2 || !matches!(total, Some(t) if t <= u32::MAX as usize) {
            return Err(Error::Config(format!(
                "packet ring needs 2 or more blocks and at most 4 GiB in all (got {} blocks of \
                 {} bytes)",
                self.blocks, self.block_size
            )));
        }
        within("packet ring retire_ms", self.retire_ms as usize, 1..=1000)?;
        within("max_packet", self.max_packet, 1..=65_536)
    }
}

mod filter;
mod ring;
#[cfg(test)]
mod tests;

pub use ring::PacketRingEngine;

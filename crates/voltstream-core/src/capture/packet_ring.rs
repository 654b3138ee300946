//! AF_PACKET engine: a `TPACKET_V3` receive ring mapped into our address space,
//! filled by the kernel and read without a system call per packet.
//!
//! How traffic reaches us:
//! - The socket is bound to one interface (`lo` for loopback, a veth or a NIC)
//!   with `ETH_P_ALL`, `PACKET_IGNORE_OUTGOING` set, and a classic BPF program
//!   attached before the bind, so the ring only ever holds IPv4/UDP frames
//!   (optionally with one 802.1Q/802.1ad tag) addressed to our port (and our
//!   address, unless bound to 0.0.0.0) that are not outgoing copies and not
//!   non-first IP fragments. Other traffic is filtered in the kernel and never
//!   counted, exactly as the socket engine never sees other ports.
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
//! Threads: one thread reads one ring. Several rings join one
//! `PACKET_FANOUT_CBPF` group ([`PacketRingEngine::open_fanout`]) whose BPF
//! program steers each packet by stream id to the ring of the thread owning
//! the stream (`capture::group`); the rings share one guard socket.
//!
//! Latency: the kernel hands a block over when it is full or `retire_ms` after
//! its first packet. Waits therefore last at least one retire period, so a
//! zero-timeout drain still sees packets sitting in a half-filled block.

use std::io;
use std::mem::size_of;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{fence, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::flow::{pass, Flow, Frame};
use super::{bind_udp, multicast, Engine, Received};
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
        if self.retire_ms == 0 || self.retire_ms > 1000 {
            return Err(Error::Config(format!(
                "packet ring retire_ms must be 1..=1000, got {}",
                self.retire_ms
            )));
        }
        if self.max_packet == 0 || self.max_packet > 65_536 {
            return Err(Error::Config(format!(
                "max_packet must be 1..=65536, got {}",
                self.max_packet
            )));
        }
        Ok(())
    }
}

// Linux constants not (or not everywhere) exported by the libc crate.
const TPACKET_V3: libc::c_int = 2;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const PACKET_VNET_HDR: libc::c_int = 15;
/// Asks the kernel to pick an unused fanout group id (linux/if_packet.h).
const PACKET_FANOUT_FLAG_UNIQUEID: u32 = 0x2000;
const PACKET_OUTGOING: u8 = 4;
const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1;
const VNET_HDR_LEN: usize = 10;
const VIRTIO_NET_HDR_GSO_NONE: u8 = 0;
const VIRTIO_NET_HDR_GSO_UDP_L4: u8 = 5;
const VIRTIO_NET_HDR_GSO_ECN: u8 = 0x80;

/// Offsets inside a block descriptor (`tpacket_block_desc` with `tpacket_hdr_v1`).
mod block {
    pub const STATUS: usize = 8;
    pub const NUM_PKTS: usize = 12;
    pub const FIRST: usize = 16;
}

/// Offsets inside a frame header (`tpacket3_hdr`, then `sockaddr_ll`).
mod frame {
    pub const NEXT: usize = 0;
    pub const SNAPLEN: usize = 12;
    pub const LEN: usize = 16;
    pub const MAC: usize = 24;
    /// `TPACKET_ALIGN(sizeof(tpacket3_hdr))` + offset of `sll_pkttype`.
    pub const PKTTYPE: usize = 48 + 10;
}

pub struct PacketRingEngine {
    fd: OwnedFd,
    /// Shared by the members of a fanout group.
    _guard: Arc<UdpSocket>,
    local: SocketAddr,
    interface: String,
    ring: *mut u8,
    ring_len: usize,
    block_size: usize,
    blocks: usize,
    next: usize,
    min_wait: Duration,
    flow: Flow,
    max_packet: usize,
    drops: u64,
    freezes: u64,
    kernel_packets: u64,
}

// SAFETY: `ring` is a mapping owned by this struct (unmapped in Drop); the
// kernel shares it only through the block status words, which are accessed
// atomically. Nothing is shared with another user thread.
unsafe impl Send for PacketRingEngine {}

impl PacketRingEngine {
    /// Opens the ring on the interface and binds the guard socket. Needs
    /// CAP_NET_RAW (root); the error says so.
    pub fn open(config: &PacketRingConfig) -> Result<Self> {
        let on = Target::bind(config)?;
        let mut prog = udp_filter(on.local.port(), on.dst());
        Self::open_on(config, &on, &mut prog)
    }

    /// Opens `members` rings on one interface and port, joined in that order
    /// to one `PACKET_FANOUT_CBPF` group steered by `steer` (a program
    /// returning the member index, see `capture::steer`). The kernel appends
    /// members to the group's array in join order (`__fanout_link`), so
    /// element `i` of the result receives what `steer` sends to `i`; members
    /// only leave when the whole group is dropped, so the order stays.
    ///
    /// Until the last member has joined, every ring holds a drop-all filter:
    /// a packet arriving during set-up is not delivered to a member that does
    /// not own its stream. The capture starts when the UDP filters are in.
    pub fn open_fanout(
        config: &PacketRingConfig,
        members: usize,
        steer: &[libc::sock_filter],
    ) -> Result<Vec<Self>> {
        if members == 0 || members > 256 {
            return Err(Error::Config(format!(
                "a packet ring fanout group takes 1..=256 threads, got {members}"
            )));
        }
        let on = Target::bind(config)?;
        let mut engines = Vec::with_capacity(members);
        let mut group_id = 0u32;
        for i in 0..members {
            let mut drop_all = [bpf(BPF_RET | BPF_K, 0, 0, 0)];
            let e = Self::open_on(config, &on, &mut drop_all)?;
            // The first member asks the kernel for a group id unused in this
            // network namespace, so no other process's group is joined by
            // accident; the others join that id with the same type and flags.
            let (id, flags) = if i == 0 {
                (0, PACKET_FANOUT_FLAG_UNIQUEID)
            } else {
                (group_id, 0)
            };
            let arg: u32 = id | (libc::PACKET_FANOUT_CBPF | flags) << 16;
            setsockopt(
                e.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_FANOUT,
                &arg,
            )
            .map_err(|err| {
                Error::io(
                    format!(
                        "cannot join member {i} to a PACKET_FANOUT_CBPF group (kernel \
                             4.5 or later needed)"
                    ),
                    err,
                )
            })?;
            if i == 0 {
                group_id = fanout_id(e.fd.as_raw_fd())
                    .map_err(|err| Error::io("cannot read the fanout group id", err))?;
            }
            engines.push(e);
        }
        let mut prog = steer.to_vec();
        let fprog = libc::sock_fprog {
            len: prog.len() as libc::c_ushort,
            filter: prog.as_mut_ptr(),
        };
        setsockopt(
            engines[0].fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_FANOUT_DATA,
            &fprog,
        )
        .map_err(|e| Error::io("cannot attach the steering program to the fanout group", e))?;
        for e in &engines {
            let mut udp = udp_filter(on.local.port(), on.dst());
            attach_filter(e.fd.as_raw_fd(), &mut udp)
                .map_err(|err| Error::io("cannot attach the BPF filter", err))?;
        }
        Ok(engines)
    }

    /// Opens one ring on `on`'s interface with `filter` attached before bind.
    fn open_on(
        config: &PacketRingConfig,
        on: &Target,
        filter: &mut [libc::sock_filter],
    ) -> Result<Self> {
        let (guard, local, interface, ifindex) =
            (on.guard.clone(), on.local, on.interface.clone(), on.ifindex);

        // SAFETY: plain socket(2) call; the result is checked below. Protocol 0:
        // nothing is received until bind() names a protocol, after the filter.
        let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            let e = io::Error::last_os_error();
            let hint = if e.kind() == io::ErrorKind::PermissionDenied {
                " (AF_PACKET needs root or CAP_NET_RAW; use engine='socket' otherwise)"
            } else {
                ""
            };
            return Err(Error::io(
                format!("cannot open an AF_PACKET socket{hint}"),
                e,
            ));
        }
        // SAFETY: `raw` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let s = fd.as_raw_fd();
        let ctx = |what: &'static str| move |e| Error::io(what, e);
        setsockopt(s, libc::SOL_PACKET, libc::PACKET_VERSION, &TPACKET_V3)
            .map_err(ctx("cannot select TPACKET_V3 (kernel too old?)"))?;
        setsockopt(s, libc::SOL_PACKET, PACKET_VNET_HDR, &1 as &libc::c_int).map_err(ctx(
            "cannot enable PACKET_VNET_HDR (needed to split GSO frames)",
        ))?;
        setsockopt(
            s,
            libc::SOL_PACKET,
            PACKET_IGNORE_OUTGOING,
            &1 as &libc::c_int,
        )
        .map_err(ctx(
            "cannot set PACKET_IGNORE_OUTGOING (kernel 4.20 or later needed)",
        ))?;
        attach_filter(s, filter).map_err(ctx("cannot attach the BPF filter"))?;
        let req = libc::tpacket_req3 {
            tp_block_size: config.block_size as u32,
            tp_block_nr: config.blocks as u32,
            tp_frame_size: config.frame_size as u32,
            tp_frame_nr: (config.block_size / config.frame_size * config.blocks) as u32,
            tp_retire_blk_tov: config.retire_ms,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        setsockopt(s, libc::SOL_PACKET, libc::PACKET_RX_RING, &req).map_err(|e| {
            Error::io(
                format!(
                    "cannot allocate a packet ring of {} x {} bytes; use fewer or smaller blocks",
                    config.blocks, config.block_size
                ),
                e,
            )
        })?;
        let ring_len = config.block_size * config.blocks;
        // SAFETY: maps the ring the kernel just allocated for this socket; the
        // result is checked against MAP_FAILED. MAP_POPULATE pre-faults it.
        let ring = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                ring_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE | libc::MAP_LOCKED,
                s,
                0,
            )
        };
        let ring = if ring == libc::MAP_FAILED {
            // SAFETY: as above, without MAP_LOCKED (RLIMIT_MEMLOCK may be low;
            // the ring's pages are kernel pages and are never swapped anyway).
            let r = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    ring_len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED | libc::MAP_POPULATE,
                    s,
                    0,
                )
            };
            if r == libc::MAP_FAILED {
                return Err(Error::io(
                    "cannot map the packet ring",
                    io::Error::last_os_error(),
                ));
            }
            r
        } else {
            ring
        };
        let engine = PacketRingEngine {
            fd,
            _guard: guard,
            local,
            interface,
            ring: ring.cast(),
            ring_len,
            block_size: config.block_size,
            blocks: config.blocks,
            next: 0,
            min_wait: Duration::from_millis(config.retire_ms as u64 + 2),
            flow: Flow::new(local),
            max_packet: config.max_packet,
            drops: 0,
            freezes: 0,
            kernel_packets: 0,
        };
        // SAFETY: an all-zero sockaddr_ll is valid; the fields that matter are set.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        sll.sll_ifindex = ifindex;
        // SAFETY: passes a live sockaddr_ll and its exact size.
        let r = unsafe {
            libc::bind(
                s,
                (&sll as *const libc::sockaddr_ll).cast(),
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(Error::io(
                format!(
                    "cannot bind the packet ring to interface '{}'",
                    engine.interface
                ),
                io::Error::last_os_error(),
            ));
        }
        Ok(engine)
    }

    /// The interface the ring is bound to.
    pub fn interface(&self) -> &str {
        &self.interface
    }

    /// Times the kernel found the ring full and froze it (`tp_freeze_q_cnt`),
    /// as of the last [`Engine::kernel_drops`] call.
    pub fn freezes(&self) -> u64 {
        self.freezes
    }

    /// Frames the kernel passed the filter, dropped ones included, as of the
    /// last [`Engine::kernel_drops`] call.
    pub fn kernel_frames(&self) -> u64 {
        self.kernel_packets
    }

    fn status(&self, b: usize) -> &AtomicU32 {
        // SAFETY: b < blocks, so the word lies inside the mapping; it is 4-byte
        // aligned (blocks are page aligned), lives as long as `self`, and the
        // kernel accesses it concurrently, hence the atomic view.
        unsafe { AtomicU32::from_ptr(self.ring.add(b * self.block_size + block::STATUS).cast()) }
    }

    fn wait(&self, timeout: Duration) -> io::Result<()> {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN | libc::POLLERR,
            revents: 0,
        };
        let ms = timeout.max(self.min_wait).as_millis().min(i32::MAX as u128) as libc::c_int;
        // SAFETY: one valid pollfd, count 1.
        let r = unsafe { libc::poll(&mut pfd, 1, ms) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// Hands every datagram of one user-owned block to `sink`; returns how many.
    fn read_block<F: FnMut(Received<'_>)>(&self, blk: &[u8], sink: &mut F) -> usize {
        let u32_at = |at: usize| {
            blk.get(at..at + 4)
                .map(|s| u32::from_ne_bytes([s[0], s[1], s[2], s[3]]))
        };
        let u16_at = |at: usize| {
            blk.get(at..at + 2)
                .map(|s| u16::from_ne_bytes([s[0], s[1]]))
        };
        let (Some(npkts), Some(first)) = (u32_at(block::NUM_PKTS), u32_at(block::FIRST)) else {
            return 0;
        };
        let mut n = 0;
        let mut off = first as usize;
        for _ in 0..npkts {
            let (Some(next), Some(snap), Some(len), Some(mac)) = (
                u32_at(off + frame::NEXT),
                u32_at(off + frame::SNAPLEN),
                u32_at(off + frame::LEN),
                u16_at(off + frame::MAC),
            ) else {
                break; // a corrupt block: the kernel never writes one
            };
            let pkttype = blk.get(off + frame::PKTTYPE).copied();
            let start = off + mac as usize;
            let vnet = start
                .checked_sub(VNET_HDR_LEN)
                .and_then(|v| blk.get(v..start));
            if let (Some(l2), Some(vnet), false) = (
                blk.get(start..start + snap as usize),
                vnet,
                pkttype == Some(PACKET_OUTGOING),
            ) {
                n += self.deliver(l2, len as usize, vnet, sink);
            }
            if next == 0 {
                break;
            }
            off += next as usize;
        }
        n
    }

    /// Passes one frame's datagrams on; returns how many reached `sink`.
    fn deliver<F: FnMut(Received<'_>)>(
        &self,
        l2: &[u8],
        wire_len: usize,
        vnet: &[u8],
        sink: &mut F,
    ) -> usize {
        let gso_type = vnet[1] & !VIRTIO_NET_HDR_GSO_ECN;
        let gso_size = u16::from_ne_bytes([vnet[4], vnet[5]]) as usize;
        let seg = match gso_type {
            VIRTIO_NET_HDR_GSO_NONE => None,
            VIRTIO_NET_HDR_GSO_UDP_L4 if gso_size > 0 => Some(gso_size),
            _ => {
                sink(Received::Truncated); // TCP or UFO: not a datagram stream
                return 1;
            }
        };
        if l2.len() < wire_len {
            // Cut short by the ring: one loss per datagram the frame carried.
            let k = seg.map_or(1, |s| wire_len.saturating_sub(42).div_ceil(s).max(1));
            for _ in 0..k {
                sink(Received::Truncated);
            }
            return k;
        }
        match (self.flow.frame(l2), seg) {
            (Frame::Udp(p), None) => {
                pass(p, self.max_packet, sink);
                1
            }
            (Frame::Udp(p), Some(s)) => {
                p.chunks(s).for_each(|d| pass(d, self.max_packet, sink));
                p.len().div_ceil(s)
            }
            (Frame::Cut | Frame::Malformed, _) => {
                sink(Received::Truncated);
                1
            }
            (Frame::Other, _) => 0,
        }
    }
}

/// Where rings capture: the guard socket holding the port, and the interface.
struct Target {
    guard: Arc<UdpSocket>,
    local: SocketAddr,
    interface: String,
    ifindex: libc::c_int,
    /// IPv4 multicast groups the guard joined (the filters accept only these).
    groups: Option<Vec<Ipv4Addr>>,
}

impl Target {
    fn bind(config: &PacketRingConfig) -> Result<Target> {
        config.validate()?;
        let addr = resolve_ip(&config.bind)?;
        let groups = multicast::plan(addr, &config.multicast)?;
        if groups.is_some() && config.interface.is_none() {
            return Err(Error::Config(
                "a multicast capture with the packet ring needs the interface to capture on \
                 (e.g. interface='eth0')"
                    .into(),
            ));
        }
        if groups.as_ref().is_some_and(|p| p.bind.is_ipv6()) {
            return Err(Error::Config(
                "the packet ring's filter holds IPv4 multicast groups only; capture IPv6 \
                 groups with the socket engine"
                    .into(),
            ));
        }
        let guard = bind_udp(groups.as_ref().map_or(addr, |p| p.bind))?;
        let local = guard
            .local_addr()
            .map_err(|e| Error::io("cannot read the guard socket address", e))?;
        // Drop every datagram the stack would queue on the guard.
        attach_drop_all(guard.as_raw_fd())
            .map_err(|e| Error::io("cannot attach the drop-all filter to the guard socket", e))?;
        let ip = local.ip();
        let interface = match &config.interface {
            Some(i) => i.clone(),
            None => interface_of_ip(ip)?.ok_or_else(|| {
                Error::Config(format!(
                    "no interface has the address {ip}; pass the interface to capture on \
                     (e.g. interface='lo' or 'eth0')"
                ))
            })?,
        };
        let ifindex = if_index(&interface)?;
        // The guard's membership makes the kernel send the IGMP report (and
        // program the NIC's filter); the rings themselves read below the IP layer.
        if let Some(p) = &groups {
            multicast::join(&guard, &p.groups, Some(&interface))?;
        }
        Ok(Target {
            guard: Arc::new(guard),
            local,
            interface,
            ifindex,
            groups: groups.map(|p| p.groups_v4()),
        })
    }

    /// The destinations the filter accepts.
    fn dst(&self) -> DstMatch<'_> {
        match (&self.groups, self.local.ip()) {
            (Some(g), _) => DstMatch::Groups(g),
            (None, ip) if !ip.is_unspecified() => DstMatch::One(ip),
            (None, IpAddr::V4(_)) => DstMatch::Any,
            (None, IpAddr::V6(_)) => DstMatch::Dual,
        }
    }
}

/// The id of the fanout group the socket belongs to.
fn fanout_id(fd: libc::c_int) -> io::Result<u32> {
    let mut v: u32 = 0;
    let mut len = size_of::<u32>() as libc::socklen_t;
    // SAFETY: `v` is writable for `len` bytes; the kernel writes at most that.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_PACKET,
            libc::PACKET_FANOUT,
            (&mut v as *mut u32).cast(),
            &mut len,
        )
    };
    if r == 0 {
        Ok(v & 0xffff)
    } else {
        Err(io::Error::last_os_error())
    }
}

impl Engine for PacketRingEngine {
    fn name(&self) -> &'static str {
        "packet_ring"
    }

    fn recv_batch<F: FnMut(Received<'_>)>(
        &mut self,
        timeout: Duration,
        mut sink: F,
    ) -> Result<usize> {
        let b = self.next;
        if self.status(b).load(Ordering::Acquire) & TP_STATUS_USER == 0 {
            match self.wait(timeout) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(0),
                Err(e) => return Err(Error::io("poll on the packet ring failed", e)),
            }
            if self.status(b).load(Ordering::Acquire) & TP_STATUS_USER == 0 {
                return Ok(0);
            }
        }
        // SAFETY: block `b` lies inside the mapping, and while its status says
        // TP_STATUS_USER the kernel does not write to it (the Acquire load above
        // orders our reads after the kernel's writes), so a shared slice is sound
        // until we hand it back below.
        let blk = unsafe {
            std::slice::from_raw_parts(self.ring.add(b * self.block_size), self.block_size)
        };
        let n = self.read_block(blk, &mut sink);
        fence(Ordering::Release);
        self.status(b).store(TP_STATUS_KERNEL, Ordering::Release);
        self.next = (b + 1) % self.blocks;
        Ok(n)
    }

    fn kernel_drops(&mut self) -> u64 {
        let mut st = libc::tpacket_stats_v3 {
            tp_packets: 0,
            tp_drops: 0,
            tp_freeze_q_cnt: 0,
        };
        let mut len = size_of::<libc::tpacket_stats_v3>() as libc::socklen_t;
        // SAFETY: `st` is writable for `len` bytes; the kernel writes at most that.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&mut st as *mut libc::tpacket_stats_v3).cast(),
                &mut len,
            )
        };
        if r == 0 {
            // The kernel resets these counters on every read.
            self.drops += st.tp_drops as u64;
            self.kernel_packets += st.tp_packets as u64;
            self.freezes += st.tp_freeze_q_cnt as u64;
        }
        self.drops
    }

    fn rcvbuf(&self) -> u64 {
        self.ring_len as u64
    }

    fn local_addr(&self) -> Option<SocketAddr> {
        Some(self.local)
    }

    fn interface(&self) -> Option<&str> {
        Some(&self.interface)
    }
}

impl Drop for PacketRingEngine {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `open`; no slice into it
        // outlives a `recv_batch` call.
        unsafe {
            libc::munmap(self.ring.cast(), self.ring_len);
        }
    }
}

// Classic BPF opcodes (linux/filter.h).
pub(super) const BPF_LD: u16 = 0x00;
pub(super) const BPF_LDX: u16 = 0x01;
pub(super) const BPF_ALU: u16 = 0x04;
pub(super) const BPF_JMP: u16 = 0x05;
pub(super) const BPF_RET: u16 = 0x06;
pub(super) const BPF_W: u16 = 0x00;
pub(super) const BPF_H: u16 = 0x08;
pub(super) const BPF_B: u16 = 0x10;
pub(super) const BPF_ABS: u16 = 0x20;
pub(super) const BPF_IND: u16 = 0x40;
pub(super) const BPF_MSH: u16 = 0xa0;
pub(super) const BPF_AND: u16 = 0x50;
pub(super) const BPF_JEQ: u16 = 0x10;
pub(super) const BPF_JSET: u16 = 0x40;
pub(super) const BPF_K: u16 = 0x00;
/// `SKF_AD_OFF + SKF_AD_PKTTYPE`: loads the packet type.
const SKF_PKTTYPE: u32 = (-0x1000i32 + 4) as u32;
/// Snap length the filter grants: more than any frame (64 KiB GSO + headers).
const SNAP: u32 = 0x0004_0000;

pub(super) fn bpf(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// Which destination addresses the ring's filter accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DstMatch<'a> {
    /// Any IPv4 address (bound to 0.0.0.0).
    Any,
    /// Any IPv4 or IPv6 address (bound to `[::]`, which holds both).
    Dual,
    /// Exactly this address.
    One(IpAddr),
    /// These IPv4 multicast groups, and any unicast address (as a socket bound
    /// to 0.0.0.0 that joined them receives); other groups are refused.
    Groups(&'a [Ipv4Addr]),
}

impl DstMatch<'_> {
    fn v4(&self) -> bool {
        !matches!(self, DstMatch::One(IpAddr::V6(_)))
    }

    fn v6(&self) -> bool {
        matches!(self, DstMatch::Dual | DstMatch::One(IpAddr::V6(_)))
    }
}

/// A jump target while the filter is written; resolved to offsets at the end.
#[derive(Clone, Copy, PartialEq, Eq)]
enum To {
    Next,
    Port,
    V6,
    Accept,
    Drop,
}

/// Accepts UDP frames to `port` and a destination `dst` accepts that are not
/// outgoing and not non-first fragments, with or without one VLAN tag: IPv4
/// (the UDP header found through the IHL), and, when `dst` takes IPv6, IPv6
/// whose fixed header is followed by UDP directly. IPv6 extension headers are
/// not walked here (classic BPF has no loop; our senders use none): such frames
/// never reach the ring, as frames to other ports do not.
fn udp_filter(port: u16, dst: DstMatch<'_>) -> Vec<libc::sock_filter> {
    // One body per header position (`l3`: where IP starts), each ending in
    // its own accept and drop; jumps are written symbolically, then resolved.
    let body = |l3: u32| {
        let v4 = if dst.v4() { To::Next } else { To::V6 };
        let mut b = vec![
            (BPF_LD | BPF_H | BPF_ABS, To::Next, To::Next, l3 - 2), // ethertype
            (BPF_JMP | BPF_JEQ | BPF_K, v4, To::V6, 0x0800),
            (BPF_LD | BPF_B | BPF_ABS, To::Next, To::Next, l3 + 9), // protocol
            (BPF_JMP | BPF_JEQ | BPF_K, To::Next, To::Drop, 17),
            (BPF_LD | BPF_H | BPF_ABS, To::Next, To::Next, l3 + 6), // fragment offset
            (BPF_JMP | BPF_JSET | BPF_K, To::Drop, To::Next, 0x1fff),
        ];
        let load_dst = (BPF_LD | BPF_W | BPF_ABS, To::Next, To::Next, l3 + 16);
        match dst {
            DstMatch::Any | DstMatch::Dual | DstMatch::One(IpAddr::V6(_)) => {}
            DstMatch::One(IpAddr::V4(a)) => {
                b.push(load_dst);
                b.push((BPF_JMP | BPF_JEQ | BPF_K, To::Next, To::Drop, u32::from(a)));
            }
            DstMatch::Groups(groups) => {
                b.push(load_dst);
                for g in groups {
                    b.push((BPF_JMP | BPF_JEQ | BPF_K, To::Port, To::Next, u32::from(*g)));
                }
                // Not one of ours: unicast passes on, any other group is dropped.
                b.push((BPF_ALU | BPF_AND | BPF_K, To::Next, To::Next, 0xf000_0000));
                b.push((BPF_JMP | BPF_JEQ | BPF_K, To::Drop, To::Next, 0xe000_0000));
            }
        }
        let port_at = b.len();
        b.extend([
            (BPF_LDX | BPF_B | BPF_MSH, To::Next, To::Next, l3), // X = IP header length
            (BPF_LD | BPF_H | BPF_IND, To::Next, To::Next, l3 + 2), // UDP destination port
            (BPF_JMP | BPF_JEQ | BPF_K, To::Accept, To::Drop, port as u32),
        ]);
        // IPv6: A still holds the ethertype.
        let v6_at = b.len();
        if dst.v6() {
            b.extend([
                (BPF_JMP | BPF_JEQ | BPF_K, To::Next, To::Drop, 0x86dd),
                (BPF_LD | BPF_B | BPF_ABS, To::Next, To::Next, l3 + 6), // next header
                (BPF_JMP | BPF_JEQ | BPF_K, To::Next, To::Drop, 17),
            ]);
            if let DstMatch::One(IpAddr::V6(a)) = dst {
                for (i, w) in a.octets().chunks(4).enumerate() {
                    let w = u32::from_be_bytes([w[0], w[1], w[2], w[3]]);
                    b.push((
                        BPF_LD | BPF_W | BPF_ABS,
                        To::Next,
                        To::Next,
                        l3 + 24 + 4 * i as u32,
                    ));
                    b.push((BPF_JMP | BPF_JEQ | BPF_K, To::Next, To::Drop, w));
                }
            }
            b.extend([
                (BPF_LD | BPF_H | BPF_ABS, To::Next, To::Next, l3 + 42), // UDP destination port
                (BPF_JMP | BPF_JEQ | BPF_K, To::Accept, To::Drop, port as u32),
            ]);
        }
        let accept_at = b.len();
        b.push((BPF_RET | BPF_K, To::Next, To::Next, SNAP));
        b.push((BPF_RET | BPF_K, To::Next, To::Next, 0));
        let v6_at = if dst.v6() { v6_at } else { accept_at + 1 };
        let off = |from: usize, to: To| -> u8 {
            let target = match to {
                To::Next => return 0,
                To::Port => port_at,
                To::V6 => v6_at,
                To::Accept => accept_at,
                To::Drop => accept_at + 1,
            };
            u8::try_from(target - from - 1).expect("the filter is short (MAX_GROUPS)")
        };
        b.iter()
            .enumerate()
            .map(|(i, &(code, jt, jf, k))| bpf(code, off(i, jt), off(i, jf), k))
            .collect::<Vec<_>>()
    };
    let (plain, tagged) = (body(14), body(18));
    let head = 5;
    let (to_plain_drop, to_tagged) = (head + plain.len() - 1, head + plain.len());
    let mut p = vec![
        bpf(BPF_LD | BPF_W | BPF_ABS, 0, 0, SKF_PKTTYPE),
        bpf(
            BPF_JMP | BPF_JEQ | BPF_K,
            (to_plain_drop - 2) as u8,
            0,
            PACKET_OUTGOING as u32,
        ),
        bpf(BPF_LD | BPF_H | BPF_ABS, 0, 0, 12),
        bpf(BPF_JMP | BPF_JEQ | BPF_K, (to_tagged - 4) as u8, 0, 0x8100),
        bpf(BPF_JMP | BPF_JEQ | BPF_K, (to_tagged - 5) as u8, 0, 0x88a8),
    ];
    p.extend(plain);
    p.extend(tagged);
    p
}

/// Attaches a `ret 0` filter: the socket (a guard that only holds the port)
/// never queues a datagram.
pub(crate) fn attach_drop_all(fd: libc::c_int) -> io::Result<()> {
    attach_filter(fd, &mut [bpf(BPF_RET | BPF_K, 0, 0, 0)])
}

fn attach_filter(fd: libc::c_int, prog: &mut [libc::sock_filter]) -> io::Result<()> {
    let fprog = libc::sock_fprog {
        len: prog.len() as libc::c_ushort,
        filter: prog.as_mut_ptr(),
    };
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &fprog)
}

pub(crate) fn setsockopt<T>(
    fd: libc::c_int,
    level: libc::c_int,
    opt: libc::c_int,
    v: &T,
) -> io::Result<()> {
    // SAFETY: passes a pointer to a live `T` and its exact size; the kernel
    // copies it before returning.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            (v as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The bind address, IPv4 or IPv6 (`[::1]:7000`), as given.
pub(crate) fn resolve_ip(bind: &str) -> Result<SocketAddr> {
    let bad = || {
        Error::Config(format!(
            "bind address '{bind}' is not host:port (for example 127.0.0.1:7000, 0.0.0.0:7000 \
             or [::1]:7000)"
        ))
    };
    bind.to_socket_addrs()
        .map_err(|_| bad())?
        .next()
        .ok_or_else(bad)
}

pub(crate) fn if_index(name: &str) -> Result<libc::c_int> {
    let c = std::ffi::CString::new(name)
        .map_err(|_| Error::Config(format!("interface name {name:?} contains a NUL byte")))?;
    // SAFETY: `c` is a valid NUL-terminated string for the duration of the call.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        return Err(Error::Config(format!(
            "no network interface named '{name}' (see `ip link`)"
        )));
    }
    Ok(i as libc::c_int)
}

/// The interface that owns `ip` (`lo` for 127.0.0.0/8), if any.
pub fn interface_of(ip: Ipv4Addr) -> Result<Option<String>> {
    interface_of_ip(ip.into())
}

/// The interface that owns `ip`, IPv4 or IPv6 (`lo` for 127.0.0.0/8 and ::1).
pub(crate) fn interface_of_ip(ip: IpAddr) -> Result<Option<String>> {
    if ip.is_loopback() {
        return Ok(Some("lo".into()));
    }
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(Error::io(
            "cannot list network interfaces",
            io::Error::last_os_error(),
        ));
    }
    let mut found = None;
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, not yet freed;
        // ifa_addr, when non-null, points to a sockaddr of its family
        // (sockaddr_in for AF_INET, sockaddr_in6 for AF_INET6), and ifa_name
        // to a NUL-terminated string.
        unsafe {
            let a = (*cur).ifa_addr;
            let have = match (a.is_null(), ip) {
                (true, _) => None,
                (false, IpAddr::V4(_)) if (*a).sa_family as libc::c_int == libc::AF_INET => {
                    let sin = &*(a as *const libc::sockaddr_in);
                    Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                        sin.sin_addr.s_addr,
                    ))))
                }
                (false, IpAddr::V6(_)) if (*a).sa_family as libc::c_int == libc::AF_INET6 => {
                    let sin6 = &*(a as *const libc::sockaddr_in6);
                    Some(IpAddr::V6(sin6.sin6_addr.s6_addr.into()))
                }
                _ => None,
            };
            if have == Some(ip) {
                let name = std::ffi::CStr::from_ptr((*cur).ifa_name);
                found = Some(name.to_string_lossy().into_owned());
                break;
            }
            cur = (*cur).ifa_next;
        }
    }
    // SAFETY: frees the list getifaddrs allocated, once.
    unsafe { libc::freeifaddrs(head) };
    Ok(found)
}

pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::test_collect as collect;

    fn frame(port: u16, payload: &[u8], vlan: bool, frag: u16) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        if vlan {
            f.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
        }
        f.extend_from_slice(&[0x08, 0x00]);
        let total = (20 + 8 + payload.len()) as u16;
        f.extend_from_slice(&[0x45, 0, 0, 0, 0, 0, 0, 0, 64, 17, 0, 0]);
        let ip = f.len() - 12;
        f[ip + 2..ip + 4].copy_from_slice(&total.to_be_bytes());
        f[ip + 6..ip + 8].copy_from_slice(&frag.to_be_bytes());
        f.extend_from_slice(&[127, 0, 0, 1, 127, 0, 0, 1]);
        f.extend_from_slice(&1234u16.to_be_bytes());
        f.extend_from_slice(&port.to_be_bytes());
        f.extend_from_slice(&(8 + payload.len() as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend_from_slice(payload);
        f
    }

    fn parse_udp(l2: &[u8], port: u16) -> Frame<'_> {
        Flow::port(port).frame(l2)
    }

    #[test]
    fn parses_udp_with_and_without_vlan_and_rejects_every_cut() {
        let payload: Vec<u8> = (0..100u32).map(|i| (i * 7 + 3) as u8).collect();
        for vlan in [false, true] {
            let f = frame(7000, &payload, vlan, 0);
            assert_eq!(parse_udp(&f, 7000), Frame::Udp(&payload[..]));
            assert_eq!(parse_udp(&f, 7001), Frame::Other);
            for n in 0..f.len() {
                assert!(
                    matches!(
                        parse_udp(&f[..n], 7000),
                        Frame::Cut | Frame::Malformed | Frame::Other
                    ),
                    "cut at {n}"
                );
                assert_ne!(parse_udp(&f[..n], 7000), Frame::Udp(&payload[..]));
            }
            // Ethernet padding after the IP datagram is ignored.
            let mut padded = f.clone();
            padded.extend_from_slice(&[0; 9]);
            assert_eq!(parse_udp(&padded, 7000), Frame::Udp(&payload[..]));
            // First fragment (MF) and a UDP length that disagrees: malformed.
            assert_eq!(
                parse_udp(&frame(7000, &payload, vlan, 0x2000), 7000),
                Frame::Malformed
            );
            let mut bad = f.clone();
            let at = bad.len() - payload.len() - 4;
            bad[at] ^= 1;
            assert_eq!(parse_udp(&bad, 7000), Frame::Malformed);
        }
        let mut arp = frame(7000, &payload, false, 0);
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(parse_udp(&arp, 7000), Frame::Other);
    }

    /// A classic BPF interpreter for the instructions `udp_filter` uses.
    fn run_bpf(p: &[libc::sock_filter], pkt: &[u8], pkttype: u8) -> u32 {
        let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
        let load = |at: usize, size: u16| -> Option<u32> {
            let n = match size {
                BPF_W => 4,
                BPF_H => 2,
                _ => 1,
            };
            let b = pkt.get(at..at + n)?;
            Some(b.iter().fold(0u32, |v, &c| v << 8 | c as u32))
        };
        loop {
            let i = p[pc];
            pc += 1;
            match (i.code & 0x07, i.code & 0xe0) {
                (BPF_LD, BPF_ABS) if i.k == SKF_PKTTYPE => a = pkttype as u32,
                (BPF_LD, BPF_ABS) => match load(i.k as usize, i.code & 0x18) {
                    Some(v) => a = v,
                    None => return 0,
                },
                (BPF_LD, BPF_IND) => match load((x + i.k) as usize, i.code & 0x18) {
                    Some(v) => a = v,
                    None => return 0,
                },
                (BPF_LDX, BPF_MSH) => match pkt.get(i.k as usize) {
                    Some(&b) => x = 4 * (b & 0x0f) as u32,
                    None => return 0,
                },
                (BPF_ALU, _) => a &= i.k,
                (BPF_JMP, _) => {
                    let hit = if i.code & 0xf0 == BPF_JSET {
                        a & i.k != 0
                    } else {
                        a == i.k
                    };
                    pc += if hit { i.jt } else { i.jf } as usize;
                }
                (BPF_RET, _) => return i.k,
                other => panic!("unexpected instruction {other:?}"),
            }
        }
    }

    #[test]
    fn filter_accepts_exactly_udp_to_our_address_and_port() {
        let payload = [1u8, 2, 3, 4, 5];
        let lo = DstMatch::One(Ipv4Addr::LOCALHOST.into());
        let any = DstMatch::Any;
        for vlan in [false, true] {
            let f = frame(7000, &payload, vlan, 0);
            let ip = if vlan { 18 } else { 14 };
            let run = |dst, f: &[u8], t| run_bpf(&udp_filter(7000, dst), f, t);
            assert_eq!(run(lo, &f, 0), SNAP);
            assert_eq!(run(any, &f, 0), SNAP);
            assert_eq!(run(lo, &f, PACKET_OUTGOING), 0);
            assert_eq!(run(lo, &frame(7001, &payload, vlan, 0), 0), 0);
            assert_eq!(run(lo, &frame(7000, &payload, vlan, 0x2000), 0), SNAP);
            assert_eq!(run(lo, &frame(7000, &payload, vlan, 0x0010), 0), 0);
            assert_eq!(run(lo, &frame(7000, &payload, vlan, 0x4000), 0), SNAP);
            let mut other_dst = f.clone();
            other_dst[ip + 16] = 10;
            assert_eq!(run(lo, &other_dst, 0), 0);
            assert_eq!(run(any, &other_dst, 0), SNAP);
            let mut tcp = f.clone();
            tcp[ip + 9] = 6;
            assert_eq!(run(lo, &tcp, 0), 0);
            let mut arp = f.clone();
            arp[ip - 2] = 0x06;
            assert_eq!(run(lo, &arp, 0), 0);
            // IP options move the UDP header; the filter follows the IHL.
            let mut opt = f[..ip].to_vec();
            opt.extend_from_slice(&f[ip..ip + 20]);
            opt[ip] = 0x46;
            opt.extend_from_slice(&[1, 1, 1, 0]);
            opt.extend_from_slice(&f[ip + 20..]);
            assert_eq!(run(lo, &opt, 0), SNAP);
            for n in 0..ip + 24 {
                assert_eq!(run(lo, &f[..n], 0), 0, "cut at {n}");
            }
        }
    }

    #[test]
    fn filter_with_groups_accepts_joined_groups_and_unicast_only() {
        let payload = [9u8; 12];
        let joined: Vec<Ipv4Addr> = (1..=multicast_max())
            .map(|i| Ipv4Addr::new(239, 1, 2, i))
            .collect();
        for n in [1, 2, multicast_max() as usize] {
            let groups = &joined[..n];
            let prog = udp_filter(7000, DstMatch::Groups(groups));
            for vlan in [false, true] {
                let ip = if vlan { 18 } else { 14 };
                let with_dst = |a: Ipv4Addr, port: u16| {
                    let mut f = frame(port, &payload, vlan, 0);
                    f[ip + 16..ip + 20].copy_from_slice(&a.octets());
                    f
                };
                for g in groups {
                    assert_eq!(run_bpf(&prog, &with_dst(*g, 7000), 0), SNAP, "{g}");
                    assert_eq!(run_bpf(&prog, &with_dst(*g, 7001), 0), 0, "{g} other port");
                    assert_eq!(run_bpf(&prog, &with_dst(*g, 7000), PACKET_OUTGOING), 0);
                }
                for other in [Ipv4Addr::new(239, 1, 2, 200), Ipv4Addr::new(224, 0, 0, 251)] {
                    assert_eq!(run_bpf(&prog, &with_dst(other, 7000), 0), 0, "{other}");
                }
                for unicast in [Ipv4Addr::new(10, 1, 1, 1), Ipv4Addr::new(192, 168, 0, 9)] {
                    assert_eq!(
                        run_bpf(&prog, &with_dst(unicast, 7000), 0),
                        SNAP,
                        "{unicast}"
                    );
                }
            }
        }
    }

    fn multicast_max() -> u8 {
        crate::capture::MAX_GROUPS as u8
    }

    #[test]
    fn loopback_ring_receives_our_port_only_in_order() {
        let mut cfg = PacketRingConfig::new("127.0.0.1:0");
        cfg.max_packet = 1000;
        cfg.blocks = 4;
        cfg.block_size = 128 << 10;
        let mut e = PacketRingEngine::open(&cfg).unwrap();
        assert_eq!(e.interface(), "lo");
        let to = e.local_addr().unwrap();
        let other = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut sent = Vec::new();
        for i in 0..60u32 {
            let len = if i % 10 == 3 {
                1001
            } else {
                1 + (i as usize * 37) % 1000
            };
            let p: Vec<u8> = (0..len).map(|k| (k as u32 * 13 + i) as u8).collect();
            tx.send_to(&p, to).unwrap();
            tx.send_to(&p, other.local_addr().unwrap()).unwrap(); // filtered out
            sent.push(p);
        }
        let (got, truncated) = collect(&mut e, 60);
        assert_eq!(truncated, 6);
        let expect: Vec<Vec<u8>> = sent.into_iter().filter(|p| p.len() <= 1000).collect();
        assert_eq!(got, expect);
        // Nothing more is pending: the other port's packets never reached us.
        assert_eq!(e.recv_batch(Duration::ZERO, |_| {}).unwrap(), 0);
        assert_eq!(e.kernel_drops(), 0);
        assert_eq!(e.kernel_frames(), 60);
    }

    #[test]
    fn loopback_ring_receives_ipv6_for_our_port() {
        let mut cfg = PacketRingConfig::new("[::1]:0");
        cfg.max_packet = 1000;
        cfg.blocks = 4;
        cfg.block_size = 128 << 10;
        let mut e = PacketRingEngine::open(&cfg).unwrap();
        assert_eq!(e.interface(), "lo");
        let to = e.local_addr().unwrap();
        assert!(to.is_ipv6());
        let other = UdpSocket::bind("[::1]:0").unwrap();
        let tx = UdpSocket::bind("[::1]:0").unwrap();
        let v4 = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut sent = Vec::new();
        for i in 0..30u32 {
            let p: Vec<u8> = (0..1 + i as usize * 31)
                .map(|k| (k as u32 ^ i) as u8)
                .collect();
            tx.send_to(&p, to).unwrap();
            tx.send_to(&p, other.local_addr().unwrap()).unwrap(); // filtered out
                                                                  // The same port on IPv4 is not ours (bound to ::1, not [::]).
            let _ = v4.send_to(&p, ("127.0.0.1", to.port()));
            sent.push(p);
        }
        let (got, truncated) = collect(&mut e, 30);
        assert_eq!((got, truncated), (sent, 0));
        assert_eq!(e.recv_batch(Duration::ZERO, |_| {}).unwrap(), 0);
        assert_eq!(e.kernel_drops(), 0);
        assert_eq!(e.kernel_frames(), 30);
    }

    #[test]
    fn filter_accepts_ipv6_udp_to_our_address_and_port() {
        use crate::wire::net::build::udp_frame;
        let sa = |s: &str| s.parse::<SocketAddr>().unwrap();
        let p = [3u8; 40];
        let ours = DstMatch::One("fd00::1".parse().unwrap());
        for tags in [0, 1] {
            let f = |dst: &str| udp_frame(sa("[fd00::2]:99"), sa(dst), tags, &p);
            let run = |dst, f: &[u8]| run_bpf(&udp_filter(7000, dst), f, 0);
            assert_eq!(run(ours, &f("[fd00::1]:7000")), SNAP);
            assert_eq!(run(DstMatch::Dual, &f("[fd00::1]:7000")), SNAP);
            assert_eq!(run(DstMatch::Dual, &f("[fd00::9]:7000")), SNAP);
            assert_eq!(run(ours, &f("[fd00::9]:7000")), 0);
            assert_eq!(run(ours, &f("[fd00::1]:7001")), 0);
            // IPv4 binds take no IPv6; an IPv6 bind takes IPv4 only when it is [::].
            assert_eq!(run(DstMatch::Any, &f("[fd00::1]:7000")), 0);
            let v4 = udp_frame(sa("10.0.0.2:99"), sa("10.0.0.1:7000"), tags, &p);
            assert_eq!(run(DstMatch::Dual, &v4), SNAP);
            assert_eq!(run(ours, &v4), 0);
            // Extension headers are not walked in the kernel: refused there.
            let mut hop = f("[fd00::1]:7000");
            hop[14 + 4 * tags + 6] = 0;
            assert_eq!(run(ours, &hop), 0);
            let good = f("[fd00::1]:7000");
            for n in 0..14 + 4 * tags + 44 {
                assert_eq!(run(ours, &good[..n]), 0, "cut at {n}");
            }
        }
    }

    #[test]
    fn ring_drops_are_counted_when_it_overflows() {
        let mut cfg = PacketRingConfig::new("127.0.0.1:0");
        cfg.blocks = 2;
        cfg.block_size = 128 << 10;
        let mut e = PacketRingEngine::open(&cfg).unwrap();
        let to = e.local_addr().unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let p = vec![0x5au8; 8000];
        for _ in 0..100 {
            tx.send_to(&p, to).unwrap();
        }
        let mut got = 0u64;
        while e
            .recv_batch(Duration::ZERO, |r| {
                assert_eq!(r, Received::Packet(&p[..]));
                got += 1;
            })
            .unwrap()
            > 0
        {}
        let drops = e.kernel_drops();
        assert!(got > 0 && drops > 0, "got {got}, drops {drops}");
        assert_eq!(got + drops, 100);
    }

    #[test]
    fn port_in_use_and_unknown_interface_are_clear_errors() {
        let e = PacketRingEngine::open(&PacketRingConfig::new("127.0.0.1:0")).unwrap();
        let addr = e.local_addr().unwrap().to_string();
        let err = PacketRingEngine::open(&PacketRingConfig::new(addr.clone()))
            .err()
            .unwrap();
        assert!(err.to_string().contains("another capture"), "{err}");
        let mut cfg = PacketRingConfig::new("127.0.0.1:0");
        cfg.interface = Some("vs-no-such-if".into());
        let err = PacketRingEngine::open(&cfg).err().unwrap();
        assert!(err.to_string().contains("vs-no-such-if"), "{err}");
        cfg.block_size = 1000;
        assert!(matches!(
            PacketRingEngine::open(&cfg).err().unwrap(),
            Error::Config(_)
        ));
    }
}

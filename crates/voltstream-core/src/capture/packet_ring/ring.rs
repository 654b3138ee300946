//! The ring: set-up (guard, socket, mapping, filter, fan-out), the receive
//! loop over its blocks, and its counters.

use std::io;
use std::mem::size_of;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{fence, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::filter::{udp_filter, DstMatch};
use super::PacketRingConfig;
use crate::capture::batch::{pass, ready_within};
use crate::capture::cbpf::{attach_filter, bpf, BPF_K, BPF_RET};
use crate::capture::flow::{Flow, Frame};
use crate::capture::host::{guard, if_index, interface_owning, map_ring, resolve_ip, setsockopt};
use crate::capture::{multicast, Engine, Received, Sink};
use crate::{Error, Result};

// Linux constants not (or not everywhere) exported by the libc crate.
const TPACKET_V3: libc::c_int = 2;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const PACKET_VNET_HDR: libc::c_int = 15;
/// Asks the kernel to pick an unused fanout group id (linux/if_packet.h).
const PACKET_FANOUT_FLAG_UNIQUEID: u32 = 0x2000;
pub(super) const PACKET_OUTGOING: u8 = 4;
const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1;
const VNET_HDR_LEN: usize = 10;
const VIRTIO_NET_HDR_GSO_NONE: u8 = 0;
const VIRTIO_NET_HDR_GSO_UDP_L4: u8 = 5;
const VIRTIO_NET_HDR_GSO_ECN: u8 = 0x80;

/// Where the fields we read lie in a block descriptor (`tpacket_block_desc`
/// whose header is a `tpacket_hdr_v1`), taken from the kernel's structs.
mod block {
    use libc::{tpacket_block_desc, tpacket_hdr_v1};
    use std::mem::offset_of;

    const HDR: usize = offset_of!(tpacket_block_desc, hdr);
    pub const STATUS: usize = HDR + offset_of!(tpacket_hdr_v1, block_status);
    pub const NUM_PKTS: usize = HDR + offset_of!(tpacket_hdr_v1, num_pkts);
    pub const FIRST: usize = HDR + offset_of!(tpacket_hdr_v1, offset_to_first_pkt);
}

/// Where the fields we read lie in a frame: its `tpacket3_hdr`, then (at the
/// next 16-byte boundary, `TPACKET_ALIGN`) the `sockaddr_ll`.
mod frame {
    use libc::{sockaddr_ll, tpacket3_hdr};
    use std::mem::{offset_of, size_of};

    pub const NEXT: usize = offset_of!(tpacket3_hdr, tp_next_offset);
    pub const SNAPLEN: usize = offset_of!(tpacket3_hdr, tp_snaplen);
    pub const LEN: usize = offset_of!(tpacket3_hdr, tp_len);
    pub const MAC: usize = offset_of!(tpacket3_hdr, tp_mac);
    pub const PKTTYPE: usize =
        size_of::<tpacket3_hdr>().next_multiple_of(16) + offset_of!(sockaddr_ll, sll_pkttype);
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
        // Locked when RLIMIT_MEMLOCK allows; the ring's pages are kernel pages
        // and are never swapped anyway, so an unlocked map is as good.
        let ring = map_ring(s, ring_len, 0, true)
            .or_else(|_| map_ring(s, ring_len, 0, false))
            .map_err(|e| Error::io("cannot map the packet ring", e))?;
        let engine = PacketRingEngine {
            fd,
            _guard: guard,
            local,
            interface,
            ring,
            ring_len,
            block_size: config.block_size,
            blocks: config.blocks,
            next: 0,
            min_wait: Duration::from_millis(config.retire_ms as u64 + 2),
            flow: Flow::behind_filter(local.port()),
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

    /// Hands every datagram of one user-owned block to `sink`; returns how many.
    fn read_block<F: Sink>(&self, blk: &[u8], sink: &mut F) -> usize {
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
    fn deliver<F: Sink>(&self, l2: &[u8], wire_len: usize, vnet: &[u8], sink: &mut F) -> usize {
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
        let (guard, local) = guard(groups.as_ref().map_or(addr, |p| p.bind))?;
        let ip = local.ip();
        let interface = match &config.interface {
            Some(i) => i.clone(),
            None => interface_owning(
                ip,
                "the interface to capture on (e.g. interface='lo' or 'eth0')",
            )?,
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

    fn recv_batch<F: Sink>(&mut self, timeout: Duration, mut sink: F) -> Result<usize> {
        let b = self.next;
        // Waits last at least one retire period: see the module docs.
        let wait = timeout.max(self.min_wait);
        let ready = || self.status(b).load(Ordering::Acquire) & TP_STATUS_USER != 0;
        if !ready_within(self.fd.as_raw_fd(), wait, "packet ring", ready)? {
            return Ok(0);
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

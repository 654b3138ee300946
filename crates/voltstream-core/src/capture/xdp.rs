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

use super::flow::{pass, Flow, Frame};
use super::{Engine, Received};
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
        if self.max_packet == 0 || self.max_packet > 65_536 {
            return Err(Error::Config(format!(
                "max_packet must be 1..=65536, got {}",
                self.max_packet
            )));
        }
        if self.batch == 0 || self.batch > self.frames {
            return Err(Error::Config(format!(
                "AF_XDP batch must be 1..=frames ({}), got {}",
                self.frames, self.batch
            )));
        }
        Ok(())
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
fn deliver<F: FnMut(Received<'_>)>(
    l2: &[u8],
    flow: Flow,
    max_packet: usize,
    sink: &mut F,
) -> usize {
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
mod imp {
    use std::ffi::{c_char, c_int, c_void, CStr};
    use std::io;
    use std::mem::size_of;
    use std::net::{IpAddr, UdpSocket};
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;
    use crate::capture::bind_udp;
    use crate::capture::multicast::{self, MAX_GROUPS};
    use crate::capture::packet_ring::{
        attach_drop_all, if_index, interface_of_ip, page_size, resolve_ip, setsockopt,
    };
    use crate::memory::{Buffer, Placement};

    /// Whether this build has the AF_XDP engine.
    pub const AVAILABLE: bool = true;

    const AF_XDP: c_int = 44;
    /// Bytes the kernel keeps in front of each frame in a chunk.
    const XDP_PACKET_HEADROOM: usize = 256;
    const COMPLETION_RING: c_int = 64;

    /// The compiled program, 8-byte aligned for libelf.
    #[repr(C, align(8))]
    struct Aligned<T: ?Sized>(T);
    static OBJECT: &Aligned<[u8]> = &Aligned(*include_bytes!(concat!(
        env!("OUT_DIR"),
        "/voltstream_xdp.o"
    )));

    /// `struct vs_config` of the program (its read-only global data).
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct BpfConfig {
        addr: u32,
        port: u16,
        pad: u16,
        max_len: u32,
        ngroups: u32,
        groups: [u32; MAX_GROUPS],
        /// `VS_IPV4 | VS_IPV6`: the IP versions of our flow.
        families: u32,
        /// The IPv6 destination; all zero: any.
        addr6: [u8; 16],
    }

    const VS_IPV4: u32 = 1;
    const VS_IPV6: u32 = 2;

    const VS_MATCHED: u32 = 0;
    const VS_NO_SOCKET: u32 = 1;
    const VS_CUT: u32 = 2;

    /// Hand-written declarations of the libbpf 1.x functions we call (see
    /// /usr/include/bpf/libbpf.h and bpf.h). Pointer results are NULL on error
    /// with `errno` set; int results are negative error numbers.
    mod sys {
        use std::ffi::{c_char, c_int, c_void};

        #[repr(C)]
        pub struct BpfObject {
            _opaque: [u8; 0],
        }
        #[repr(C)]
        pub struct BpfMap {
            _opaque: [u8; 0],
        }
        #[repr(C)]
        pub struct BpfProgram {
            _opaque: [u8; 0],
        }

        /// The leading fields of `struct bpf_link_create_opts`; libbpf reads
        /// only the fields that `sz` covers, and checks the rest are zero.
        #[repr(C)]
        pub struct LinkCreateOpts {
            pub sz: usize,
            pub flags: u32,
            pub pad: u32,
        }

        /// `libbpf_print_fn_t`; the `va_list` is passed on as an opaque pointer.
        pub type PrintFn = unsafe extern "C" fn(c_int, *const c_char, *mut c_void) -> c_int;

        pub const BPF_XDP: u32 = 37;
        pub const BPF_F_XDP_HAS_FRAGS: u32 = 1 << 5;
        pub const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
        pub const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

        extern "C" {
            pub fn bpf_object__open_mem(
                buf: *const c_void,
                size: usize,
                opts: *const c_void,
            ) -> *mut BpfObject;
            pub fn bpf_object__load(obj: *mut BpfObject) -> c_int;
            pub fn bpf_object__close(obj: *mut BpfObject);
            pub fn bpf_object__find_map_by_name(
                obj: *const BpfObject,
                name: *const c_char,
            ) -> *mut BpfMap;
            pub fn bpf_object__find_program_by_name(
                obj: *const BpfObject,
                name: *const c_char,
            ) -> *mut BpfProgram;
            pub fn bpf_map__set_max_entries(map: *mut BpfMap, n: u32) -> c_int;
            pub fn bpf_map__value_size(map: *const BpfMap) -> u32;
            pub fn bpf_map__set_initial_value(
                map: *mut BpfMap,
                data: *const c_void,
                size: usize,
            ) -> c_int;
            pub fn bpf_map__fd(map: *const BpfMap) -> c_int;
            pub fn bpf_program__flags(prog: *const BpfProgram) -> u32;
            pub fn bpf_program__set_flags(prog: *mut BpfProgram, flags: u32) -> c_int;
            pub fn bpf_program__fd(prog: *const BpfProgram) -> c_int;
            pub fn bpf_map_update_elem(
                fd: c_int,
                key: *const c_void,
                value: *const c_void,
                flags: u64,
            ) -> c_int;
            pub fn bpf_map_lookup_elem(fd: c_int, key: *const c_void, value: *mut c_void) -> c_int;
            pub fn bpf_link_create(
                prog_fd: c_int,
                target_fd: c_int,
                attach_type: u32,
                opts: *const LinkCreateOpts,
            ) -> c_int;
            pub fn libbpf_num_possible_cpus() -> c_int;
            pub fn libbpf_set_print(f: Option<PrintFn>) -> Option<PrintFn>;
        }

        extern "C" {
            /// C's vsnprintf; `ap` is the caller's `va_list`, passed on unchanged.
            pub fn vsnprintf(
                buf: *mut c_char,
                n: usize,
                fmt: *const c_char,
                ap: *mut c_void,
            ) -> c_int;
        }
    }

    std::thread_local! {
        /// libbpf's messages during an `open` on this thread, for its errors.
        static LIBBPF_LOG: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
    }

    /// Collects libbpf's warnings into `LIBBPF_LOG` instead of printing them
    /// (the native-to-generic fallback would otherwise print a kernel error).
    unsafe extern "C" fn libbpf_print(level: c_int, fmt: *const c_char, ap: *mut c_void) -> c_int {
        if level > 1 {
            return 0; // LIBBPF_DEBUG
        }
        let mut buf = [0 as c_char; 512];
        // SAFETY: `fmt` and `ap` come from libbpf's own call; vsnprintf writes at
        // most `buf.len()` bytes, NUL included. On Linux's 64-bit ABIs (build.rs
        // accepts no other) a `va_list` parameter is passed as one pointer.
        let n = unsafe { sys::vsnprintf(buf.as_mut_ptr(), buf.len(), fmt, ap) };
        if n > 0 {
            // SAFETY: vsnprintf NUL-terminated `buf`.
            let msg = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy();
            LIBBPF_LOG.with(|log| {
                let mut log = log.borrow_mut();
                log.push_str(msg.trim_start_matches("libbpf: "));
                if log.len() > 4096 {
                    let cut = log.len() - 2048;
                    let cut = (cut..log.len())
                        .find(|&i| log.is_char_boundary(i))
                        .unwrap_or(0);
                    log.replace_range(..cut, "...");
                }
            });
        }
        0
    }

    /// Starts collecting libbpf's messages on this thread (clears the log).
    fn libbpf_log_start() {
        static HOOK: std::sync::Once = std::sync::Once::new();
        // SAFETY: installs a print function with libbpf's signature; it is the
        // only call that changes libbpf's global hook, and `Once` runs it once.
        HOOK.call_once(|| unsafe {
            sys::libbpf_set_print(Some(libbpf_print));
        });
        LIBBPF_LOG.with(|l| l.borrow_mut().clear());
    }

    /// libbpf's last messages on this thread, as " (libbpf: ...)" or "".
    fn libbpf_log() -> String {
        LIBBPF_LOG.with(|l| {
            let l = l.borrow();
            let t = l.trim();
            if t.is_empty() {
                String::new()
            } else {
                format!(" (libbpf: {})", t.replace('\n', "; "))
            }
        })
    }

    fn cstr(b: &'static [u8]) -> &'static CStr {
        CStr::from_bytes_with_nul(b).expect("NUL-terminated literal")
    }

    fn neg_errno(r: c_int) -> io::Error {
        io::Error::from_raw_os_error(r.checked_neg().unwrap_or(libc::EINVAL))
    }

    /// The UMEM: a [`Buffer`] on huge pages when the kernel has them reserved,
    /// on the interface's NUMA node, pre-faulted and locked before the socket exists.
    struct Umem {
        /// Owns the mapping; `ptr` points into it and stays valid while it lives.
        _buf: Buffer,
        ptr: *mut u8,
        len: usize,
        huge: bool,
    }

    impl Umem {
        fn new(len: usize, try_huge: bool, numa_node: Option<u32>) -> Result<Umem> {
            let placement = Placement {
                huge_pages: try_huge,
                numa_node,
            };
            let mut buf = Buffer::placed(len, &placement).map_err(|e| match e {
                Error::Io { source, .. } => Error::io(
                    format!("cannot allocate the {} MiB AF_XDP UMEM", len >> 20),
                    source,
                ),
                e => e,
            })?;
            for w in buf.warnings() {
                eprintln!("voltstream: warning: AF_XDP UMEM: {w}");
            }
            Ok(Umem {
                ptr: buf.as_mut_ptr(),
                len,
                huge: buf.huge_pages(),
                _buf: buf,
            })
        }

        /// The bytes of one descriptor; `None` if it points outside the UMEM.
        fn get(&self, addr: u64, len: u32) -> Option<&[u8]> {
            let start = usize::try_from(addr).ok()?;
            let end = start.checked_add(len as usize)?;
            if end > self.len {
                return None;
            }
            // SAFETY: [start, end) lies inside the mapping, which lives as long as
            // `self`. The kernel wrote this chunk before publishing its descriptor
            // (we loaded the producer index with Acquire) and does not touch it
            // again until we hand it back through the fill ring, after the slice
            // is gone.
            Some(unsafe { std::slice::from_raw_parts(self.ptr.add(start), end - start) })
        }
    }

    /// One mapped ring of the socket: RX (descriptors) or fill (addresses).
    /// Single producer, single consumer; `local` is our own index.
    struct Ring {
        map: *mut u8,
        map_len: usize,
        producer: *mut u32,
        consumer: *mut u32,
        desc: *mut u8,
        mask: u32,
        size: u32,
        local: u32,
    }

    impl Ring {
        fn map(
            fd: RawFd,
            off: &libc::xdp_ring_offset,
            size: u32,
            elem: usize,
            pgoff: u64,
        ) -> io::Result<Ring> {
            let map_len = off.desc as usize + size as usize * elem;
            // SAFETY: maps the ring the kernel allocated for this socket at the
            // documented page offset; the result is checked. build.rs enables
            // this code on 64-bit targets only, where off_t holds the offset.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    map_len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED | libc::MAP_POPULATE,
                    fd,
                    pgoff as libc::off_t,
                )
            };
            if p == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            let map: *mut u8 = p.cast();
            // SAFETY: the kernel's offsets lie inside the mapping.
            let (producer, consumer, desc) = unsafe {
                (
                    map.add(off.producer as usize).cast(),
                    map.add(off.consumer as usize).cast(),
                    map.add(off.desc as usize),
                )
            };
            Ok(Ring {
                map,
                map_len,
                producer,
                consumer,
                desc,
                mask: size - 1,
                size,
                local: 0,
            })
        }

        fn producer(&self) -> &AtomicU32 {
            // SAFETY: a 4-byte aligned u32 inside the mapping, shared with the
            // kernel, which accesses it concurrently: hence the atomic view.
            unsafe { AtomicU32::from_ptr(self.producer) }
        }

        fn consumer(&self) -> &AtomicU32 {
            // SAFETY: as for `producer`.
            unsafe { AtomicU32::from_ptr(self.consumer) }
        }

        /// RX: descriptors the kernel published that we have not released.
        fn available(&self) -> u32 {
            self.producer()
                .load(Ordering::Acquire)
                .wrapping_sub(self.local)
        }

        /// RX: the `i`-th unreleased descriptor (i < `available()`).
        fn desc(&self, i: u32) -> libc::xdp_desc {
            let slot = (self.local.wrapping_add(i) & self.mask) as usize;
            // SAFETY: slot <= mask, inside the descriptor array; the kernel
            // published it (Acquire load in `available`) and does not rewrite it
            // until we release it.
            unsafe {
                std::ptr::read(
                    self.desc
                        .add(slot * size_of::<libc::xdp_desc>())
                        .cast::<libc::xdp_desc>(),
                )
            }
        }

        /// RX: hands `n` descriptors back to the kernel.
        fn release(&mut self, n: u32) {
            self.local = self.local.wrapping_add(n);
            self.consumer().store(self.local, Ordering::Release);
        }

        /// Fill: free slots.
        fn free(&self) -> u32 {
            self.size
                - self
                    .local
                    .wrapping_sub(self.consumer().load(Ordering::Acquire))
        }

        /// Fill: writes one chunk address (published by `submit`).
        fn put(&mut self, addr: u64) {
            let slot = (self.local & self.mask) as usize;
            // SAFETY: slot <= mask, inside the address array; the caller checked
            // `free()`, so the kernel is not reading this slot.
            unsafe { std::ptr::write(self.desc.add(slot * 8).cast::<u64>(), addr) };
            self.local = self.local.wrapping_add(1);
        }

        /// Fill: publishes the addresses `put` since the last submit.
        fn submit(&self) {
            self.producer().store(self.local, Ordering::Release);
        }
    }

    impl Drop for Ring {
        fn drop(&mut self) {
            // SAFETY: unmaps exactly this ring's mapping.
            unsafe { libc::munmap(self.map.cast(), self.map_len) };
        }
    }

    /// The AF_XDP socket and its two rings.
    struct Xsk {
        rx: Ring,
        fill: Ring,
        fd: OwnedFd,
        zero_copy: bool,
        multi_buffer: bool,
    }

    fn getsockopt<T>(fd: RawFd, opt: c_int, v: &mut T) -> io::Result<usize> {
        let mut len = size_of::<T>() as libc::socklen_t;
        // SAFETY: `v` is writable for `len` bytes; the kernel writes at most that.
        let r = unsafe { libc::getsockopt(fd, libc::SOL_XDP, opt, (v as *mut T).cast(), &mut len) };
        if r == 0 {
            Ok(len as usize)
        } else {
            Err(io::Error::last_os_error())
        }
    }

    impl Xsk {
        /// A socket on (`ifindex`, `queue`) using `umem`, bound with `flags`,
        /// every chunk already in its fill ring.
        fn open(
            umem: &Umem,
            frame_size: usize,
            frames: u32,
            ifindex: u32,
            queue: u32,
            flags: u16,
        ) -> io::Result<Xsk> {
            // SAFETY: plain socket(2) call; the result is checked.
            let raw = unsafe { libc::socket(AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
            if raw < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: `raw` is a fresh descriptor that nothing else owns.
            let fd = unsafe { OwnedFd::from_raw_fd(raw) };
            let s = fd.as_raw_fd();
            let reg = libc::xdp_umem_reg {
                addr: umem.ptr as u64,
                len: umem.len as u64,
                chunk_size: frame_size as u32,
                headroom: 0,
                flags: 0,
                tx_metadata_len: 0,
            };
            setsockopt(s, libc::SOL_XDP, libc::XDP_UMEM_REG, &reg)?;
            let n = frames as c_int;
            setsockopt(s, libc::SOL_XDP, libc::XDP_UMEM_FILL_RING, &n)?;
            setsockopt(
                s,
                libc::SOL_XDP,
                libc::XDP_UMEM_COMPLETION_RING,
                &COMPLETION_RING,
            )?;
            setsockopt(s, libc::SOL_XDP, libc::XDP_RX_RING, &n)?;
            // SAFETY: xdp_mmap_offsets is plain integers; all-zero is valid.
            let mut off: libc::xdp_mmap_offsets = unsafe { std::mem::zeroed() };
            getsockopt(s, libc::XDP_MMAP_OFFSETS, &mut off)?;
            let rx = Ring::map(
                s,
                &off.rx,
                frames,
                size_of::<libc::xdp_desc>(),
                libc::XDP_PGOFF_RX_RING as u64,
            )?;
            let mut fill = Ring::map(s, &off.fr, frames, 8, libc::XDP_UMEM_PGOFF_FILL_RING)?;
            // Every chunk goes to the kernel before the socket is bound, so a
            // zero-copy driver finds buffers at once.
            for i in 0..frames as u64 {
                fill.put(i * frame_size as u64);
            }
            fill.submit();
            let sxdp = libc::sockaddr_xdp {
                sxdp_family: AF_XDP as u16,
                sxdp_flags: flags,
                sxdp_ifindex: ifindex,
                sxdp_queue_id: queue,
                sxdp_shared_umem_fd: 0,
            };
            // SAFETY: passes a live sockaddr_xdp and its exact size.
            let r = unsafe {
                libc::bind(
                    s,
                    (&sxdp as *const libc::sockaddr_xdp).cast(),
                    size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
                )
            };
            if r != 0 {
                return Err(io::Error::last_os_error());
            }
            let mut opts = libc::xdp_options { flags: 0 };
            let zero_copy = getsockopt(s, libc::XDP_OPTIONS, &mut opts).is_ok()
                && opts.flags & libc::XDP_OPTIONS_ZEROCOPY != 0;
            Ok(Xsk {
                rx,
                fill,
                fd,
                zero_copy,
                multi_buffer: flags & libc::XDP_USE_SG != 0,
            })
        }

        /// The kernel's counters (cumulative).
        fn statistics(&self) -> Option<libc::xdp_statistics> {
            // SAFETY: plain integers; all-zero is valid.
            let mut st: libc::xdp_statistics = unsafe { std::mem::zeroed() };
            let len = getsockopt(self.fd.as_raw_fd(), libc::XDP_STATISTICS, &mut st).ok()?;
            if len < size_of::<libc::xdp_statistics>() {
                // A kernel before 5.9: rx_dropped already includes ring-full.
                st.rx_ring_full = 0;
                st.rx_fill_ring_empty_descs = 0;
            }
            Some(st)
        }
    }

    /// Our XDP program, loaded, with its link (attachment) once attached.
    /// Dropping it closes the link first, which detaches the program.
    struct Program {
        link: Option<OwnedFd>,
        obj: *mut sys::BpfObject,
        prog_fd: c_int,
        xsks_fd: c_int,
        counters_fd: c_int,
        ncpus: usize,
    }

    impl Program {
        fn load(config: BpfConfig, queue: u32, frags: bool) -> Result<Program> {
            let fail =
                |what: &str, e: io::Error| Error::io(format!("cannot {what}{}", libbpf_log()), e);
            libbpf_log_start();
            // SAFETY: OBJECT is a 'static, 8-byte aligned ELF image; libbpf
            // reads it and keeps no pointer into it past bpf_object__load.
            let obj = unsafe {
                sys::bpf_object__open_mem(
                    OBJECT.0.as_ptr().cast(),
                    OBJECT.0.len(),
                    std::ptr::null(),
                )
            };
            if obj.is_null() {
                return Err(fail(
                    "open the embedded XDP program",
                    io::Error::last_os_error(),
                ));
            }
            let mut p = Program {
                link: None,
                obj,
                prog_fd: -1,
                xsks_fd: -1,
                counters_fd: -1,
                ncpus: 1,
            };
            let find_map = |name: &CStr| {
                // SAFETY: `obj` is a live object and `name` a C string.
                let m = unsafe { sys::bpf_object__find_map_by_name(obj, name.as_ptr()) };
                if m.is_null() {
                    Err(Error::Config(format!(
                        "the embedded XDP program has no map {name:?} (build mismatch)"
                    )))
                } else {
                    Ok(m)
                }
            };
            let rodata = find_map(cstr(b".rodata\0"))?;
            let xsks = find_map(cstr(b"vs_xsks\0"))?;
            let counters = find_map(cstr(b"vs_counters\0"))?;
            // SAFETY: `rodata` is a map of the live object.
            let vsize = unsafe { sys::bpf_map__value_size(rodata) } as usize;
            if vsize != size_of::<BpfConfig>() {
                return Err(Error::Config(format!(
                    "the embedded XDP program's configuration has {vsize} bytes, expected {} \
                     (build mismatch)",
                    size_of::<BpfConfig>()
                )));
            }
            // SAFETY: `config` is a live BpfConfig of exactly the map's value
            // size; libbpf copies it.
            let r = unsafe {
                sys::bpf_map__set_initial_value(
                    rodata,
                    (&config as *const BpfConfig).cast(),
                    size_of::<BpfConfig>(),
                )
            };
            if r != 0 {
                return Err(fail("configure the XDP program", neg_errno(r)));
            }
            // SAFETY: `xsks` is a map of the live, not yet loaded object.
            let r = unsafe { sys::bpf_map__set_max_entries(xsks, queue + 1) };
            if r != 0 {
                return Err(fail("size the XDP socket map", neg_errno(r)));
            }
            // SAFETY: `obj` is live; the name is a C string.
            let prog = unsafe {
                sys::bpf_object__find_program_by_name(obj, cstr(b"voltstream_xdp\0").as_ptr())
            };
            if prog.is_null() {
                return Err(Error::Config(
                    "the embedded XDP program has no function voltstream_xdp (build mismatch)"
                        .into(),
                ));
            }
            if frags {
                // SAFETY: `prog` belongs to the live, not yet loaded object.
                let r = unsafe {
                    sys::bpf_program__set_flags(
                        prog,
                        sys::bpf_program__flags(prog) | sys::BPF_F_XDP_HAS_FRAGS,
                    )
                };
                if r != 0 {
                    return Err(fail("mark the XDP program multi-buffer", neg_errno(r)));
                }
            }
            // SAFETY: loads the live object into the kernel.
            let r = unsafe { sys::bpf_object__load(obj) };
            if r != 0 {
                let e = neg_errno(r);
                let hint = if e.kind() == io::ErrorKind::PermissionDenied {
                    " (loading BPF programs needs root, or CAP_BPF and CAP_NET_ADMIN)"
                } else {
                    ""
                };
                return Err(fail(&format!("load the XDP program{hint}"), e));
            }
            // SAFETY: `prog`, `xsks` and `counters` belong to the loaded object.
            unsafe {
                p.prog_fd = sys::bpf_program__fd(prog);
                p.xsks_fd = sys::bpf_map__fd(xsks);
                p.counters_fd = sys::bpf_map__fd(counters);
                p.ncpus = usize::try_from(sys::libbpf_num_possible_cpus())
                    .unwrap_or(1)
                    .max(1);
            }
            Ok(p)
        }

        /// Points the queue's XSKMAP slot at the socket.
        fn add_socket(&self, queue: u32, fd: RawFd) -> Result<()> {
            let v = fd as u32;
            // SAFETY: key and value are live u32s, the map's key and value size.
            let r = unsafe {
                sys::bpf_map_update_elem(
                    self.xsks_fd,
                    (&queue as *const u32).cast(),
                    (&v as *const u32).cast(),
                    0,
                )
            };
            if r != 0 {
                return Err(Error::io(
                    format!(
                        "cannot put the AF_XDP socket into the XDP map{}",
                        libbpf_log()
                    ),
                    neg_errno(r),
                ));
            }
            Ok(())
        }

        /// Attaches in one mode through a BPF link.
        fn attach(&mut self, ifindex: u32, native: bool) -> io::Result<()> {
            let opts = sys::LinkCreateOpts {
                sz: size_of::<sys::LinkCreateOpts>(),
                flags: if native {
                    sys::XDP_FLAGS_DRV_MODE
                } else {
                    sys::XDP_FLAGS_SKB_MODE
                },
                pad: 0,
            };
            // SAFETY: a loaded program's fd, an interface index, and options
            // whose `sz` covers exactly the fields we pass.
            let r = unsafe {
                sys::bpf_link_create(self.prog_fd, ifindex as c_int, sys::BPF_XDP, &opts)
            };
            if r < 0 {
                return Err(neg_errno(r));
            }
            // SAFETY: a fresh link descriptor that nothing else owns.
            self.link = Some(unsafe { OwnedFd::from_raw_fd(r) });
            Ok(())
        }

        /// The program's per-CPU counter `which`, summed.
        fn counter(&self, which: u32) -> u64 {
            let mut v = vec![0u64; self.ncpus];
            // SAFETY: a per-CPU array lookup writes one 8-byte value per possible
            // CPU; `v` has exactly that many.
            let r = unsafe {
                sys::bpf_map_lookup_elem(
                    self.counters_fd,
                    (&which as *const u32).cast(),
                    v.as_mut_ptr().cast(),
                )
            };
            if r == 0 {
                v.iter().sum()
            } else {
                0
            }
        }
    }

    impl Drop for Program {
        fn drop(&mut self) {
            drop(self.link.take()); // detaches the program
                                    // SAFETY: closes the object opened in `load`, once; its map and
                                    // program descriptors are not used after this.
            unsafe { sys::bpf_object__close(self.obj) };
        }
    }

    /// The AF_XDP engine. Fields drop in order: the program is detached, then
    /// the socket closed, then the UMEM unmapped.
    pub struct XdpEngine {
        program: Program,
        xsk: Xsk,
        umem: Umem,
        _guard: UdpSocket,
        local: SocketAddr,
        info: Arc<XdpInfo>,
        flow: Flow,
        max_packet: usize,
        batch: u32,
        chunk_mask: u64,
        joined: Reassembly,
    }

    // SAFETY: the raw pointers are mappings and a libbpf object owned by this
    // struct and freed in Drop; the kernel shares the rings only through the
    // producer/consumer words, accessed atomically. Nothing is shared with
    // another user thread.
    unsafe impl Send for XdpEngine {}

    impl XdpEngine {
        /// Loads and attaches the XDP program, and binds the socket. Needs root
        /// (CAP_NET_RAW for the socket, CAP_BPF and CAP_NET_ADMIN for the program).
        pub fn open(config: &XdpConfig) -> Result<Self> {
            config.validate()?;
            let addr = resolve_ip(&config.bind)?;
            let plan = multicast::plan(addr, &config.multicast)?;
            if plan.as_ref().is_some_and(|p| p.bind.is_ipv6()) {
                return Err(Error::Config(
                    "the AF_XDP program holds IPv4 multicast groups only; capture IPv6 groups \
                     with the socket engine"
                        .into(),
                ));
            }
            if plan.is_some() && config.interface.is_none() {
                return Err(Error::Config(
                    "a multicast capture with AF_XDP needs the interface to capture on \
                     (e.g. interface='eth0')"
                        .into(),
                ));
            }
            let groups_v4 = plan.as_ref().map_or_else(Vec::new, |p| p.groups_v4());
            let groups = &groups_v4[..];
            let guard = bind_udp(plan.as_ref().map_or(addr, |p| p.bind))?;
            attach_drop_all(guard.as_raw_fd()).map_err(|e| {
                Error::io("cannot attach the drop-all filter to the guard socket", e)
            })?;
            let local = guard
                .local_addr()
                .map_err(|e| Error::io("cannot read the guard socket address", e))?;
            let ip = local.ip();
            let interface = match &config.interface {
                Some(i) => i.clone(),
                None => interface_of_ip(ip)?.ok_or_else(|| {
                    Error::Config(format!(
                        "no interface has the address {ip}; pass the interface to capture on \
                         (e.g. interface='eth0')"
                    ))
                })?,
            };
            let ifindex = if_index(&interface)? as u32;
            // The guard's membership sends the IGMP report; the program picks
            // the joined groups out below the IP layer.
            if let Some(p) = &plan {
                multicast::join(&guard, &p.groups, Some(&interface))?;
            }
            if config.frame_size > page_size() {
                return Err(Error::Config(format!(
                    "AF_XDP frame size {} exceeds the page size {}",
                    config.frame_size,
                    page_size()
                )));
            }
            let node = Placement::near(Some(&interface)).numa_node;
            let umem = Umem::new(config.frames * config.frame_size, config.huge_pages, node)?;
            let mut zc = config.zero_copy && config.mode != XdpMode::Skb;
            loop {
                let at = (ip, local.port(), groups);
                match Self::open_on(config, &interface, ifindex, &umem, at, zc) {
                    Ok((program, xsk, mode)) => {
                        let info = Arc::new(XdpInfo {
                            interface,
                            queue: config.queue,
                            mode,
                            zero_copy: xsk.zero_copy,
                            multi_buffer: xsk.multi_buffer,
                            huge_pages: umem.huge,
                            frame_size: config.frame_size,
                            frames: config.frames,
                            counts: Mutex::new(XdpCounts::default()),
                        });
                        return Ok(XdpEngine {
                            program,
                            xsk,
                            umem,
                            _guard: guard,
                            local,
                            info,
                            flow: Flow::new(local),
                            max_packet: config.max_packet,
                            batch: config.batch as u32,
                            chunk_mask: !(config.frame_size as u64 - 1),
                            joined: Reassembly::new(config.max_packet + 128),
                        });
                    }
                    // A zero-copy socket whose program attaches nowhere: start
                    // again in copy mode (generic mode cannot feed zero-copy).
                    Err((_, true)) if zc => zc = false,
                    Err((e, _)) => return Err(e),
                }
            }
        }

        /// Binds a socket (trying zero-copy when `zc`, and multi-buffer), loads
        /// the program for it and attaches it. The error's flag says whether the
        /// socket that was bound is zero-copy.
        #[allow(clippy::type_complexity)]
        fn open_on(
            config: &XdpConfig,
            interface: &str,
            ifindex: u32,
            umem: &Umem,
            (ip, port, groups): (IpAddr, u16, &[std::net::Ipv4Addr]),
            zc: bool,
        ) -> std::result::Result<(Program, Xsk, &'static str), (Error, bool)> {
            let mut plans = Vec::new();
            for z in [true, false] {
                for sg in [true, false] {
                    if (z && !zc) || (sg && !config.multi_buffer) {
                        continue;
                    }
                    let mut f = if z {
                        libc::XDP_ZEROCOPY
                    } else {
                        libc::XDP_COPY
                    };
                    if sg {
                        f |= libc::XDP_USE_SG;
                    }
                    plans.push(f);
                }
            }
            let mut last = None;
            let mut xsk = None;
            // The kernel frees the queue of a closed socket asynchronously (a
            // work item), so "busy" right after another capture on the same
            // queue stopped is retried for up to a second.
            let patience = std::time::Instant::now() + Duration::from_secs(1);
            for flags in plans {
                let r = loop {
                    let r = Xsk::open(
                        umem,
                        config.frame_size,
                        config.frames as u32,
                        ifindex,
                        config.queue,
                        flags,
                    );
                    match r {
                        Err(e)
                            if e.raw_os_error() == Some(libc::EBUSY)
                                && std::time::Instant::now() < patience =>
                        {
                            std::thread::sleep(Duration::from_millis(10))
                        }
                        r => break r,
                    }
                };
                match r {
                    Ok(x) => {
                        xsk = Some(x);
                        break;
                    }
                    Err(e) => last = Some(e),
                }
            }
            let Some(xsk) = xsk else {
                let e = last.unwrap_or_else(|| io::Error::from_raw_os_error(libc::EINVAL));
                return Err((Self::socket_error(interface, config.queue, e), false));
            };
            let is_zc = xsk.zero_copy;
            // A socket bound to [::] holds the port for both families.
            let (addr, families, addr6) = match ip {
                IpAddr::V4(a) => (u32::from(a).to_be(), VS_IPV4, [0; 16]),
                IpAddr::V6(a) if a.is_unspecified() => (0, VS_IPV4 | VS_IPV6, [0; 16]),
                IpAddr::V6(a) => (0, VS_IPV6, a.octets()),
            };
            let cfg = BpfConfig {
                addr,
                port: port.to_be(),
                pad: 0,
                max_len: if xsk.multi_buffer {
                    0
                } else {
                    (config.frame_size - XDP_PACKET_HEADROOM) as u32
                },
                ngroups: groups.len() as u32,
                groups: std::array::from_fn(|i| groups.get(i).map_or(0, |g| u32::from(*g).to_be())),
                families,
                addr6,
            };
            let mut program =
                Program::load(cfg, config.queue, xsk.multi_buffer).map_err(|e| (e, is_zc))?;
            program
                .add_socket(config.queue, xsk.fd.as_raw_fd())
                .map_err(|e| (e, is_zc))?;
            let modes: &[bool] = match (config.mode, is_zc) {
                (XdpMode::Native, _) | (_, true) => &[true],
                (XdpMode::Skb, _) => &[false],
                (XdpMode::Auto, false) => &[true, false],
            };
            let mut why = Vec::new();
            for &native in modes {
                libbpf_log_start();
                match program.attach(ifindex, native) {
                    Ok(()) => return Ok((program, xsk, if native { "native" } else { "skb" })),
                    Err(e) => why.push((native, e)),
                }
            }
            let busy = why.iter().any(|(_, e)| {
                e.raw_os_error() == Some(libc::EBUSY) || e.raw_os_error() == Some(libc::EEXIST)
            });
            let detail: Vec<String> = why
                .iter()
                .map(|(n, e)| format!("{} mode: {e}", if *n { "native" } else { "skb" }))
                .collect();
            let hint = if busy {
                format!(
                    "; another XDP program is attached to {interface} (another capture? see \
                     `ip link show {interface}`)"
                )
            } else {
                String::new()
            };
            let e = why
                .pop()
                .map(|(_, e)| e)
                .unwrap_or_else(|| io::Error::from_raw_os_error(libc::EINVAL));
            Err((
                Error::io(
                    format!(
                        "cannot attach the XDP program to {interface} ({}){hint}{}",
                        detail.join("; "),
                        libbpf_log()
                    ),
                    e,
                ),
                is_zc,
            ))
        }

        fn socket_error(interface: &str, queue: u32, e: io::Error) -> Error {
            let queues = std::fs::read_dir(format!("/sys/class/net/{interface}/queues"))
                .map(|d| {
                    d.filter_map(|e| e.ok())
                        .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
                        .count()
                })
                .unwrap_or(0);
            let hint = match e.raw_os_error() {
                Some(libc::EPERM) | Some(libc::EACCES) => {
                    " (AF_XDP needs root or CAP_NET_RAW; use engine='socket' otherwise)".to_string()
                }
                Some(libc::EAFNOSUPPORT) => {
                    " (the kernel has no AF_XDP: CONFIG_XDP_SOCKETS)".to_string()
                }
                Some(libc::EBUSY) => {
                    format!(" (another AF_XDP socket already reads queue {queue} of {interface})")
                }
                Some(libc::EINVAL) if queues > 0 && queue as usize >= queues => format!(
                    " ({interface} has {queues} receive queue(s): use a queue below {queues})"
                ),
                _ => String::new(),
            };
            Error::io(
                format!("cannot bind an AF_XDP socket to {interface} queue {queue}{hint}"),
                e,
            )
        }

        /// What this capture runs with, and its counters; shared.
        pub fn info(&self) -> Arc<XdpInfo> {
            self.info.clone()
        }

        fn wait(&self, timeout: Duration) -> io::Result<()> {
            let mut pfd = libc::pollfd {
                fd: self.xsk.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let ts = libc::timespec {
                tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
                tv_nsec: timeout.subsec_nanos() as libc::c_long,
            };
            // SAFETY: one valid pollfd, count 1, a valid timespec, no signal mask.
            let r = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
            if r < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(())
            }
        }
    }

    impl Engine for XdpEngine {
        fn name(&self) -> &'static str {
            "xdp"
        }

        fn recv_batch<F: FnMut(Received<'_>)>(
            &mut self,
            timeout: Duration,
            mut sink: F,
        ) -> Result<usize> {
            let mut avail = self.xsk.rx.available();
            if avail == 0 {
                match self.wait(timeout) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(0),
                    Err(e) => return Err(Error::io("poll on the AF_XDP socket failed", e)),
                }
                avail = self.xsk.rx.available();
                if avail == 0 {
                    return Ok(0);
                }
            }
            let n = avail.min(self.batch);
            let mut passed = 0;
            for i in 0..n {
                let d = self.xsk.rx.desc(i);
                let piece = self.umem.get(d.addr, d.len);
                let more = d.options & libc::XDP_PKT_CONTD != 0;
                if !more && !self.joined.active {
                    passed += match piece {
                        Some(l2) => deliver(l2, self.flow, self.max_packet, &mut sink),
                        None => {
                            sink(Received::Truncated);
                            1
                        }
                    };
                    continue;
                }
                match self.joined.push(piece, more) {
                    Joined::More => {}
                    Joined::Frame(l2) => {
                        passed += deliver(l2, self.flow, self.max_packet, &mut sink)
                    }
                    Joined::TooLong => {
                        sink(Received::Truncated);
                        passed += 1;
                    }
                }
            }
            // Every chunk read goes straight back to the kernel: the fill ring
            // has a slot for every chunk, so it always has room for these.
            debug_assert!(self.xsk.fill.free() >= n);
            for i in 0..n {
                let addr = self.xsk.rx.desc(i).addr & self.chunk_mask;
                self.xsk.fill.put(addr);
            }
            self.xsk.rx.release(n);
            self.xsk.fill.submit();
            Ok(passed)
        }

        fn kernel_drops(&mut self) -> u64 {
            let mut c = self.info.counts.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(st) = self.xsk.statistics() {
                c.rx_dropped = st.rx_dropped;
                c.rx_ring_full = st.rx_ring_full;
                c.rx_fill_ring_empty_descs = st.rx_fill_ring_empty_descs;
                c.rx_invalid_descs = st.rx_invalid_descs;
            }
            c.no_socket = self.program.counter(VS_NO_SOCKET);
            c.matched = self.program.counter(VS_MATCHED);
            c.cut = self.program.counter(VS_CUT);
            let fill_empty = if self.xsk.zero_copy {
                c.rx_fill_ring_empty_descs
            } else {
                0 // counted in rx_dropped too
            };
            c.rx_dropped + c.rx_ring_full + c.rx_invalid_descs + c.no_socket + fill_empty
        }

        fn rcvbuf(&self) -> u64 {
            self.umem.len as u64
        }

        fn local_addr(&self) -> Option<SocketAddr> {
            Some(self.local)
        }

        fn interface(&self) -> Option<&str> {
            Some(&self.info.interface)
        }
    }
}

pub use imp::{XdpEngine, AVAILABLE};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reassembly_joins_pieces_and_flags_overflow() {
        let mut r = Reassembly::new(10);
        assert_eq!(r.push(Some(b"abcd"), false), Joined::Frame(b"abcd"));
        assert_eq!(r.push(Some(b"abc"), true), Joined::More);
        assert_eq!(r.push(Some(b"def"), true), Joined::More);
        assert_eq!(r.push(Some(b"gh"), false), Joined::Frame(b"abcdefgh"));
        // Longer than the buffer: reported once, at the last piece.
        assert_eq!(r.push(Some(b"abcdef"), true), Joined::More);
        assert_eq!(r.push(Some(b"ghijkl"), true), Joined::More);
        assert_eq!(r.push(Some(b"m"), false), Joined::TooLong);
        // An unreadable piece spoils its frame only.
        assert_eq!(r.push(None, true), Joined::More);
        assert_eq!(r.push(Some(b"x"), false), Joined::TooLong);
        assert_eq!(r.push(Some(b"ok"), false), Joined::Frame(b"ok"));
        assert_eq!(r.buf.capacity(), 10, "no reallocation");
    }

    /// An Ethernet + IPv4 + UDP frame to `port` carrying `payload`.
    fn frame(port: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 0, 0, 0, 0, 0, 64, 17, 0, 0]);
        f[16..18].copy_from_slice(&((28 + payload.len()) as u16).to_be_bytes());
        f.extend_from_slice(&[10, 0, 0, 2, 10, 0, 0, 1]);
        f.extend_from_slice(&1234u16.to_be_bytes());
        f.extend_from_slice(&port.to_be_bytes());
        f.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn deliver_passes_whole_payloads_and_flags_cut_or_long_ones() {
        let run = |l2: &[u8]| {
            let mut got = Vec::new();
            let n = deliver(l2, Flow::port(7000), 100, &mut |r: Received<'_>| {
                got.push(match r {
                    Received::Packet(p) => Some(p.to_vec()),
                    Received::Truncated => None,
                })
            });
            assert_eq!(n, got.len());
            got
        };
        let p: Vec<u8> = (0..100u8).collect();
        let f = frame(7000, &p);
        assert_eq!(run(&f), vec![Some(p.clone())]);
        // Cut by the XDP program (no multi-buffer): the IP length says more.
        assert_eq!(run(&f[..f.len() - 1]), vec![None]);
        // Longer than max_packet.
        assert_eq!(run(&frame(7000, &[1; 101])), vec![None]);
        // Not ours (the program passes these to the kernel; never counted here).
        assert!(run(&frame(7001, &p)).is_empty());
        let mut arp = f.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert!(run(&arp).is_empty());
    }

    #[test]
    fn config_is_checked_and_modes_parse() {
        let mut c = XdpConfig::new("127.0.0.1:0");
        assert!(c.validate().is_ok());
        c.frame_size = 3000;
        assert!(matches!(
            XdpEngine::open(&c).err().unwrap(),
            Error::Config(_)
        ));
        c.frame_size = 2048;
        c.frames = 100;
        assert!(XdpEngine::open(&c)
            .err()
            .unwrap()
            .to_string()
            .contains("power of two"));
        assert_eq!(XdpConfig::frames_for(64 << 20, 4096), 16384);
        assert_eq!(XdpConfig::frames_for(1000, 4096), 64);
        assert_eq!(XdpConfig::frames_for(5 << 20, 4096), 2048);
        for m in ["auto", "native", "skb"] {
            assert_eq!(XdpMode::parse(m).unwrap().name(), m);
        }
        assert_eq!(XdpMode::parse("generic").unwrap(), XdpMode::Skb);
        assert!(XdpMode::parse("zc").is_err());
    }

    #[cfg(not(voltstream_xdp))]
    #[test]
    fn without_af_xdp_open_says_what_to_install() {
        let err = XdpEngine::open(&XdpConfig::new("127.0.0.1:0"))
            .err()
            .unwrap();
        assert!(err.to_string().contains("built without AF_XDP"), "{err}");
    }

    #[cfg(voltstream_xdp)]
    mod live {
        //! Each test runs in a thread of its own network namespace (unshare),
        //! on that namespace's loopback: the host's interfaces are never touched
        //! and the namespace disappears with the thread. Needs root.
        use super::*;
        use crate::capture::test_collect as collect;
        use crate::capture::testnet::in_private_netns;
        use std::net::UdpSocket;

        fn small(bind: &str) -> XdpConfig {
            let mut c = XdpConfig::new(bind);
            c.frames = 256;
            c.huge_pages = false;
            c.max_packet = 6000;
            c
        }

        fn payload(len: usize, seed: u32) -> Vec<u8> {
            (0..len).map(|k| (k as u32 * 13 + seed) as u8).collect()
        }

        #[test]
        fn loopback_receives_our_port_only_in_order_and_passes_the_rest() {
            in_private_netns(|| {
                let mut e = XdpEngine::open(&small("127.0.0.1:0")).unwrap();
                let info = e.info();
                assert_eq!((info.interface.as_str(), info.mode), ("lo", "skb"));
                assert!(!info.zero_copy);
                let to = e.local_addr().unwrap();
                let other = UdpSocket::bind("127.0.0.1:0").unwrap();
                let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
                let mut sent = Vec::new();
                for i in 0..60u32 {
                    // Some beyond one 4 KiB chunk (multi-buffer), some beyond max_packet.
                    let len = match i % 10 {
                        3 => 6001,
                        7 => 5000 + i as usize,
                        _ => 1 + (i as usize * 37) % 1000,
                    };
                    let p = payload(len, i);
                    tx.send_to(&p, to).unwrap();
                    tx.send_to(&p, other.local_addr().unwrap()).unwrap();
                    sent.push(p);
                }
                let (got, truncated) = collect(&mut e, 60);
                assert_eq!(truncated, 6);
                let expect: Vec<Vec<u8>> =
                    sent.iter().filter(|p| p.len() <= 6000).cloned().collect();
                assert_eq!(got, expect);
                assert_eq!(e.recv_batch(Duration::ZERO, |_| {}).unwrap(), 0);
                assert_eq!(e.kernel_drops(), 0);
                let c = info.counts();
                assert_eq!((c.matched, c.cut, c.no_socket), (60, 0, 0));
                assert!(
                    info.multi_buffer,
                    "kernel {:?}",
                    std::fs::read_to_string("/proc/sys/kernel/osrelease")
                );
                // The other port's datagrams went to the kernel stack, whole.
                other
                    .set_read_timeout(Some(Duration::from_secs(2)))
                    .unwrap();
                let mut buf = vec![0u8; 10000];
                for p in &sent {
                    let n = other.recv(&mut buf).unwrap();
                    assert_eq!(&buf[..n], &p[..]);
                }
            });
        }

        #[test]
        fn loopback_receives_ipv6_for_our_address_and_port() {
            in_private_netns(|| {
                let mut e = XdpEngine::open(&small("[::1]:0")).unwrap();
                assert_eq!(e.info().interface, "lo");
                let to = e.local_addr().unwrap();
                let other = UdpSocket::bind("[::1]:0").unwrap();
                let tx = UdpSocket::bind("[::1]:0").unwrap();
                let v4 = UdpSocket::bind("127.0.0.1:0").unwrap();
                let sent: Vec<Vec<u8>> = (0..20).map(|i| payload(100 + i * 10, i as u32)).collect();
                for p in &sent {
                    tx.send_to(p, to).unwrap();
                    tx.send_to(p, other.local_addr().unwrap()).unwrap();
                    let _ = v4.send_to(p, ("127.0.0.1", to.port()));
                }
                assert_eq!(collect(&mut e, 20), (sent.clone(), 0));
                assert_eq!(e.recv_batch(Duration::ZERO, |_| {}).unwrap(), 0);
                assert_eq!(e.kernel_drops(), 0);
                assert_eq!(e.info().counts().matched, 20);
                other
                    .set_read_timeout(Some(Duration::from_secs(2)))
                    .unwrap();
                let mut buf = vec![0u8; 2000];
                for p in &sent {
                    let n = other.recv(&mut buf).unwrap();
                    assert_eq!(&buf[..n], &p[..]);
                }
            });
        }

        #[test]
        fn without_multi_buffer_long_frames_are_cut_and_reported_truncated() {
            in_private_netns(|| {
                let mut c = small("127.0.0.1:0");
                c.multi_buffer = false;
                let mut e = XdpEngine::open(&c).unwrap();
                assert!(!e.info().multi_buffer);
                let to = e.local_addr().unwrap();
                let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
                let (short, long) = (payload(3000, 1), payload(5000, 2));
                for p in [&short, &long, &short] {
                    tx.send_to(p, to).unwrap();
                }
                let (got, truncated) = collect(&mut e, 3);
                assert_eq!((got, truncated), (vec![short.clone(), short], 1));
                assert_eq!(e.kernel_drops(), 0);
                assert_eq!(e.info().counts().cut, 1);
            });
        }

        #[test]
        fn drops_are_counted_exactly_when_the_umem_is_full() {
            in_private_netns(|| {
                let mut c = small("127.0.0.1:0");
                c.frames = 64;
                c.batch = 64;
                let mut e = XdpEngine::open(&c).unwrap();
                let to = e.local_addr().unwrap();
                let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
                let p = payload(1000, 9);
                for _ in 0..200 {
                    tx.send_to(&p, to).unwrap();
                }
                // Let the kernel finish with all 200 before reading frees chunks.
                let deadline = std::time::Instant::now() + Duration::from_secs(5);
                while e.kernel_drops() < 136 && std::time::Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(1));
                }
                let mut got = 0u64;
                while e
                    .recv_batch(Duration::from_millis(20), |r| {
                        assert_eq!(r, Received::Packet(&p[..]));
                        got += 1;
                    })
                    .unwrap()
                    > 0
                {}
                let drops = e.kernel_drops();
                assert_eq!((got, drops), (64, 136));
                let counts = e.info().counts();
                assert_eq!(counts.rx_dropped, 136);
                assert_eq!(counts.matched, 200);
            });
        }

        #[test]
        fn clear_errors_for_a_missing_interface_queue_or_a_busy_port() {
            in_private_netns(|| {
                let mut c = small("127.0.0.1:0");
                c.interface = Some("vs-no-such-if".into());
                let err = XdpEngine::open(&c).err().unwrap();
                assert!(err.to_string().contains("vs-no-such-if"), "{err}");
                let mut c = small("127.0.0.1:0");
                c.queue = 5;
                let err = XdpEngine::open(&c).err().unwrap().to_string();
                assert!(
                    err.contains("queue 5") && err.contains("receive queue"),
                    "{err}"
                );
                let e = XdpEngine::open(&small("127.0.0.1:0")).unwrap();
                let addr = e.local_addr().unwrap().to_string();
                let err = XdpEngine::open(&small(&addr)).err().unwrap();
                assert!(err.to_string().contains("another capture"), "{err}");
                // A second capture on the same queue: the queue is taken.
                let err = XdpEngine::open(&small("127.0.0.1:0"))
                    .err()
                    .unwrap()
                    .to_string();
                assert!(err.contains("already reads queue 0"), "{err}");
                drop(e);
                // Detached on drop: the interface is free again.
                XdpEngine::open(&small("127.0.0.1:0")).unwrap();
            });
        }
    }
}

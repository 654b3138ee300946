//! The AF_XDP engine: set-up (guard, UMEM, socket, program) and the receive loop.

use std::io;
use std::net::{IpAddr, UdpSocket};
use std::os::fd::AsRawFd;

use super::bpf::*;
use super::xsk::*;
use super::*;
use crate::capture::batch::ready_within;
use crate::capture::host::{guard, if_index, interface_owning, resolve_ip};
use crate::capture::multicast;
use crate::memory::page_size;
use crate::memory::Placement;

pub const AVAILABLE: bool = true;

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
        let (guard, local) = guard(plan.as_ref().map_or(addr, |p| p.bind))?;
        let ip = local.ip();
        let interface = match &config.interface {
            Some(i) => i.clone(),
            None => interface_owning(ip, "the interface to capture on (e.g. interface='eth0')")?,
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
                        flow: Flow::behind_filter(local.port()),
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
            Some(libc::EINVAL) if queues > 0 && queue as usize >= queues => {
                format!(" ({interface} has {queues} receive queue(s): use a queue below {queues})")
            }
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
}

impl Engine for XdpEngine {
    fn name(&self) -> &'static str {
        "xdp"
    }

    fn recv_batch<F: Sink>(&mut self, timeout: Duration, mut sink: F) -> Result<usize> {
        let rx = &self.xsk.rx;
        if !ready_within(self.xsk.fd.as_raw_fd(), timeout, "AF_XDP socket", || {
            rx.available() > 0
        })? {
            return Ok(0);
        }
        let n = self.xsk.rx.available().min(self.batch);
        // Every chunk read goes straight back to the kernel: the fill ring has a
        // slot for every chunk, so it always has room. The kernel sees the slots
        // only at submit(), after every packet of the batch was handed on.
        debug_assert!(self.xsk.fill.free() >= n);
        let mut passed = 0;
        for i in 0..n {
            let d = self.xsk.rx.desc(i);
            self.xsk.fill.put(d.addr & self.chunk_mask);
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
                Joined::Frame(l2) => passed += deliver(l2, self.flow, self.max_packet, &mut sink),
                Joined::TooLong => {
                    sink(Received::Truncated);
                    passed += 1;
                }
            }
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

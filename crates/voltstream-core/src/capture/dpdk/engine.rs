//! The DPDK engine: the C shim's calls, the EAL initialised once, the port
//! and its mbuf pool, and the receive loop.

use std::ffi::{c_char, c_int, c_uint, CStr, CString};
use std::net::UdpSocket;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

use super::deliver::Deliver;
use super::eal::{eal_args, huge_pages_free};
use super::*;
use crate::capture::flow::Flow;
use crate::capture::host::{guard, if_index, interface_owning, resolve_ip};
use crate::memory::page_size;

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
        let bind = resolve_ip(&config.net.bind)?;
        let port = match config.port() {
            Some(p) => p,
            None => DpdkPort::AfPacket {
                interface: interface_owning(
                    bind.ip(),
                    "the DPDK port (an interface, a PCI address or device arguments)",
                )?,
            },
        };
        let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
        let (devargs, ring, guard) = match &port {
            DpdkPort::AfPacket { interface } => {
                if_index(interface)?;
                let ring = AfPacketRing::for_config(
                    config.max_packet,
                    config.net.queue_bytes,
                    page_size(),
                );
                let (guard, _) = guard(bind)?;
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
                (config.net.queue_bytes / (data_room + 256))
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
    fn burst<F: Sink>(&mut self, sink: &mut F) -> (usize, usize) {
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

    fn recv_batch<F: Sink>(&mut self, timeout: Duration, mut sink: F) -> Result<usize> {
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

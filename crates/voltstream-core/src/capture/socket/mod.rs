//! UDP socket engine: one socket, `recvmmsg` into a batch of buffers allocated at
//! start-up.

use std::io;
use std::mem::size_of;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

use super::batch::wait_readable;
use super::host::{bind_udp, interface_of_ip, resolve_ip, setsockopt};
use super::limits::within;
use super::{multicast, Engine, NetworkSpec, Received, Sink};
use crate::memory::Buffer;
use crate::{Error, Result};

/// Settings of the socket engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketConfig {
    /// Where packets come from; `port` 0 in `bind` picks a free port (see
    /// [`Engine::local_addr`]). The queue is the socket's receive buffer
    /// (`SO_RCVBUF`, as much as the kernel grants).
    pub net: NetworkSpec,
    /// Largest packet accepted whole; anything longer is reported truncated.
    pub max_packet: usize,
    /// Packets per `recvmmsg` call.
    pub batch: usize,
}

impl SocketConfig {
    /// Defaults: [`NetworkSpec::new`] (64 MiB receive buffer), 64-packet
    /// batches, jumbo-frame buffers.
    pub fn new(bind: impl Into<String>) -> Self {
        SocketConfig {
            net: NetworkSpec::new(bind),
            max_packet: 9000,
            batch: 64,
        }
    }
}

/// Ancillary space per message: one `SO_RXQ_OVFL` u32, in u64 units for alignment.
const CTRL_WORDS: usize = 4;

pub struct SocketEngine {
    sock: UdpSocket,
    local: SocketAddr,
    /// `batch` slots of `slot` bytes; one byte more than `max_packet` so that an
    /// over-long packet sets MSG_TRUNC instead of fitting exactly.
    bufs: Buffer,
    slot: usize,
    iovs: Vec<libc::iovec>,
    ctrl: Vec<u64>,
    hdrs: Vec<libc::mmsghdr>,
    drops_cmsg: u64,
    drops_meminfo: u64,
    rcvbuf: u64,
    interface: Option<String>,
}

// SAFETY: the raw pointers inside `iovs` and `hdrs` point only into `bufs`,
// `ctrl` and `iovs`, heap allocations owned by this struct that do not move when
// the struct moves; nothing is shared with another thread.
unsafe impl Send for SocketEngine {}

impl SocketEngine {
    /// Binds the socket and sizes its buffers. Fails with a message naming the
    /// address when the port is taken or the address is not local.
    pub fn bind(config: &SocketConfig) -> Result<Self> {
        within("batch (packets per recvmmsg)", config.batch, 1..=1024)?;
        within("max_packet", config.max_packet, 1..=65_536)?;
        let net = &config.net;
        let addr = resolve_ip(&net.bind)?;
        let groups = multicast::plan_ip(addr, &net.multicast)?;
        let sock = bind_udp(groups.as_ref().map_or(addr, |p| p.bind))?;
        if let Some(p) = &groups {
            multicast::join(&sock, &p.groups, net.interface.as_deref())?;
        }
        // The interface is known when named, or when the bind address is one of
        // its addresses (a failure to list interfaces only costs the report).
        let interface = net.interface.clone().or_else(|| match addr.ip() {
            ip if !ip.is_unspecified() && !ip.is_multicast() => interface_of_ip(ip).ok().flatten(),
            _ => None,
        });
        let local = sock
            .local_addr()
            .map_err(|e| Error::io("cannot read socket address", e))?;
        sock.set_nonblocking(true)
            .map_err(|e| Error::io("cannot make the capture socket non-blocking", e))?;
        let fd = sock.as_raw_fd();
        let want = config.net.queue_bytes.min(i32::MAX as usize / 2) as libc::c_int;
        // Root may exceed net.core.rmem_max with SO_RCVBUFFORCE; others get the
        // capped SO_RCVBUF, and the achieved size is reported either way.
        if setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &want).is_err() {
            setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &want)
                .map_err(|e| Error::io("cannot set the socket receive buffer", e))?;
        }
        setsockopt(fd, libc::SOL_SOCKET, libc::SO_RXQ_OVFL, &1 as &libc::c_int)
            .map_err(|e| Error::io("cannot enable the socket drop counter (SO_RXQ_OVFL)", e))?;
        let rcvbuf = getsockopt_int(fd, libc::SO_RCVBUF)
            .map_err(|e| Error::io("cannot read the socket receive buffer size", e))?;

        let slot = config.max_packet + 1;
        let mut bufs = Buffer::new(slot * config.batch)?;
        let base = bufs.as_mut_slice().as_mut_ptr();
        let iovs: Vec<libc::iovec> = (0..config.batch)
            .map(|i| libc::iovec {
                // SAFETY: i * slot < batch * slot = bufs.len(): stays inside `bufs`.
                iov_base: unsafe { base.add(i * slot) }.cast(),
                iov_len: slot,
            })
            .collect();
        let mut engine = SocketEngine {
            sock,
            local,
            bufs,
            slot,
            iovs,
            ctrl: vec![0; CTRL_WORDS * config.batch],
            // SAFETY: mmsghdr is plain old data; all-zero is a valid (empty) value.
            hdrs: vec![unsafe { std::mem::zeroed() }; config.batch],
            drops_cmsg: 0,
            drops_meminfo: 0,
            rcvbuf: rcvbuf.max(0) as u64,
            interface,
        };
        for i in 0..config.batch {
            engine.reset_header(i);
        }
        Ok(engine)
    }

    /// Restores the fields of header `i` that the kernel overwrites.
    fn reset_header(&mut self, i: usize) {
        let iov: *mut libc::iovec = &mut self.iovs[i];
        let ctrl: *mut u64 = &mut self.ctrl[i * CTRL_WORDS];
        let h = &mut self.hdrs[i];
        h.msg_len = 0;
        h.msg_hdr.msg_name = std::ptr::null_mut();
        h.msg_hdr.msg_namelen = 0;
        h.msg_hdr.msg_iov = iov;
        h.msg_hdr.msg_iovlen = 1;
        h.msg_hdr.msg_control = ctrl.cast();
        h.msg_hdr.msg_controllen = CTRL_WORDS * size_of::<u64>();
        h.msg_hdr.msg_flags = 0;
    }

    /// Reads the socket's cumulative drop counter from the control message.
    fn read_cmsg(&mut self, i: usize) {
        let hdr: *const libc::msghdr = &self.hdrs[i].msg_hdr;
        // SAFETY: `hdr` is a msghdr the kernel just filled: msg_control points to
        // our `ctrl` slot and msg_controllen is what the kernel wrote there, so the
        // CMSG_* walk stays within that slot. The u32 is read unaligned.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(hdr);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SO_RXQ_OVFL {
                    let v = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<u32>());
                    self.drops_cmsg = self.drops_cmsg.max(v as u64);
                }
                c = libc::CMSG_NXTHDR(hdr, c);
            }
        }
    }

    fn recvmmsg(&mut self) -> io::Result<usize> {
        // SAFETY: every header points at our own iovec/control slots (set by
        // `reset_header`), which point into live buffers of the stated sizes;
        // the kernel writes at most `batch` headers.
        let n = unsafe {
            libc::recvmmsg(
                self.sock.as_raw_fd(),
                self.hdrs.as_mut_ptr(),
                self.hdrs.len() as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }
}

impl Engine for SocketEngine {
    fn name(&self) -> &'static str {
        "socket"
    }

    fn recv_batch<F: Sink>(&mut self, timeout: Duration, mut sink: F) -> Result<usize> {
        // Under load the queue is never empty, so recvmmsg goes first and poll is
        // only paid when idle.
        // A zero timeout is a spinning caller (the latency mode's hot loop): an
        // empty queue returns at once, without a poll call.
        let mut r = self.recvmmsg();
        if !timeout.is_zero() && matches!(&r, Err(e) if e.kind() == io::ErrorKind::WouldBlock) {
            match wait_readable(self.sock.as_raw_fd(), timeout) {
                Ok(true) => r = self.recvmmsg(),
                Ok(false) => return Ok(0),
                Err(e) => return Err(Error::io("poll on the capture socket failed", e)),
            }
        }
        let n = match r {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                return Ok(0)
            }
            Err(e) => return Err(Error::io("recvmmsg on the capture socket failed", e)),
        };
        for i in 0..n {
            let h = &self.hdrs[i];
            let len = h.msg_len as usize;
            let truncated = h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 || len >= self.slot;
            if h.msg_hdr.msg_controllen > 0 {
                self.read_cmsg(i);
            }
            let start = i * self.slot;
            match self.bufs.as_slice().get(start..start + len) {
                Some(p) if !truncated => sink(Received::Packet(p)),
                _ => sink(Received::Truncated),
            }
            self.reset_header(i);
        }
        Ok(n)
    }

    fn kernel_drops(&mut self) -> u64 {
        let mut info = [0u32; 9];
        let mut len = size_of::<[u32; 9]>() as libc::socklen_t;
        // SAFETY: `info` is writable for `len` bytes; the kernel writes at most that.
        let r = unsafe {
            libc::getsockopt(
                self.sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_MEMINFO,
                info.as_mut_ptr().cast(),
                &mut len,
            )
        };
        if r == 0 && len as usize > libc::SK_MEMINFO_DROPS as usize * 4 {
            self.drops_meminfo = info[libc::SK_MEMINFO_DROPS as usize] as u64;
        }
        self.drops_cmsg.max(self.drops_meminfo)
    }

    fn rcvbuf(&self) -> u64 {
        self.rcvbuf
    }

    fn local_addr(&self) -> Option<SocketAddr> {
        Some(self.local)
    }

    fn interface(&self) -> Option<&str> {
        self.interface.as_deref()
    }
}

fn getsockopt_int(fd: libc::c_int, opt: libc::c_int) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` is writable for `len` bytes.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            opt,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if r == 0 {
        Ok(value)
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests;

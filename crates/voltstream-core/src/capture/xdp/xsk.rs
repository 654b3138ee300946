//! The AF_XDP socket and its memory: the UMEM, the rings, the socket.

use std::ffi::c_int;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};

use super::*;
use crate::capture::host::{map_ring, setsockopt};
use crate::memory::{Buffer, Placement};

pub(super) const AF_XDP: c_int = 44;
/// Bytes the kernel keeps in front of each frame in a chunk.
pub(super) const XDP_PACKET_HEADROOM: usize = 256;
pub(super) const COMPLETION_RING: c_int = 64;

/// The UMEM: a [`Buffer`] on huge pages when the kernel has them reserved,
/// on the interface's NUMA node, pre-faulted and locked before the socket exists.
pub(super) struct Umem {
    /// Owns the mapping; `ptr` points into it and stays valid while it lives.
    pub(super) _buf: Buffer,
    pub(super) ptr: *mut u8,
    pub(super) len: usize,
    pub(super) huge: bool,
}

impl Umem {
    pub(super) fn new(len: usize, try_huge: bool, numa_node: Option<u32>) -> Result<Umem> {
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
    pub(super) fn get(&self, addr: u64, len: u32) -> Option<&[u8]> {
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
pub(super) struct Ring {
    pub(super) map: *mut u8,
    pub(super) map_len: usize,
    pub(super) producer: *mut u32,
    pub(super) consumer: *mut u32,
    pub(super) desc: *mut u8,
    pub(super) mask: u32,
    pub(super) size: u32,
    pub(super) local: u32,
}

impl Ring {
    pub(super) fn map(
        fd: RawFd,
        off: &libc::xdp_ring_offset,
        size: u32,
        elem: usize,
        pgoff: u64,
    ) -> io::Result<Ring> {
        let map_len = off.desc as usize + size as usize * elem;
        // The kernel allocated the ring for this socket at the documented page
        // offset `pgoff`.
        let map = map_ring(fd, map_len, pgoff, false)?;
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

    pub(super) fn producer(&self) -> &AtomicU32 {
        // SAFETY: a 4-byte aligned u32 inside the mapping, shared with the
        // kernel, which accesses it concurrently: hence the atomic view.
        unsafe { AtomicU32::from_ptr(self.producer) }
    }

    pub(super) fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as for `producer`.
        unsafe { AtomicU32::from_ptr(self.consumer) }
    }

    /// RX: descriptors the kernel published that we have not released.
    pub(super) fn available(&self) -> u32 {
        self.producer()
            .load(Ordering::Acquire)
            .wrapping_sub(self.local)
    }

    /// RX: the `i`-th unreleased descriptor (i < `available()`).
    pub(super) fn desc(&self, i: u32) -> libc::xdp_desc {
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
    pub(super) fn release(&mut self, n: u32) {
        self.local = self.local.wrapping_add(n);
        self.consumer().store(self.local, Ordering::Release);
    }

    /// Fill: free slots.
    pub(super) fn free(&self) -> u32 {
        self.size
            - self
                .local
                .wrapping_sub(self.consumer().load(Ordering::Acquire))
    }

    /// Fill: writes one chunk address (published by `submit`).
    pub(super) fn put(&mut self, addr: u64) {
        let slot = (self.local & self.mask) as usize;
        // SAFETY: slot <= mask, inside the address array; the caller checked
        // `free()`, so the kernel is not reading this slot.
        unsafe { std::ptr::write(self.desc.add(slot * 8).cast::<u64>(), addr) };
        self.local = self.local.wrapping_add(1);
    }

    /// Fill: publishes the addresses `put` since the last submit.
    pub(super) fn submit(&self) {
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
pub(super) struct Xsk {
    pub(super) rx: Ring,
    pub(super) fill: Ring,
    pub(super) fd: OwnedFd,
    pub(super) zero_copy: bool,
    pub(super) multi_buffer: bool,
}

pub(super) fn getsockopt<T>(fd: RawFd, opt: c_int, v: &mut T) -> io::Result<usize> {
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
    pub(super) fn open(
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
    pub(super) fn statistics(&self) -> Option<libc::xdp_statistics> {
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

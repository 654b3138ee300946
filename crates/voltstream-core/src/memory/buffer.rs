use std::ptr::NonNull;

use super::numa::{self, Placement};
use crate::{Error, Result};

/// Size of the huge pages requested with `MAP_HUGETLB` (the x86-64 and arm64 default).
pub const HUGE_PAGE: usize = 2 << 20;

/// A page-aligned, pre-faulted block of anonymous memory.
///
/// Backed by its own `mmap` rather than the global allocator so that it can be
/// placed (huge pages, NUMA node), populated and locked before traffic starts.
/// Order matters: the NUMA policy is set on the empty mapping, *then* every page
/// is touched (so it is allocated under that policy), *then* the range is
/// locked (so it stays resident).
pub struct Buffer {
    ptr: NonNull<u8>,
    len: usize,
    map_len: usize,
    locked: bool,
    huge: bool,
    node: Option<u32>,
    warnings: Vec<String>,
}

// SAFETY: `Buffer` exclusively owns its mapping (like `Box<[u8]>`); shared access
// only hands out `&[u8]`, mutation needs `&mut self`.
unsafe impl Send for Buffer {}
// SAFETY: as above; `&Buffer` only permits reads.
unsafe impl Sync for Buffer {}

impl Buffer {
    /// Maps `len` bytes (at least one page) with normal pages, touches every page
    /// and tries to lock them in RAM. Failure to lock is not an error: see
    /// [`Buffer::locked`].
    pub fn new(len: usize) -> Result<Self> {
        Self::placed(len, &Placement::default())
    }

    /// As [`Buffer::new`], placed as `placement` asks: 2 MiB huge pages when the
    /// kernel has some reserved and the buffer fills at least one (a smaller one
    /// would waste most of it), preferring the NUMA node given. What could not be
    /// had is recorded in [`Buffer::warnings`], never an error.
    pub fn placed(len: usize, placement: &Placement) -> Result<Self> {
        let page = page_size();
        let too_large = || Error::Config(format!("buffer of {len} bytes is too large to allocate"));
        let mut warnings = Vec::new();
        let mut mapped = None;
        if placement.huge_pages && len >= HUGE_PAGE {
            let map_len = len
                .div_ceil(HUGE_PAGE)
                .checked_mul(HUGE_PAGE)
                .ok_or_else(too_large)?;
            match map_anonymous(map_len, libc::MAP_HUGETLB) {
                Ok(p) => mapped = Some((p, map_len, true)),
                Err(e) => warnings.push(format!(
                    "no huge pages for a {} MiB buffer ({e}); using {} KiB pages (reserve huge \
                     pages with sysctl vm.nr_hugepages=N)",
                    map_len >> 20,
                    page >> 10
                )),
            }
        }
        let (ptr, map_len, huge) = match mapped {
            Some(m) => m,
            None => {
                let map_len = len
                    .max(1)
                    .div_ceil(page)
                    .checked_mul(page)
                    .ok_or_else(too_large)?;
                let p = map_anonymous(map_len, 0).map_err(|e| {
                    Error::io(
                        format!(
                            "cannot allocate a {map_len}-byte capture buffer; lower nchunks or \
                             packets_per_chunk, or free memory"
                        ),
                        e,
                    )
                })?;
                (p, map_len, false)
            }
        };
        let mut buf = Buffer {
            ptr,
            len,
            map_len,
            locked: false,
            huge,
            node: None,
            warnings,
        };
        if let Some(node) = placement.numa_node {
            // SAFETY: the range is exactly our own fresh mapping, not yet touched.
            match unsafe { numa::prefer_node(buf.ptr.as_ptr(), map_len, node) } {
                Ok(()) => buf.node = Some(node),
                Err(e) => buf
                    .warnings
                    .push(format!("cannot place memory on NUMA node {node} ({e})")),
            }
        }
        // Writing one byte per page allocates every page now, under the policy
        // just set, so that no page fault happens once packets flow.
        let step = if huge { HUGE_PAGE } else { page };
        let s = buf.as_mut_slice_full();
        for i in (0..map_len).step_by(step) {
            s[i] = 0;
        }
        if let Some(node) = buf.node {
            // SAFETY: the first page of our mapping, allocated just above.
            match unsafe { numa::node_of_page(buf.ptr.as_ptr()) } {
                Ok(got) if got != node => buf.warnings.push(format!(
                    "memory asked for on NUMA node {node} landed on node {got} (node {node} \
                     full?)"
                )),
                _ => {}
            }
        }
        // SAFETY: the range is exactly our own live mapping.
        buf.locked = unsafe { libc::mlock(buf.ptr.as_ptr().cast(), map_len) } == 0;
        if !buf.locked {
            buf.warnings.push(format!(
                "cannot lock a {} KiB buffer in RAM ({}); it may be swapped out: raise \
                 RLIMIT_MEMLOCK (ulimit -l) or run with CAP_IPC_LOCK",
                map_len >> 10,
                std::io::Error::last_os_error()
            ));
        }
        Ok(buf)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `mlock` succeeded (it needs CAP_IPC_LOCK or a large RLIMIT_MEMLOCK).
    pub fn locked(&self) -> bool {
        self.locked
    }

    /// Whether the buffer is backed by 2 MiB huge pages.
    pub fn huge_pages(&self) -> bool {
        self.huge
    }

    /// The NUMA node the memory policy prefers, when one was set.
    pub fn numa_node(&self) -> Option<u32> {
        self.node
    }

    /// What the placement asked for but did not get (huge pages, lock, node).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Bytes mapped (the length rounded up to whole pages).
    pub fn mapped_len(&self) -> usize {
        self.map_len
    }

    /// Raw mutable pointer for registering the memory with the kernel (AF_XDP
    /// UMEM); valid while `self` lives.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` is valid for `map_len >= len` bytes for the life of `self`,
        // initialised (anonymous pages are zero-filled) and not aliased mutably while
        // `&self` is held.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and `&mut self` guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Raw pointer for FFI consumers (Python's buffer protocol); valid while `self` lives.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    fn as_mut_slice_full(&mut self) -> &mut [u8] {
        // SAFETY: the whole mapping is ours and exclusively borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.map_len) }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping created in `new`; no slice into it
        // can outlive `self`. munmap also drops any lock on the range.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.map_len);
        }
    }
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buffer")
            .field("len", &self.len)
            .field("locked", &self.locked)
            .field("huge", &self.huge)
            .field("node", &self.node)
            .finish()
    }
}

/// A private anonymous mapping of `len` bytes with `extra` flags, not populated.
fn map_anonymous(len: usize, extra: libc::c_int) -> std::io::Result<NonNull<u8>> {
    // SAFETY: anonymous private mapping with a null hint; no existing memory is
    // affected. The result is checked against MAP_FAILED.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | extra,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok(NonNull::new(ptr.cast::<u8>()).expect("mmap never returns null on success"))
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

    #[test]
    fn buffer_is_writable_and_independent() {
        let mut a = Buffer::new(10_000).unwrap();
        let mut b = Buffer::new(10_000).unwrap();
        assert_eq!(a.len(), 10_000);
        for (i, x) in a.as_mut_slice().iter_mut().enumerate() {
            *x = (i * 7 + 3) as u8;
        }
        b.as_mut_slice().fill(0xA5);
        assert!(a
            .as_slice()
            .iter()
            .enumerate()
            .all(|(i, &x)| x == (i * 7 + 3) as u8));
        assert!(b.as_slice().iter().all(|&x| x == 0xA5));
    }

    /// Reads `HugePages_Free` from /proc/meminfo.
    fn free_huge_pages() -> usize {
        let text = std::fs::read_to_string("/proc/meminfo").unwrap();
        let line = text
            .lines()
            .find(|l| l.starts_with("HugePages_Free:"))
            .unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    #[test]
    fn huge_pages_fall_back_to_normal_pages_with_a_warning() {
        // One huge page more than the kernel has free: MAP_HUGETLB must fail.
        let free = free_huge_pages();
        let len = (free + 1) * HUGE_PAGE;
        let p = Placement {
            huge_pages: true,
            numa_node: None,
        };
        let mut b = Buffer::placed(len, &p).unwrap();
        assert!(!b.huge_pages());
        assert_eq!(b.warnings().len(), 1, "{:?}", b.warnings());
        assert!(
            b.warnings()[0].contains("no huge pages") && b.warnings()[0].contains("nr_hugepages"),
            "{:?}",
            b.warnings()
        );
        b.as_mut_slice().fill(7);
        assert!(b.as_slice().iter().all(|&x| x == 7));
    }

    #[test]
    fn mapping_is_resident_and_locked_before_use() {
        let b = Buffer::new(64 << 10).unwrap();
        let pages = b.mapped_len() / page_size();
        let mut vec = vec![0u8; pages];
        // SAFETY: mincore over our own mapping, one status byte per page.
        let r = unsafe {
            libc::mincore(
                b.as_ptr().cast_mut().cast(),
                b.mapped_len(),
                vec.as_mut_ptr(),
            )
        };
        assert_eq!(r, 0);
        assert!(
            vec.iter().all(|&v| v & 1 == 1),
            "pages not resident: {vec:?}"
        );
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            assert!(b.locked());
        }
    }
}

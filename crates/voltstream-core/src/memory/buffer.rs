use std::ptr::NonNull;

use crate::{Error, Result};

/// A page-aligned, pre-faulted block of anonymous memory.
///
/// Backed by its own `mmap` rather than the global allocator so that it can be
/// populated up front (`MAP_POPULATE`) and locked (`mlock`) independently, and so
/// that later huge-page or NUMA placement changes stay in this file.
pub struct Buffer {
    ptr: NonNull<u8>,
    len: usize,
    map_len: usize,
    locked: bool,
}

// SAFETY: `Buffer` exclusively owns its mapping (like `Box<[u8]>`); shared access
// only hands out `&[u8]`, mutation needs `&mut self`.
unsafe impl Send for Buffer {}
// SAFETY: as above; `&Buffer` only permits reads.
unsafe impl Sync for Buffer {}

impl Buffer {
    /// Maps `len` bytes (at least one page), touches every page and tries to
    /// lock them in RAM. Failure to lock is not an error: see [`Buffer::locked`].
    pub fn new(len: usize) -> Result<Self> {
        let page = page_size();
        let map_len = len.max(1).div_ceil(page).checked_mul(page).ok_or_else(|| {
            Error::Config(format!("buffer of {len} bytes is too large to allocate"))
        })?;
        // SAFETY: anonymous private mapping with a null hint; no existing memory is
        // affected. The result is checked against MAP_FAILED below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(Error::io(
                format!(
                    "cannot allocate a {map_len}-byte capture buffer; lower nchunks or \
                     packets_per_chunk, or free memory"
                ),
                std::io::Error::last_os_error(),
            ));
        }
        let ptr = NonNull::new(ptr.cast::<u8>()).expect("mmap never returns null on success");
        let mut buf = Buffer {
            ptr,
            len,
            map_len,
            locked: false,
        };
        // MAP_POPULATE may be skipped under memory pressure; writing one byte per
        // page guarantees the pages exist before traffic starts.
        let s = buf.as_mut_slice_full();
        for i in (0..map_len).step_by(page) {
            s[i] = 0;
        }
        // SAFETY: the range is exactly our own live mapping.
        buf.locked = unsafe { libc::mlock(buf.ptr.as_ptr().cast(), map_len) } == 0;
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
            .finish()
    }
}

fn page_size() -> usize {
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
}

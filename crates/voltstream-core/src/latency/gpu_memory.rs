//! [`HostMemory`]: the host memory a latency session owns (see [`super`]).

use std::ptr::NonNull;
use std::sync::Arc;

use super::{
    CudaDriver, CU_MEMHOSTALLOC_DEVICEMAP, CU_MEMHOSTALLOC_PORTABLE, CU_MEMHOSTALLOC_WRITECOMBINED,
};
use crate::{Error, Result};

enum Backing {
    Cuda(Arc<CudaDriver>),
    Heap(std::alloc::Layout),
}

/// Host memory the GPU can reach: pinned and mapped (`cuMemHostAlloc` with
/// DEVICEMAP | PORTABLE, optionally WRITECOMBINED) or, for the host stand-in,
/// ordinary page-aligned heap memory whose "device pointer" is its address.
/// Zeroed at allocation; freed on drop.
pub struct HostMemory {
    ptr: NonNull<u8>,
    len: usize,
    device: u64,
    backing: Backing,
}

// SAFETY: the memory is exclusively owned (like a Box<[u8]>); concurrent use
// with the GPU or a stand-in thread goes through raw pointers and atomics.
unsafe impl Send for HostMemory {}
// SAFETY: as above; `&HostMemory` only hands out raw pointers.
unsafe impl Sync for HostMemory {}

impl HostMemory {
    /// `len` bytes (at least 1) of zeroed, 4096-aligned heap memory.
    pub fn heap(len: usize) -> Result<Self> {
        let layout = std::alloc::Layout::from_size_align(len.max(1), 4096)
            .map_err(|_| Error::Config(format!("host buffer of {len} bytes is too large")))?;
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw)
            .ok_or_else(|| Error::Config(format!("out of memory allocating {len} bytes")))?;
        Ok(HostMemory {
            ptr,
            len,
            device: raw as u64,
            backing: Backing::Heap(layout),
        })
    }

    /// Pinned, GPU-mapped memory from the context current on this thread.
    pub fn pinned(driver: Arc<CudaDriver>, len: usize, write_combined: bool) -> Result<Self> {
        let mut flags = CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE;
        if write_combined {
            flags |= CU_MEMHOSTALLOC_WRITECOMBINED;
        }
        let (ptr, device) = driver.host_alloc(len.max(1), flags)?;
        // SAFETY: `len` bytes at `ptr` were just allocated; cuMemHostAlloc
        // does not zero them and the protocol relies on seq = 0 at start.
        unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, len) };
        Ok(HostMemory {
            ptr,
            len,
            device,
            backing: Backing::Cuda(driver),
        })
    }

    pub fn host_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The address the GPU uses for this memory (always asked of the driver;
    /// equal to the host address under unified addressing).
    pub fn device_ptr(&self) -> u64 {
        self.device
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for HostMemory {
    fn drop(&mut self) {
        match &self.backing {
            // SAFETY: from host_alloc (pinned), freed once, here.
            Backing::Cuda(driver) => unsafe { driver.host_free(self.ptr) },
            // SAFETY: allocated by alloc_zeroed with this layout (heap).
            Backing::Heap(layout) => unsafe { std::alloc::dealloc(self.ptr.as_ptr(), *layout) },
        }
    }
}

//! The CUDA driver, reached at run time with `dlopen("libcuda.so.1")` so that
//! the wheel loads on machines without CUDA, the host memory a latency
//! session owns, and [`GpuOps`]: the only GPU calls the hand-off makes.
//!
//! Ownership (design §2, "hybrid"): Python/CuPy compiles the kernels, owns all
//! *device* memory, the module and the streams, and passes raw handles as
//! integers; Rust owns all *host* memory ([`HostMemory`]: staging slots, mapped
//! slots, acks, control block), allocated at session start and freed on drop.
//! Python must keep its context, module, streams and device buffers alive, and
//! every kernel that touches Rust's mapped memory finished, until the Rust
//! session is dropped.
//!
//! ABI: the functions below are declared by hand from the driver API
//! (CUresult = `i32`, handles = `*mut c_void`, CUdeviceptr = `u64` on 64-bit).
//! The `_v2` names are the symbols `cuda.h` maps the plain names to.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::io;
use std::ptr::{self, NonNull};
use std::sync::Arc;

use crate::{Error, Result};

/// `cuMemHostAlloc` flags (cuda.h `CU_MEMHOSTALLOC_*`; values checked against
/// the cuda-python `MemHostAllocFlags` page: PORTABLE 1, DEVICEMAP 2,
/// WRITECOMBINED 4).
pub const CU_MEMHOSTALLOC_PORTABLE: c_uint = 1;
pub const CU_MEMHOSTALLOC_DEVICEMAP: c_uint = 2;
pub const CU_MEMHOSTALLOC_WRITECOMBINED: c_uint = 4;
/// `CUDA_SUCCESS` (CUresult 0; cuda-python `Result` page and numba
/// `cudadrv/enums.py`).
const CUDA_SUCCESS: i32 = 0;
/// `CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY` = 19 (cuda.h CUdevice_attribute).
pub const CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: c_int = 19;
/// `CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS` = 122: the attribute of
/// the v2 memory operations we call (cuda.h 12.x, as mirrored in
/// jcuda/jcuda `JCudaJava/src/main/java/jcuda/driver/CUdevice_attribute.java`:
/// "64-bit operations are supported in ::cuStreamBatchMemOp_v2 and related v2
/// MemOp APIs"). 93 is the legacy `_V1` attribute, which we do not use.
pub const CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS: c_int = 122;
/// `CU_STREAM_WRITE_VALUE_DEFAULT` = 0: the write is preceded by a memory
/// fence "similar to __threadfence_system() but scoped to the stream" (design
/// [D4]); that fence is what orders the payload copy before `seq`.
const CU_STREAM_WRITE_VALUE_DEFAULT: c_uint = 0;

type Handle = *mut c_void;

/// A `&'static CStr` from a literal (C string literals need Rust 1.77; the
/// workspace's MSRV is 1.75).
macro_rules! cs {
    ($s:literal) => {
        match CStr::from_bytes_with_nul(concat!($s, "\0").as_bytes()) {
            Ok(c) => c,
            Err(_) => unreachable!(),
        }
    };
}
type CuResult = i32;

// The C signatures of the driver functions we call (driver API reference).
type CtxSetCurrent = unsafe extern "C" fn(Handle) -> CuResult;
type CtxGetCurrent = unsafe extern "C" fn(*mut Handle) -> CuResult;
type CtxGetDevice = unsafe extern "C" fn(*mut c_int) -> CuResult;
type DeviceGetAttribute = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> CuResult;
type MemHostAlloc = unsafe extern "C" fn(*mut *mut c_void, usize, c_uint) -> CuResult;
type MemFreeHost = unsafe extern "C" fn(*mut c_void) -> CuResult;
type MemHostGetDevicePointer = unsafe extern "C" fn(*mut u64, *mut c_void, c_uint) -> CuResult;
type MemcpyHtoDAsync = unsafe extern "C" fn(u64, *const c_void, usize, Handle) -> CuResult;
/// f, grid x/y/z, block x/y/z, shared bytes, stream, kernel params, extra.
type LaunchKernel = unsafe extern "C" fn(
    Handle,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    Handle,
    *mut *mut c_void,
    *mut *mut c_void,
) -> CuResult;
type StreamSync = unsafe extern "C" fn(Handle) -> CuResult;
type StreamWriteValue64 = unsafe extern "C" fn(Handle, u64, u64, c_uint) -> CuResult;
type GetErrorString = unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult;

/// The driver functions we call, resolved once with `dlsym`.
struct Fns {
    ctx_set_current: CtxSetCurrent,
    ctx_get_current: CtxGetCurrent,
    ctx_get_device: CtxGetDevice,
    device_get_attribute: DeviceGetAttribute,
    mem_host_alloc: MemHostAlloc,
    mem_free_host: MemFreeHost,
    mem_host_get_device_pointer: MemHostGetDevicePointer,
    memcpy_htod_async: MemcpyHtoDAsync,
    launch_kernel: LaunchKernel,
    stream_synchronize: StreamSync,
    /// Absent on drivers older than the v2 memory operations.
    stream_write_value64: Option<StreamWriteValue64>,
    get_error_string: GetErrorString,
}

/// The CUDA driver table. Loaded once per session; never `dlclose`d, because
/// the library is CuPy's too and unloading it under a live context would be
/// fatal (a leaked reference on a loaded library costs nothing).
pub struct CudaDriver {
    fns: Fns,
}

// SAFETY: the table holds only function pointers into libcuda, whose driver
// API is thread safe; it has no interior state.
unsafe impl Send for CudaDriver {}
// SAFETY: as above; `&CudaDriver` only calls those functions.
unsafe impl Sync for CudaDriver {}

fn dl_error() -> String {
    // SAFETY: dlerror returns null or a NUL-terminated thread-local string.
    let msg = unsafe { libc::dlerror() };
    if msg.is_null() {
        "unknown dlopen error".into()
    } else {
        // SAFETY: non-null, NUL-terminated (above); copied before the next dl call.
        unsafe { CStr::from_ptr(msg) }
            .to_string_lossy()
            .into_owned()
    }
}

/// Resolves `name` in `lib`; `None` when absent.
fn symbol(lib: *mut c_void, name: &CStr) -> Option<*mut c_void> {
    // SAFETY: `lib` is a live dlopen handle and `name` a C string.
    let p = unsafe { libc::dlsym(lib, name.as_ptr()) };
    (!p.is_null()).then_some(p)
}

macro_rules! required {
    ($lib:expr, $name:expr, $ty:ty) => {{
        let p = symbol($lib, $name).ok_or_else(|| {
            Error::io(
                format!(
                    "libcuda.so.1 has no {} (driver too old for the latency mode)",
                    $name.to_string_lossy()
                ),
                io::Error::from(io::ErrorKind::NotFound),
            )
        })?;
        // SAFETY: the symbol is the driver function of that name, whose C
        // signature is the field's type (driver API reference); a function
        // pointer has the size of a data pointer on Linux.
        unsafe { std::mem::transmute::<*mut c_void, $ty>(p) }
    }};
}

impl CudaDriver {
    /// Opens `libcuda.so.1`: the copy already in the process (CuPy's) if any,
    /// else loads it. A machine without the NVIDIA driver gets a clear error.
    pub fn load() -> Result<Arc<Self>> {
        Self::load_named(cs!("libcuda.so.1"))
    }

    /// As [`CudaDriver::load`] from another file name (tests).
    pub fn load_named(name: &CStr) -> Result<Arc<Self>> {
        // SAFETY: `name` is a C string; RTLD_NOLOAD only looks the library up.
        let mut lib = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        if lib.is_null() {
            // SAFETY: as above; this may load the library (running its constructors).
            lib = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW) };
        }
        if lib.is_null() {
            return Err(Error::io(
                format!(
                    "the latency mode needs the NVIDIA driver ({}), which could not be loaded; \
                     install the driver or run on a GPU machine",
                    name.to_string_lossy()
                ),
                io::Error::new(io::ErrorKind::NotFound, dl_error()),
            ));
        }
        let write64 = symbol(lib, cs!("cuStreamWriteValue64_v2")).map(|p| {
            // SAFETY: cuStreamWriteValue64_v2(CUstream, CUdeviceptr, cuuint64_t,
            // unsigned int) -> CUresult, the field's type.
            unsafe { std::mem::transmute::<*mut c_void, StreamWriteValue64>(p) }
        });
        let fns = Fns {
            ctx_set_current: required!(lib, cs!("cuCtxSetCurrent"), CtxSetCurrent),
            ctx_get_current: required!(lib, cs!("cuCtxGetCurrent"), CtxGetCurrent),
            ctx_get_device: required!(lib, cs!("cuCtxGetDevice"), CtxGetDevice),
            device_get_attribute: required!(lib, cs!("cuDeviceGetAttribute"), DeviceGetAttribute),
            mem_host_alloc: required!(lib, cs!("cuMemHostAlloc"), MemHostAlloc),
            mem_free_host: required!(lib, cs!("cuMemFreeHost"), MemFreeHost),
            mem_host_get_device_pointer: required!(
                lib,
                cs!("cuMemHostGetDevicePointer_v2"),
                MemHostGetDevicePointer
            ),
            memcpy_htod_async: required!(lib, cs!("cuMemcpyHtoDAsync_v2"), MemcpyHtoDAsync),
            launch_kernel: required!(lib, cs!("cuLaunchKernel"), LaunchKernel),
            stream_synchronize: required!(lib, cs!("cuStreamSynchronize"), StreamSync),
            stream_write_value64: write64,
            get_error_string: required!(lib, cs!("cuGetErrorString"), GetErrorString),
        };
        Ok(Arc::new(CudaDriver { fns }))
    }

    /// The driver's text for `code`.
    pub fn error_string(&self, code: i32) -> String {
        let mut text: *const c_char = ptr::null();
        // SAFETY: `text` is a valid out-pointer; the driver stores a static string.
        let r = unsafe { (self.fns.get_error_string)(code, &mut text) };
        if r != CUDA_SUCCESS || text.is_null() {
            return "unknown CUDA error".into();
        }
        // SAFETY: non-null static NUL-terminated string owned by the driver.
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned()
    }

    /// `cuMemHostAlloc` of `len` bytes with `flags`, then its device pointer.
    fn host_alloc(&self, len: usize, flags: c_uint) -> Result<(NonNull<u8>, u64)> {
        let mut raw: *mut c_void = ptr::null_mut();
        // SAFETY: valid out-pointer; the driver allocates `len` bytes.
        let r = unsafe { (self.fns.mem_host_alloc)(&mut raw, len, flags) };
        self.check("cuMemHostAlloc", r)?;
        let ptr = NonNull::new(raw as *mut u8).ok_or_else(|| {
            Error::io(
                "cuMemHostAlloc",
                io::Error::other("returned a null pointer"),
            )
        })?;
        let mut dev = 0u64;
        // SAFETY: valid out-pointer; `raw` is a DEVICEMAP allocation; flags must be 0.
        let r = unsafe { (self.fns.mem_host_get_device_pointer)(&mut dev, raw, 0) };
        if let Err(e) = self.check("cuMemHostGetDevicePointer_v2", r) {
            // SAFETY: allocated just above, not yet shared.
            unsafe { self.host_free(ptr) };
            return Err(e);
        }
        Ok((ptr, dev))
    }

    /// `cuMemFreeHost`; an error cannot be reported from a drop and leaks at worst.
    ///
    /// # Safety
    /// `ptr` came from [`CudaDriver::host_alloc`] and is freed once.
    unsafe fn host_free(&self, ptr: NonNull<u8>) {
        // SAFETY: the caller's contract.
        unsafe { (self.fns.mem_free_host)(ptr.as_ptr() as *mut c_void) };
    }

    /// `Ok` on CUDA_SUCCESS, else an error naming `call`, the code and its text.
    fn check(&self, call: &str, code: i32) -> Result<()> {
        if code == CUDA_SUCCESS {
            return Ok(());
        }
        Err(Error::io(
            format!("{call} failed"),
            io::Error::other(format!("CUresult {code}: {}", self.error_string(code))),
        ))
    }
}

#[path = "gpu_memory.rs"]
mod memory;
pub use memory::HostMemory;

/// Arguments of `latency_sum_frame` (contract, "Kernels") and its launch shape.
#[derive(Debug, Clone, Copy)]
pub struct SumFrameLaunch {
    pub slot: u64,
    pub frame_bytes: u32,
    pub seq: u64,
    pub frame: u64,
    pub kind: u32,
    pub acks: u64,
    pub nslots: u32,
    pub accum: u64,
    pub check_pattern: u32,
    pub blocks: u32,
    pub threads: u32,
}

/// The GPU operations the hand-off needs, all on one copy stream: the real
/// driver ([`CudaOps`]) or the host stand-in (`standin::HostGpu`).
pub trait GpuOps: Send {
    /// Host memory the GPU can read and write (`device_ptr` valid on the GPU).
    fn alloc_host(&self, bytes: usize, write_combined: bool) -> Result<HostMemory>;
    /// Makes the session's context current on the calling thread.
    fn bind_thread(&self) -> Result<()>;
    /// Queues a copy of `bytes` from host `src` to device `dst`.
    ///
    /// # Safety
    /// `src` must stay valid and unchanged until the copy has run (the
    /// hand-off reuses a slot only after its ack); `dst..dst+bytes` must be
    /// device memory of the session.
    unsafe fn copy_to_device_async(&self, dst: u64, src: *const u8, bytes: usize) -> Result<()>;
    /// Queues `*dst = value` (8 bytes) after the work already queued, with a
    /// system-scope fence before it.
    ///
    /// # Safety
    /// `dst` must be 8-byte aligned device (or mapped) memory of the session.
    unsafe fn write_value64(&self, dst: u64, value: u64) -> Result<()>;
    /// Queues `latency_sum_frame`.
    ///
    /// # Safety
    /// Every pointer in `launch` must be session memory of the sizes the
    /// contract gives.
    unsafe fn launch_sum_frame(&self, launch: &SumFrameLaunch) -> Result<()>;
    /// Waits until the copy stream is idle.
    fn synchronize(&self) -> Result<()>;
    /// Whether [`GpuOps::write_value64`] works here (mode persistent-flag).
    fn supports_write_value64(&self) -> bool;
}

#[path = "gpu_cuda.rs"]
mod cuda;
pub use cuda::CudaOps;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_driver_missing_gives_a_clear_error() {
        // CI has no NVIDIA driver: load() must fail with the clear message,
        // not panic. Where a driver is installed, a missing file name checks
        // the same path.
        let err = match CudaDriver::load() {
            Err(e) => e,
            Ok(_) => CudaDriver::load_named(cs!("libcuda-missing.so.1"))
                .err()
                .expect("no such library"),
        };
        let text = err.to_string();
        assert!(
            text.contains("the latency mode needs the NVIDIA driver"),
            "{text}"
        );
    }

    #[test]
    fn latency_heap_memory_is_zeroed_and_aligned() {
        let m = HostMemory::heap(10_000).unwrap();
        assert_eq!(m.host_ptr() as usize % 4096, 0);
        assert_eq!(m.device_ptr(), m.host_ptr() as u64);
        // SAFETY: 10 000 bytes owned by `m`.
        let bytes = unsafe { std::slice::from_raw_parts(m.host_ptr(), m.len()) };
        assert!(bytes.iter().all(|&b| b == 0));
    }
}

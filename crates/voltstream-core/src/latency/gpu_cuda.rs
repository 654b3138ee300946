//! [`CudaOps`]: [`GpuOps`] over the real driver (see [`super`]).

use std::ffi::{c_int, c_void};
use std::ptr;
use std::sync::Arc;

use super::*;

/// [`GpuOps`] over the real driver, with handles Python passes as integers.
pub struct CudaOps {
    driver: Arc<CudaDriver>,
    context: Handle,
    sum_frame: Handle,
    stream: Handle,
    write64: bool,
}

// SAFETY: the handles are opaque driver objects usable from any thread once
// the context is bound there (`bind_thread`); the driver API is thread safe.
unsafe impl Send for CudaOps {}

impl CudaOps {
    /// Binds `context` on the calling thread and checks that the device can
    /// map host memory. `sum_frame` may be 0 when mode copy is not used.
    ///
    /// # Safety
    /// `context` (a `CUcontext`, e.g. CuPy's primary context), `sum_frame`
    /// (the `CUfunction` of `latency_sum_frame`) and `stream` (a non-blocking
    /// `CUstream`) must be valid and stay alive until this value is dropped.
    pub unsafe fn new(
        driver: Arc<CudaDriver>,
        context: usize,
        sum_frame: usize,
        stream: usize,
    ) -> Result<Self> {
        if context == 0 || stream == 0 {
            return Err(Error::Config(
                "the latency session needs a CUDA context and a stream handle".into(),
            ));
        }
        let mut ops = CudaOps {
            driver,
            context: context as Handle,
            sum_frame: sum_frame as Handle,
            stream: stream as Handle,
            write64: false,
        };
        ops.bind_thread()?;
        let mut device: c_int = 0;
        // SAFETY: valid out-pointer; a context is current (bound above).
        let r = unsafe { (ops.driver.fns.ctx_get_device)(&mut device) };
        ops.driver.check("cuCtxGetDevice", r)?;
        if ops.attribute(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, device)? == 0 {
            return Err(Error::Config(
                "this GPU cannot map host memory (CAN_MAP_HOST_MEMORY = 0)".into(),
            ));
        }
        ops.write64 = ops.driver.fns.stream_write_value64.is_some()
            && ops.attribute(CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, device)? != 0;
        Ok(ops)
    }

    fn attribute(&self, attribute: c_int, device: c_int) -> Result<c_int> {
        let mut value: c_int = 0;
        // SAFETY: valid out-pointer; `device` came from cuCtxGetDevice.
        let r = unsafe { (self.driver.fns.device_get_attribute)(&mut value, attribute, device) };
        self.driver.check("cuDeviceGetAttribute", r)?;
        Ok(value)
    }
}

impl GpuOps for CudaOps {
    fn alloc_host(&self, bytes: usize, write_combined: bool) -> Result<HostMemory> {
        HostMemory::pinned(self.driver.clone(), bytes, write_combined)
    }

    fn bind_thread(&self) -> Result<()> {
        let mut current: Handle = ptr::null_mut();
        // SAFETY: valid out-pointer.
        let r = unsafe { (self.driver.fns.ctx_get_current)(&mut current) };
        self.driver.check("cuCtxGetCurrent", r)?;
        if current == self.context {
            return Ok(());
        }
        // SAFETY: `context` is valid (constructor contract).
        let r = unsafe { (self.driver.fns.ctx_set_current)(self.context) };
        self.driver.check("cuCtxSetCurrent", r)
    }

    unsafe fn copy_to_device_async(&self, dst: u64, src: *const u8, bytes: usize) -> Result<()> {
        // SAFETY: the caller guarantees `src` and `dst` (trait contract).
        let r = unsafe {
            (self.driver.fns.memcpy_htod_async)(dst, src as *const c_void, bytes, self.stream)
        };
        self.driver.check("cuMemcpyHtoDAsync_v2", r)
    }

    unsafe fn write_value64(&self, dst: u64, value: u64) -> Result<()> {
        let Some(write) = self
            .driver
            .fns
            .stream_write_value64
            .filter(|_| self.write64)
        else {
            return Err(Error::Config(
                "cuStreamWriteValue64 is not supported here (mode persistent-flag needs it)".into(),
            ));
        };
        // SAFETY: the caller guarantees `dst`; the stream is valid.
        let r = unsafe { write(self.stream, dst, value, CU_STREAM_WRITE_VALUE_DEFAULT) };
        self.driver.check("cuStreamWriteValue64_v2", r)
    }

    unsafe fn launch_sum_frame(&self, l: &SumFrameLaunch) -> Result<()> {
        if self.sum_frame.is_null() {
            return Err(Error::Config(
                "mode copy needs the latency_sum_frame kernel handle".into(),
            ));
        }
        // Parameter values, in the kernel's order; cuLaunchKernel reads each
        // through the pointer array (pointers are passed as 8-byte values).
        let (mut slot, mut frame_bytes, mut seq, mut frame) =
            (l.slot, l.frame_bytes, l.seq, l.frame);
        let (mut kind, mut acks, mut nslots, mut accum, mut check) =
            (l.kind, l.acks, l.nslots, l.accum, l.check_pattern);
        let mut params: [*mut c_void; 9] = [
            &mut slot as *mut u64 as *mut c_void,
            &mut frame_bytes as *mut u32 as *mut c_void,
            &mut seq as *mut u64 as *mut c_void,
            &mut frame as *mut u64 as *mut c_void,
            &mut kind as *mut u32 as *mut c_void,
            &mut acks as *mut u64 as *mut c_void,
            &mut nslots as *mut u32 as *mut c_void,
            &mut accum as *mut u64 as *mut c_void,
            &mut check as *mut u32 as *mut c_void,
        ];
        // SAFETY: `params` points at 9 live values matching the kernel's
        // signature; the driver copies them before returning; handles valid.
        let r = unsafe {
            (self.driver.fns.launch_kernel)(
                self.sum_frame,
                l.blocks,
                1,
                1,
                l.threads,
                1,
                1,
                0,
                self.stream,
                params.as_mut_ptr(),
                ptr::null_mut(),
            )
        };
        self.driver.check("cuLaunchKernel(latency_sum_frame)", r)
    }

    fn synchronize(&self) -> Result<()> {
        // SAFETY: `stream` is valid (constructor contract).
        let r = unsafe { (self.driver.fns.stream_synchronize)(self.stream) };
        self.driver.check("cuStreamSynchronize", r)
    }

    fn supports_write_value64(&self) -> bool {
        self.write64
    }
}

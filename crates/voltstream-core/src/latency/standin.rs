//! A host stand-in for the GPU, so the hand-off protocol runs in CI (no GPU):
//! [`HostGpu`] implements [`GpuOps`] over ordinary memory. Its "device
//! memory" (device slots and accumulators) is a buffer it owns; device
//! pointers are host addresses. Copies run at once on the caller's thread,
//! `latency_sum_frame` is computed at launch, and `latency_persistent` is a
//! thread that does what the kernel does: poll `trailer.seq` of slot
//! `next % N` with an Acquire load until it equals `next`, sum, ack (fields,
//! then `seq` with a Release store), stop on kind 3 or abort.
//!
//! Every access to memory the other side may touch concurrently is atomic
//! (payload words Relaxed, `seq` words Release/Acquire), so even the broken
//! variant used to prove the checks ([`StandinOptions::seq_before_payload`])
//! is defined behaviour.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::gpu::{GpuOps, HostMemory, SumFrameLaunch};
use super::handoff::{DeviceBuffers, Handoff, HandoffConfig, Mode};
use super::layout::*;
use crate::{Error, Result};

/// How the stand-in behaves.
#[derive(Debug, Clone, Copy)]
pub struct StandinOptions {
    /// The persistent stand-in sleeps this long before each frame (a slow GPU).
    pub frame_delay: Duration,
    /// Broken on purpose: a copy that covers `trailer.seq` stores `seq` first
    /// and the payload only once the kernel has acknowledged it. The sums and
    /// the pattern check must catch it.
    pub seq_before_payload: bool,
    /// The persistent stand-in returns (status 4) after this long without a
    /// frame, so no test can hang; zero = no limit.
    pub idle_limit: Duration,
}

impl Default for StandinOptions {
    fn default() -> Self {
        StandinOptions {
            frame_delay: Duration::ZERO,
            seq_before_payload: false,
            idle_limit: Duration::from_secs(10),
        }
    }
}

/// Why the persistent stand-in returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelExit {
    /// Acknowledged a stop frame.
    Stopped,
    /// Saw `control.abort`.
    Aborted,
    /// Idle limit passed.
    Idle,
    /// The stand-in was dropped.
    Quit,
}

/// Arguments of `latency_persistent` (contract, "Kernels").
#[derive(Debug, Clone, Copy)]
pub struct PersistentParams {
    pub slots: u64,
    pub slot_stride: u64,
    pub payload_cap: u32,
    pub nslots: u32,
    pub acks: u64,
    pub control: u64,
    pub check_pattern: bool,
}

pub(crate) struct Shared {
    pub(crate) paused: AtomicBool,
    pub(crate) quit: AtomicBool,
    /// The ack ring of the running persistent stand-in (0 = none).
    pub(crate) acks: AtomicU64,
    pub(crate) nslots: AtomicU64,
}

/// The host stand-in for the GPU.
pub struct HostGpu {
    device: HostMemory,
    slots_bytes: usize,
    stride: usize,
    cap: usize,
    opts: StandinOptions,
    shared: Arc<Shared>,
    kernel: Mutex<Option<JoinHandle<KernelExit>>>,
}

impl HostGpu {
    /// A stand-in with device slots and accumulators for `config`.
    pub fn new(config: &HandoffConfig, opts: StandinOptions) -> Result<Self> {
        let stride = slot_stride(config.frame_bytes);
        let slots_bytes = config.slots * stride;
        Ok(HostGpu {
            device: HostMemory::heap(slots_bytes + config.slots * ACCUM_BYTES)?,
            slots_bytes,
            stride,
            cap: payload_cap(config.frame_bytes),
            opts,
            shared: Arc::new(Shared {
                paused: AtomicBool::new(false),
                quit: AtomicBool::new(false),
                acks: AtomicU64::new(0),
                nslots: AtomicU64::new(config.slots as u64),
            }),
            kernel: Mutex::new(None),
        })
    }

    /// "Device" slots (what CuPy allocates on a GPU).
    pub fn device_slots(&self) -> u64 {
        self.device.device_ptr()
    }

    /// "Device" accumulators (unused by the stand-in, given for the shape).
    pub fn accum(&self) -> u64 {
        self.device.device_ptr() + self.slots_bytes as u64
    }

    /// While paused, the persistent stand-in takes no new frame.
    pub fn set_paused(&self, paused: bool) {
        self.shared.paused.store(paused, Ordering::Release);
    }

    /// Starts the persistent stand-in.
    ///
    /// # Safety
    /// The memory `p` names must stay valid until the stand-in has returned
    /// (it is joined by [`HostGpu::join_kernel`] or when `self` is dropped).
    pub unsafe fn launch_persistent(&self, p: PersistentParams) -> Result<()> {
        let mut kernel = self
            .kernel
            .lock()
            .map_err(|_| Error::Config("stand-in lock poisoned".into()))?;
        if kernel.is_some() {
            return Err(Error::Config(
                "a persistent stand-in is already running".into(),
            ));
        }
        self.shared.acks.store(p.acks, Ordering::Release);
        self.shared
            .nslots
            .store(u64::from(p.nslots), Ordering::Release);
        let (shared, opts) = (self.shared.clone(), self.opts);
        let spawned = std::thread::Builder::new()
            .name("latency-standin".into())
            .spawn(move || persistent(p, &shared, opts))
            .map_err(|e| Error::io("starting the persistent stand-in", e))?;
        *kernel = Some(spawned);
        Ok(())
    }

    /// Waits up to `timeout` for the persistent stand-in to return.
    pub fn join_kernel(&self, timeout: Duration) -> Result<KernelExit> {
        let deadline = Instant::now() + timeout;
        let mut kernel = self
            .kernel
            .lock()
            .map_err(|_| Error::Config("stand-in lock poisoned".into()))?;
        let Some(handle) = kernel.take() else {
            return Err(Error::Config("no persistent stand-in is running".into()));
        };
        while !handle.is_finished() {
            if Instant::now() > deadline {
                *kernel = Some(handle);
                return Err(Error::Config(format!(
                    "the persistent stand-in did not return within {timeout:?}"
                )));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        handle
            .join()
            .map_err(|_| Error::Config("the persistent stand-in panicked".into()))
    }

    /// Checks that `[addr, addr + bytes)` lies in the stand-in's device memory.
    fn check_device(&self, addr: u64, bytes: usize) -> Result<()> {
        let base = self.device.device_ptr();
        let end = base + self.device.len() as u64;
        if addr < base || addr.checked_add(bytes as u64).map_or(true, |e| e > end) {
            return Err(Error::Config(format!(
                "stand-in access of {bytes} bytes at {addr:#x} is outside device memory"
            )));
        }
        Ok(())
    }

    /// Waits (bounded) until the running stand-in acknowledged `seq`.
    fn wait_ack(&self, seq: u64) {
        let acks = self.shared.acks.load(Ordering::Acquire);
        let n = self.shared.nslots.load(Ordering::Acquire).max(1);
        if acks == 0 {
            return;
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        // SAFETY: the ack ring outlives the stand-in (launch_persistent contract).
        let word = unsafe { atomic_u64((acks + (seq % n) * ACK_BYTES as u64) as *mut u8) };
        while word.load(Ordering::Acquire) != seq && Instant::now() < deadline {
            std::thread::yield_now();
        }
    }
}

impl Drop for HostGpu {
    fn drop(&mut self) {
        // The stand-in reads memory this value (and the hand-off) owns: make it
        // return and wait for it before anything is freed. It checks `quit` on
        // every poll and while delaying, so this join is short.
        self.shared.quit.store(true, Ordering::Release);
        if let Some(handle) = self.kernel.get_mut().ok().and_then(Option::take) {
            let _ = handle.join();
        }
    }
}

#[path = "standin_kernel.rs"]
mod kernel;
use kernel::{device_sums, persistent, store_bytes, write_ack};

impl GpuOps for HostGpu {
    fn alloc_host(&self, bytes: usize, _write_combined: bool) -> Result<HostMemory> {
        HostMemory::heap(bytes)
    }

    fn bind_thread(&self) -> Result<()> {
        Ok(())
    }

    unsafe fn copy_to_device_async(&self, dst: u64, src: *const u8, bytes: usize) -> Result<()> {
        self.check_device(dst, bytes)?;
        if dst % 8 != 0 {
            return Err(Error::Config("stand-in copies start 8-byte aligned".into()));
        }
        // The seq word of the slot this copy lands in, if the copy covers it.
        let base = self.device.device_ptr();
        let slot = (dst - base) / self.stride as u64;
        let seq_at = base + slot * self.stride as u64 + (self.cap + TRAILER_SEQ) as u64;
        let covers = dst - base < self.slots_bytes as u64
            && seq_at >= dst
            && seq_at + 8 <= dst + bytes as u64;
        let skip = covers.then_some(seq_at);
        // SAFETY: ranges checked above (dst) and guaranteed by the caller (src).
        unsafe {
            let seq_value = covers
                .then(|| std::ptr::read_unaligned(src.add((seq_at - dst) as usize) as *const u64));
            if let (Some(value), true) = (seq_value, self.opts.seq_before_payload) {
                // Trailer, then `seq`, then (once acknowledged) the payload.
                let trailer = (seq_at - TRAILER_SEQ as u64).max(dst);
                let head = (trailer - dst) as usize;
                store_bytes(trailer, src.add(head), bytes - head, skip);
                atomic_u64(seq_at as *mut u8).store(value, Ordering::Release);
                self.wait_ack(value);
                store_bytes(dst, src, head, None);
            } else {
                // An ordered DMA: everything, then `seq` last.
                store_bytes(dst, src, bytes, skip);
                if let Some(value) = seq_value {
                    atomic_u64(seq_at as *mut u8).store(value, Ordering::Release);
                }
            }
        }
        Ok(())
    }

    unsafe fn write_value64(&self, dst: u64, value: u64) -> Result<()> {
        self.check_device(dst, 8)?;
        // SAFETY: in device memory (checked); 8-aligned by the caller's contract.
        unsafe { atomic_u64(dst as *mut u8) }.store(value, Ordering::Release);
        Ok(())
    }

    unsafe fn launch_sum_frame(&self, l: &SumFrameLaunch) -> Result<()> {
        self.check_device(l.slot, l.frame_bytes as usize)?;
        // SAFETY: the slot is device memory (checked); the acks are the
        // caller's ring of `nslots` entries (trait contract).
        unsafe {
            let sums = device_sums(
                l.slot,
                l.frame_bytes as usize,
                l.frame,
                l.check_pattern != 0,
            );
            write_ack(l.acks, u64::from(l.nslots.max(1)), l.seq, sums, STATUS_OK);
        }
        Ok(())
    }

    fn synchronize(&self) -> Result<()> {
        Ok(())
    }

    fn supports_write_value64(&self) -> bool {
        true
    }
}

impl Handoff<HostGpu> {
    /// A hand-off over the host stand-in, its persistent stand-in started for
    /// the persistent modes: what Python's CI tests use (device pointers 0).
    pub fn standin(
        config: HandoffConfig,
        opts: StandinOptions,
        record_capacity: usize,
    ) -> Result<Self> {
        config.validate()?;
        let gpu = HostGpu::new(&config, opts)?;
        let device = DeviceBuffers {
            slots: gpu.device_slots(),
            accum: gpu.accum(),
        };
        let handoff = Handoff::new(gpu, config, device, record_capacity)?;
        if config.mode.persistent() {
            let slots = if config.mode == Mode::ZeroCopy {
                handoff.mapped_slots_device_ptr()
            } else {
                device.slots
            };
            let params = PersistentParams {
                slots,
                slot_stride: handoff.slot_stride() as u64,
                payload_cap: handoff.payload_cap() as u32,
                nslots: config.slots as u32,
                acks: handoff.acks_device_ptr(),
                control: handoff.control_device_ptr(),
                check_pattern: config.check_pattern,
            };
            // SAFETY: all of that memory belongs to `handoff` or its stand-in;
            // the hand-off drops (and so joins) the stand-in before its memory.
            unsafe { handoff.gpu().launch_persistent(params)? };
        }
        Ok(handoff)
    }
}

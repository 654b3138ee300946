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

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
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

struct Shared {
    paused: AtomicBool,
    quit: AtomicBool,
    /// The ack ring of the running persistent stand-in (0 = none).
    acks: AtomicU64,
    nslots: AtomicU64,
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

/// Copies `bytes` from `src` to `dst` with Relaxed atomic stores, skipping the
/// 8 bytes at `skip` (a `seq` word, stored separately).
///
/// # Safety
/// `src` valid for reads and `dst` for writes of `bytes`; `dst` 8-aligned.
unsafe fn store_bytes(dst: u64, src: *const u8, bytes: usize, skip: Option<u64>) {
    let words = bytes / 8;
    for j in 0..words {
        let at = dst + 8 * j as u64;
        if Some(at) == skip {
            continue;
        }
        // SAFETY: within both ranges (caller); unaligned read of the source.
        unsafe {
            let v = std::ptr::read_unaligned(src.add(8 * j) as *const u64);
            atomic_u64(at as *mut u8).store(v, Ordering::Relaxed);
        }
    }
    for k in 8 * words..bytes {
        // SAFETY: within both ranges (caller); AtomicU8 has no alignment need.
        unsafe { (*(dst as *mut AtomicU8).add(k)).store(*src.add(k), Ordering::Relaxed) };
    }
}

/// Sum, sum of squares and torn words of `bytes` payload bytes at `slot`.
///
/// # Safety
/// `slot` 8-aligned and valid for reads of `bytes`; concurrent writers atomic.
unsafe fn device_sums(slot: u64, bytes: usize, frame: u64, check_pattern: bool) -> (u64, u64, u32) {
    let (mut sum, mut sumsq, mut torn) = (0u64, 0u64, 0u32);
    let mut add = |b: u8| {
        sum += u64::from(b);
        sumsq += u64::from(b) * u64::from(b);
    };
    for j in 0..bytes / 8 {
        // SAFETY: within the payload (caller).
        let w = unsafe { atomic_u64((slot + 8 * j as u64) as *mut u8) }.load(Ordering::Relaxed);
        w.to_le_bytes().into_iter().for_each(&mut add);
        if check_pattern && u64::from_le(w) != pattern_word(frame, j as u64) {
            torn += 1;
        }
    }
    for k in 8 * (bytes / 8)..bytes {
        // SAFETY: within the payload (caller).
        add(unsafe { (*(slot as *const AtomicU8).add(k)).load(Ordering::Relaxed) });
    }
    (sum, sumsq, torn)
}

/// Writes an ack: the fields, then `seq` with a Release store (the kernel's
/// `__threadfence_system(); st.release.sys`).
///
/// # Safety
/// `acks` is a ring of `nslots` entries valid for writes.
unsafe fn write_ack(acks: u64, nslots: u64, seq: u64, sums: (u64, u64, u32), status: u32) {
    let a = (acks + (seq % nslots) * ACK_BYTES as u64) as *mut u8;
    // SAFETY: entry `seq % nslots` of the ring (caller); aligned fields.
    unsafe {
        atomic_u64(a.add(ACK_SUM)).store(sums.0, Ordering::Relaxed);
        atomic_u64(a.add(ACK_SUMSQ)).store(sums.1, Ordering::Relaxed);
        atomic_u32(a.add(ACK_STATUS)).store(status, Ordering::Relaxed);
        atomic_u32(a.add(ACK_TORN)).store(sums.2, Ordering::Relaxed);
        atomic_u64(a.add(ACK_T_GPU)).store(monotonic_ns(), Ordering::Relaxed);
        atomic_u64(a.add(ACK_SEQ)).store(seq, Ordering::Release);
    }
}

/// The persistent stand-in's loop (see the module docs).
fn persistent(p: PersistentParams, shared: &Shared, opts: StandinOptions) -> KernelExit {
    let n = u64::from(p.nslots.max(1));
    let cap = p.payload_cap as usize;
    let (mut next, mut empty, mut last_frame) = (1u64, 0u64, Instant::now());
    // The slots, acks and control block stay valid until this thread
    // returns (launch_persistent contract): "see above" below refers to this.
    // SAFETY: see above; `abort` is 4-aligned and only accessed atomically.
    let abort = unsafe { atomic_u32(p.control as *mut u8) };
    loop {
        let slot = p.slots + (next % n) * p.slot_stride;
        let trailer = (slot + cap as u64) as *mut u8;
        // SAFETY: see above.
        let seq = unsafe { atomic_u64(trailer.add(TRAILER_SEQ)) };
        if !shared.paused.load(Ordering::Acquire) && seq.load(Ordering::Acquire) == next {
            let delay_end = Instant::now() + opts.frame_delay;
            while Instant::now() < delay_end && !shared.quit.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_micros(100));
            }
            // SAFETY: see above; the trailer was published before `seq`.
            let (kind, bytes, frame) = unsafe {
                (
                    atomic_u32(trailer.add(TRAILER_KIND)).load(Ordering::Relaxed),
                    atomic_u32(trailer.add(TRAILER_BYTES_FIELD)).load(Ordering::Relaxed) as usize,
                    atomic_u64(trailer.add(TRAILER_FRAME)).load(Ordering::Relaxed),
                )
            };
            match kind {
                // SAFETY: see above.
                3 => unsafe { write_ack(p.acks, n, next, (0, 0, 0), STATUS_STOPPED) },
                // SAFETY: see above.
                2 => unsafe { write_ack(p.acks, n, next, (0, 0, 0), STATUS_SKIPPED) },
                // SAFETY: see above; `bytes` is bounded by the payload area.
                _ => unsafe {
                    let sums = device_sums(slot, bytes.min(cap), frame, p.check_pattern);
                    write_ack(p.acks, n, next, sums, STATUS_OK);
                },
            }
            if kind == 3 {
                return KernelExit::Stopped;
            }
            next += 1;
            empty = 0;
            last_frame = Instant::now();
            continue;
        }
        if shared.quit.load(Ordering::Acquire) {
            return KernelExit::Quit;
        }
        empty += 1;
        if empty % 1024 == 0 {
            let idle = !opts.idle_limit.is_zero() && last_frame.elapsed() > opts.idle_limit;
            if abort.load(Ordering::Acquire) != 0 || idle {
                // SAFETY: see above.
                unsafe { write_ack(p.acks, n, next, (0, 0, 0), STATUS_ABORTED) };
                return if idle {
                    KernelExit::Idle
                } else {
                    KernelExit::Aborted
                };
            }
            // A CI machine shares its cores: let others run.
            std::thread::yield_now();
        }
        std::hint::spin_loop();
    }
}

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

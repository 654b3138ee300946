//! The hand-off of assembled frames to the GPU (design §2), as a
//! [`FrameSink`], and the acknowledgement protocol.
//!
//! Modes: `copy` (async copy, launch `latency_sum_frame`, synchronise),
//! `persistent` (one async copy of payload + trailer to a persistent kernel),
//! `persistent-flag` (copy without `seq`, then `cuStreamWriteValue64(seq)`),
//! `zerocopy` (the assembler writes straight into GPU-mapped slots; `seq` is
//! published with a Release store). The host accepts an ack only when its
//! `seq` equals the expected one, then compares the GPU's sums with its own.
//!
//! What Python passes, and who frees what:
//! - [`gpu::CudaOps::new`](super::gpu::CudaOps::new): the `CUcontext` (CuPy's
//!   primary context), the `CUfunction` of `latency_sum_frame` (0 unless mode
//!   copy) and a non-blocking copy stream, as integers. Persistent kernels run
//!   on another non-blocking stream Python owns.
//! - [`Handoff::new`]: [`DeviceBuffers`]: device slots (`slots * slot_stride`
//!   bytes, modes copy/persistent/persistent-flag) and accumulators
//!   (`slots * 32` zeroed bytes, mode copy), allocated and freed by CuPy.
//! - Rust allocates and frees all host memory: staging or mapped slots, the
//!   ack ring, the control block. Python reads [`Handoff::slot_stride`],
//!   [`Handoff::payload_cap`], [`Handoff::mapped_slots_device_ptr`] (zerocopy),
//!   [`Handoff::acks_device_ptr`] and [`Handoff::control_device_ptr`] to launch
//!   `latency_persistent`, and must not free its device memory, nor drop the
//!   Rust session before the persistent kernel has returned (stop, else
//!   abort, then synchronise its stream with a deadline). Dropping a
//!   `Handoff` sets `abort` and synchronises the copy stream first.
//! - Stand-in (CI): [`Handoff::standin`] needs no pointers at all.

use std::sync::atomic::Ordering;

use super::gpu::{GpuOps, HostMemory, SumFrameLaunch};
use super::layout::*;
use super::{FrameDone, FrameKind, FrameSink};
use crate::{Error, Result};

#[path = "handoff_config.rs"]
mod config;
pub use config::{AckEntry, AckRecord, DeviceBuffers, HandoffConfig, HandoffCounters, Mode};

/// A published frame waiting for its ack (`seq == 0`: the slot is free).
#[derive(Debug, Clone, Copy, Default)]
struct Pending {
    seq: u64,
    frame: u64,
    kind: u32,
    /// Payload bytes handed over (the host's sums are taken over these).
    bytes: u32,
    t_send: u64,
    t_first: u64,
    t_done: u64,
    t_published: u64,
    t_handed: u64,
    /// Settled on the host without the GPU (mode copy, non-whole kinds).
    local_status: u32,
    timed_out: bool,
}

/// Frames to the GPU; see the module docs.
pub struct Handoff<G: GpuOps> {
    // Declared first so it drops first: a stand-in's persistent thread is
    // joined before the memory below is freed.
    gpu: G,
    config: HandoffConfig,
    device: DeviceBuffers,
    cap: usize,
    stride: usize,
    /// Staging slots (copy, persistent, persistent-flag) or mapped slots (zerocopy).
    slots: HostMemory,
    acks: HostMemory,
    control: HostMemory,
    pending: Vec<Pending>,
    /// The last seq claimed (claims are dense).
    claimed: u64,
    /// Per slot: the seq claimed there and not yet published (0: none). The
    /// assembler keeps several frames open (its window), so several slots
    /// can be claimed at once.
    open: Vec<u64>,
    /// Per slot: a frame closed before an older one; published (in seq order,
    /// as the persistent kernel takes them) once every older one is.
    held: Vec<Option<FrameDone>>,
    next_publish: u64,
    oldest: u64,
    records: Vec<AckRecord>,
    counters: HandoffCounters,
    error: Option<Error>,
    kernel_gone: bool,
    stop_status: u32,
}

impl<G: GpuOps> Handoff<G> {
    /// Allocates the host memory on the calling thread's context (bound
    /// here), which should be the thread that then runs the hot loop.
    pub fn new(
        gpu: G,
        config: HandoffConfig,
        device: DeviceBuffers,
        record_capacity: usize,
    ) -> Result<Self> {
        config.validate()?;
        let name = config.mode.name();
        if config.mode != Mode::ZeroCopy && device.slots == 0 {
            return Err(Error::Config(format!(
                "mode {name} needs device slots from Python"
            )));
        }
        if config.mode == Mode::Copy && device.accum == 0 {
            return Err(Error::Config(
                "mode copy needs the device accumulators from Python".into(),
            ));
        }
        if config.mode == Mode::PersistentFlag && !gpu.supports_write_value64() {
            return Err(Error::Config(
                "mode persistent-flag needs 64-bit stream memory operations, which this GPU or driver lacks".into(),
            ));
        }
        gpu.bind_thread()?;
        let (cap, stride) = (
            payload_cap(config.frame_bytes),
            slot_stride(config.frame_bytes),
        );
        let slots = gpu.alloc_host(config.slots * stride, config.write_combined)?;
        let acks = gpu.alloc_host(config.slots * ACK_BYTES, false)?;
        let control = gpu.alloc_host(CONTROL_BYTES, false)?;
        Ok(Handoff {
            gpu,
            config,
            device,
            cap,
            stride,
            slots,
            acks,
            control,
            pending: vec![Pending::default(); config.slots],
            claimed: 0,
            open: vec![0; config.slots],
            held: vec![None; config.slots],
            next_publish: 1,
            oldest: 1,
            records: Vec::with_capacity(record_capacity),
            counters: HandoffCounters::default(),
            error: None,
            kernel_gone: false,
            stop_status: 0,
        })
    }

    fn index(&self, seq: u64) -> usize {
        (seq % self.config.slots as u64) as usize
    }

    fn host_slot(&self, seq: u64) -> *mut u8 {
        // SAFETY: index < slots, so the offset is inside `self.slots`.
        unsafe { self.slots.host_ptr().add(self.index(seq) * self.stride) }
    }

    fn device_slot(&self, seq: u64) -> u64 {
        self.device.slots + (self.index(seq) * self.stride) as u64
    }

    fn fail(&mut self, err: Error) {
        self.counters.gpu_errors += 1;
        self.error.get_or_insert(err);
    }

    /// Writes the trailer of `done` into the host slot, `seq` excluded.
    fn write_trailer(&mut self, done: &FrameDone, bytes: u32) {
        let t = self.host_slot(done.seq).wrapping_add(self.cap);
        // SAFETY: the trailer (64 bytes at payload_cap) is inside the slot and
        // naturally aligned; nobody reads it until `seq` is published.
        unsafe {
            std::ptr::write_bytes(t, 0, TRAILER_SEQ);
            (t.add(TRAILER_FRAME) as *mut u64).write(done.frame);
            (t.add(TRAILER_BYTES_FIELD) as *mut u32).write(bytes);
            (t.add(TRAILER_KIND) as *mut u32).write(done.kind as u32);
            (t.add(TRAILER_T_SEND) as *mut u64).write(done.t_send_ns.unwrap_or(0));
        }
    }

    /// Hands frame `seq` over per mode.
    fn hand_over(&mut self, seq: u64, frame: u64, kind: FrameKind, bytes: u32) -> Result<()> {
        let host = self.host_slot(seq);
        // Below, `host` is this frame's slot; a slot is reused only after its
        // ack, so it stays unchanged while a copy reads it; device addresses
        // are Python's slots (module docs) or the stand-in's.
        // SAFETY: the trailer's seq word is inside the slot, 8-aligned; the
        // GPU side only reads it, atomically.
        let seq_word = unsafe { atomic_u64(host.add(self.cap + TRAILER_SEQ)) };
        let whole = kind == FrameKind::Whole;
        let wc = self.config.write_combined;
        if wc {
            // x86 does not order stores to write-combined memory with each
            // other, and a Release store emits no fence there: drain the WC
            // buffers (a SeqCst fence is `mfence`) so the payload and trailer
            // are in memory before `seq` or the DMA that reads them.
            std::sync::atomic::fence(Ordering::SeqCst);
        }
        match self.config.mode {
            // SAFETY: see above; the copy and kernel stay within slot `seq`.
            Mode::Copy if whole => unsafe {
                self.gpu
                    .copy_to_device_async(self.device_slot(seq), host, bytes as usize)?;
                self.gpu.launch_sum_frame(&SumFrameLaunch {
                    slot: self.device_slot(seq),
                    frame_bytes: bytes,
                    seq,
                    frame,
                    kind: kind as u32,
                    acks: self.acks.device_ptr(),
                    nslots: self.config.slots as u32,
                    accum: self.device.accum,
                    check_pattern: u32::from(self.config.check_pattern),
                    blocks: self.config.blocks,
                    threads: self.config.threads,
                })?;
            },
            Mode::Copy => {
                let i = self.index(seq);
                self.pending[i].local_status = if kind == FrameKind::Stop {
                    STATUS_STOPPED
                } else {
                    STATUS_SKIPPED
                };
            }
            Mode::Persistent | Mode::PersistentFlag => {
                // Whole frames copy the payload area too; other kinds only the
                // trailer (the kernel never reads their payload).
                let from = if whole { 0 } else { self.cap };
                let flag = self.config.mode == Mode::PersistentFlag;
                let end = self.cap + if flag { TRAILER_SEQ } else { TRAILER_BYTES };
                seq_word.store(seq, Ordering::Relaxed);
                // SAFETY: see above; `from..end` lies inside the slot.
                unsafe {
                    self.gpu.copy_to_device_async(
                        self.device_slot(seq) + from as u64,
                        host.add(from),
                        end - from,
                    )?;
                    if flag {
                        self.gpu.write_value64(
                            self.device_slot(seq) + (self.cap + TRAILER_SEQ) as u64,
                            seq,
                        )?;
                    }
                }
            }
            Mode::ZeroCopy => {
                seq_word.store(seq, Ordering::Release);
                if wc {
                    // Push `seq` itself out of the WC buffer now, not later.
                    std::sync::atomic::fence(Ordering::SeqCst);
                }
            }
        }
        Ok(())
    }

    /// Hands frame `done.seq` (== next_publish, claimed) over to the GPU.
    fn publish_now(&mut self, done: &FrameDone) {
        let bytes = (done.bytes as usize).min(self.config.frame_bytes) as u32;
        self.write_trailer(done, bytes);
        let now = monotonic_ns();
        let i = self.index(done.seq);
        self.open[i] = 0;
        self.pending[i] = Pending {
            seq: done.seq,
            frame: done.frame,
            kind: done.kind as u32,
            bytes,
            t_send: done.t_send_ns.unwrap_or(0),
            t_first: done.t_first_ns,
            t_done: done.t_done_ns,
            t_published: now,
            t_handed: 0,
            local_status: 0,
            timed_out: false,
        };
        self.next_publish += 1;
        if done.kind != FrameKind::Stop {
            self.counters.frames_published += 1;
        }
        if let Err(e) = self.hand_over(done.seq, done.frame, done.kind, bytes) {
            // The GPU will never ack this frame: settle it here, as failed.
            self.pending[i].local_status = STATUS_ABORTED;
            self.fail(e);
        }
        // The host's sums are taken when the ack is seen (`settle`), not here:
        // summing 64 KiB takes microseconds that would delay seeing the ack.
        self.pending[i].t_handed = monotonic_ns();
        if self.config.mode == Mode::Copy {
            if let Err(e) = self.gpu.synchronize() {
                self.fail(e);
            }
            self.poll_acks(monotonic_ns());
        }
    }

    /// Tells every persistent kernel to return (status 4) at its next check.
    pub fn abort(&self) {
        // SAFETY: the control block is ours, 64 bytes, aligned; the kernel
        // reads `abort` with an acquire load.
        unsafe { atomic_u32(self.control.host_ptr().add(CONTROL_ABORT)) }
            .store(1, Ordering::Release);
    }

    /// Host address of the control block (the abort word at
    /// [`CONTROL_ABORT`]), for a thread that must abort while another owns
    /// the hand-off.
    pub fn control_host_ptr(&self) -> *mut u8 {
        self.control.host_ptr()
    }

    pub fn counters(&self) -> HandoffCounters {
        self.counters
    }

    pub fn records(&self) -> &[AckRecord] {
        &self.records
    }

    /// The first failed driver call, if any (taken: reported once).
    pub fn take_error(&mut self) -> Option<Error> {
        self.error.take()
    }

    pub fn config(&self) -> &HandoffConfig {
        &self.config
    }

    pub fn gpu(&self) -> &G {
        &self.gpu
    }

    /// Frames handed over and not yet acknowledged.
    pub fn outstanding(&self) -> u64 {
        self.next_publish - self.oldest
    }

    /// Device address of the mapped slots (zerocopy; 0 in the other modes).
    pub fn mapped_slots_device_ptr(&self) -> u64 {
        if self.config.mode == Mode::ZeroCopy {
            self.slots.device_ptr()
        } else {
            0
        }
    }

    pub fn acks_device_ptr(&self) -> u64 {
        self.acks.device_ptr()
    }

    pub fn control_device_ptr(&self) -> u64 {
        self.control.device_ptr()
    }

    pub fn slot_stride(&self) -> usize {
        self.stride
    }

    pub fn payload_cap(&self) -> usize {
        self.cap
    }
}

impl<G: GpuOps> FrameSink for Handoff<G> {
    fn claim(&mut self, seq: u64) -> bool {
        if seq != self.claimed + 1 {
            self.counters.bad_writes += 1;
            return false;
        }
        let i = self.index(seq);
        if self.open[i] != 0 {
            // Still open (more frames open than slots): the frame is dropped.
            return false;
        }
        if self.pending[i].seq != 0 {
            self.poll_acks(monotonic_ns());
            if self.pending[i].seq != 0 {
                return false;
            }
        }
        self.claimed = seq;
        self.open[i] = seq;
        true
    }

    fn write(&mut self, seq: u64, offset: usize, bytes: &[u8]) {
        let i = self.index(seq);
        if seq == 0 || self.open[i] != seq || offset + bytes.len() > self.config.frame_bytes {
            self.counters.bad_writes += 1;
            return;
        }
        // SAFETY: inside this claimed slot's payload area (checked above);
        // nobody else reads the slot until it is published.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.host_slot(seq).add(offset),
                bytes.len(),
            )
        };
    }

    fn publish(&mut self, done: &FrameDone) {
        let i = self.index(done.seq);
        if done.seq == 0 || self.open[i] != done.seq || self.held[i].is_some() {
            self.counters.bad_writes += 1;
            return;
        }
        if done.seq != self.next_publish {
            // An older frame is still open: this one waits for it.
            self.held[i] = Some(*done);
            return;
        }
        self.publish_now(done);
        loop {
            let j = self.index(self.next_publish);
            match self.held[j] {
                Some(d) if d.seq == self.next_publish => {
                    self.held[j] = None;
                    self.publish_now(&d);
                }
                _ => break,
            }
        }
    }
}

impl<G: GpuOps> Drop for Handoff<G> {
    fn drop(&mut self) {
        self.abort();
        // Queued copies read our staging memory: let them finish before it is
        // freed (the copy stream holds only copies and short kernels).
        let _ = self.gpu.synchronize();
    }
}

#[path = "handoff_acks.rs"]
mod acks;

#[cfg(test)]
#[path = "handoff_tests.rs"]
mod tests;

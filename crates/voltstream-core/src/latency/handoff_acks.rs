//! The acknowledgement side of [`Handoff`]: polling acks, settling frames,
//! and the stop protocol (see [`super`]).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{AckEntry, AckRecord, Handoff, Pending};
use crate::latency::gpu::GpuOps;
use crate::latency::layout::*;
use crate::latency::{FrameDone, FrameKind, FrameSink};
use crate::{Error, Result};

impl<G: GpuOps> Handoff<G> {
    /// Looks (without waiting) at the oldest outstanding frames; settles every
    /// consecutive acknowledged one. Returns how many were settled.
    pub fn poll_acks(&mut self, now_ns: u64) -> usize {
        let mut settled = 0;
        while self.oldest < self.next_publish {
            let seq = self.oldest;
            let i = self.index(seq);
            let p = self.pending[i];
            let entry = if p.local_status != 0 {
                AckEntry {
                    seq,
                    sum: 0,
                    sumsq: 0,
                    status: p.local_status,
                    torn: 0,
                }
            } else {
                let entry = self.read_ack(i);
                if entry.seq != seq {
                    let late = now_ns.saturating_sub(p.t_published)
                        > self.config.ack_timeout.as_nanos() as u64;
                    if late && !p.timed_out {
                        self.pending[i].timed_out = true;
                        self.counters.ack_timeouts += 1;
                    }
                    break;
                }
                entry
            };
            self.settle(p, entry, now_ns);
            self.pending[i] = Pending::default();
            self.oldest += 1;
            settled += 1;
        }
        settled
    }

    fn settle(&mut self, p: Pending, ack: AckEntry, now_ns: u64) {
        let host_sums = (ack.status == STATUS_OK).then(|| {
            // The slot's payload is unchanged until this frame is settled
            // (claim refuses the slot until then).
            // SAFETY: payload [0, bytes) of slot `seq`, inside the host slots.
            sums(unsafe { std::slice::from_raw_parts(self.host_slot(p.seq), p.bytes as usize) })
        });
        let c = &mut self.counters;
        let ok = match ack.status {
            STATUS_OK => {
                let sums_equal = Some((ack.sum, ack.sumsq)) == host_sums;
                c.sum_mismatch += u64::from(!sums_equal);
                c.torn += u64::from(ack.torn != 0);
                c.torn_words += u64::from(ack.torn);
                sums_equal && ack.torn == 0 && p.kind == FrameKind::Whole as u32
            }
            STATUS_SKIPPED => {
                c.frames_skipped += 1;
                p.kind == FrameKind::Incomplete as u32
            }
            STATUS_STOPPED => p.kind == FrameKind::Stop as u32,
            _ => {
                self.kernel_gone = true;
                false
            }
        };
        if p.kind == FrameKind::Stop as u32 {
            self.stop_status = ack.status;
        } else {
            c.frames_acked += 1;
        }
        if self.records.len() < self.records.capacity() {
            self.records.push(AckRecord {
                seq: p.seq,
                frame: p.frame,
                status: ack.status,
                t_send_ns: p.t_send,
                t_first_ns: p.t_first,
                t_done_ns: p.t_done,
                t_handed_ns: p.t_handed,
                t_ack_ns: now_ns,
                ok,
            });
        } else {
            c.records_dropped += 1;
        }
    }

    /// Ack ring entry `index` (Acquire on `seq`, then the fields).
    pub fn read_ack(&self, index: usize) -> AckEntry {
        let a = self
            .acks
            .host_ptr()
            .wrapping_add((index % self.config.slots) * ACK_BYTES);
        // SAFETY: entry inside the ring, fields aligned; the GPU writes them
        // before its Release store of `seq`, which this Acquire load pairs with.
        unsafe {
            let seq = atomic_u64(a.add(ACK_SEQ)).load(Ordering::Acquire);
            AckEntry {
                seq,
                sum: atomic_u64(a.add(ACK_SUM)).load(Ordering::Relaxed),
                sumsq: atomic_u64(a.add(ACK_SUMSQ)).load(Ordering::Relaxed),
                status: atomic_u32(a.add(ACK_STATUS)).load(Ordering::Relaxed),
                torn: atomic_u32(a.add(ACK_TORN)).load(Ordering::Relaxed),
            }
        }
    }

    /// Ends the run: in the persistent modes hands over a stop frame and waits
    /// (polling acks) until the kernel acknowledges it; in mode copy waits for
    /// outstanding acks. An error after `timeout`, or if the kernel aborted.
    pub fn stop(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let wait = |h: &mut Self, done: &dyn Fn(&Self) -> bool, what: &str| -> Result<()> {
            loop {
                h.poll_acks(monotonic_ns());
                if done(h) {
                    return Ok(());
                }
                if h.kernel_gone {
                    return Err(Error::Config(
                        "the GPU kernel aborted before the stop frame".into(),
                    ));
                }
                if Instant::now() > deadline {
                    return Err(Error::Config(format!(
                        "the GPU did not {what} within {timeout:?}"
                    )));
                }
                std::thread::yield_now();
            }
        };
        if !self.config.mode.persistent() {
            return wait(
                self,
                &|h| h.oldest == h.next_publish,
                "acknowledge every frame",
            );
        }
        let seq = self.claimed + 1;
        let i = self.index(seq);
        wait(
            self,
            &|h| h.pending[i].seq == 0,
            "free a slot for the stop frame",
        )?;
        if !self.claim(seq) || seq != self.next_publish {
            return Err(Error::Config(
                "stop with frames still open; close them first (FrameAssembler::finish)".into(),
            ));
        }
        let now = monotonic_ns();
        self.publish(&FrameDone {
            seq,
            frame: 0,
            kind: FrameKind::Stop,
            present: 0,
            bytes: 0,
            t_first_ns: now,
            t_done_ns: now,
            t_send_ns: None,
        });
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        wait(self, &|h| h.oldest > seq, "acknowledge the stop frame")?;
        match self.stop_status {
            STATUS_STOPPED => Ok(()),
            s => Err(Error::Config(format!(
                "the stop frame was acknowledged with status {s}, not 3"
            ))),
        }
    }
}

//! Capture counters, shared with the monitor.
//!
//! The capture thread counts into plain integers ([`Counters`], owned by the
//! assembler) and publishes them into [`Stats`] (relaxed atomics) once per batch,
//! so the hot loop touches no shared cache line per packet while readers on other
//! threads still see values at most one batch old.
//!
//! Accounting rule: every packet the engine hands over lands in exactly one of
//! `received`, `late`, `duplicate`, `dropped`, `invalid` (per stream) or
//! `malformed`, `foreign` (capture-wide: a packet that fails its checks or is not
//! ours cannot be attributed to a stream). `missing` counts expected packets that
//! never came (an `invalid` frame is not placed, so its slot is missing too), so
//! it is not part of that sum. See [`Counters::accounted`].

use std::sync::atomic::{AtomicU64, Ordering};

use crate::host_counters::HostCounters;

/// Loss taxonomy of one stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamCounters {
    /// Packets placed into a chunk that reached the ring.
    pub received: u64,
    /// Expected packets that never arrived before their chunk was flushed.
    pub missing: u64,
    /// Packets whose chunk had already been flushed (behind the window).
    pub late: u64,
    /// Packets whose slot in their chunk was already filled.
    pub duplicate: u64,
    /// Packets that arrived for a chunk the consumer could not take (no free chunk).
    pub dropped: u64,
    /// Payload bytes of the `received` packets.
    pub bytes: u64,
    /// Frames of this stream that their sender flagged invalid (not placed).
    pub invalid: u64,
}

impl StreamCounters {
    /// Packets of this stream handed to the assembler (all buckets but `missing`).
    pub fn seen(&self) -> u64 {
        self.received + self.late + self.duplicate + self.dropped + self.invalid
    }
}

/// Everything the assembler counts, for all streams.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    pub streams: Vec<StreamCounters>,
    /// Packets that failed their format checks (truncated, bad fields).
    pub malformed: u64,
    /// Well-formed packets that belong to no configured stream.
    pub foreign: u64,
    /// Chunks pushed to the ring.
    pub chunks_emitted: u64,
    /// Chunks discarded whole because no free chunk was available.
    pub chunks_dropped: u64,
    /// Times the timeline was restarted after a time-stamp jump.
    pub resyncs: u64,
}

/// `$a.f += $b.f` for each field `f`: sums of counters, without repeating
/// the field names twice a line.
macro_rules! add_fields {
    ($a:expr, $b:expr; $($f:ident),+ $(,)?) => {
        $( $a.$f += $b.$f; )+
    };
}
pub(crate) use add_fields;

impl Counters {
    pub fn new(streams: usize) -> Self {
        Counters {
            streams: vec![StreamCounters::default(); streams],
            ..Default::default()
        }
    }

    /// Total packets accounted for; equals the packets handed to the assembler.
    pub fn accounted(&self) -> u64 {
        self.streams.iter().map(StreamCounters::seen).sum::<u64>() + self.malformed + self.foreign
    }

    /// Per-stream counters summed over streams.
    pub fn total(&self) -> StreamCounters {
        let mut t = StreamCounters::default();
        for s in &self.streams {
            add_fields!(t, s; received, missing, late, duplicate, dropped, bytes, invalid);
        }
        t
    }
}

/// A consistent-enough copy of the shared counters (each field is read atomically;
/// fields may be from different batches while the capture runs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub counters: Counters,
    /// Packets the kernel dropped at this capture's socket (receive queue full).
    pub kernel_drops: u64,
    /// Receive buffer size as the kernel reports it (Linux doubles the request).
    pub rcvbuf: u64,
    /// The kernel's drop counters outside this capture (namespace, host and
    /// interface wide: context, not this capture's loss), as changes since start.
    pub host: HostCounters,
    /// The station accepted (VDIF: given, or learnt from the first frame).
    pub station: Option<u16>,
}

const STREAM_FIELDS: usize = 7;
const GLOBAL_FIELDS: usize = 8;

/// Counters shared between the capture thread (writer) and monitors (readers).
#[derive(Debug)]
pub struct Stats {
    streams: usize,
    per_stream: Box<[AtomicU64]>,
    global: [AtomicU64; GLOBAL_FIELDS],
    /// [`HostCounters`] fields; [`ABSENT`] where the kernel has no such counter.
    host: [AtomicU64; HostCounters::FIELDS],
}

/// Stored for a host counter that is absent.
const ABSENT: u64 = u64::MAX;

impl Stats {
    pub fn new(streams: usize) -> Self {
        Stats {
            streams,
            per_stream: (0..streams * STREAM_FIELDS)
                .map(|_| AtomicU64::new(0))
                .collect(),
            global: std::array::from_fn(|i| AtomicU64::new(if i == 7 { ABSENT } else { 0 })),
            host: std::array::from_fn(|_| AtomicU64::new(ABSENT)),
        }
    }

    /// Publishes the host counters; called at the kernel-drops cadence.
    pub fn set_host(&self, h: &HostCounters) {
        for (a, v) in self.host.iter().zip(h.to_array()) {
            a.store(v.unwrap_or(ABSENT), Ordering::Relaxed);
        }
    }

    /// Copies the capture thread's counters; called once per batch.
    pub fn publish(&self, c: &Counters) {
        for (i, s) in c.streams.iter().enumerate().take(self.streams) {
            let f = &self.per_stream[i * STREAM_FIELDS..(i + 1) * STREAM_FIELDS];
            let vals = [
                s.received,
                s.missing,
                s.late,
                s.duplicate,
                s.dropped,
                s.bytes,
                s.invalid,
            ];
            for (a, v) in f.iter().zip(vals) {
                a.store(v, Ordering::Relaxed);
            }
        }
        let vals = [
            c.malformed,
            c.foreign,
            c.chunks_emitted,
            c.chunks_dropped,
            c.resyncs,
        ];
        for (a, v) in self.global.iter().zip(vals) {
            a.store(v, Ordering::Relaxed);
        }
    }

    pub fn set_kernel_drops(&self, v: u64) {
        self.global[5].store(v, Ordering::Relaxed);
    }

    pub fn set_rcvbuf(&self, v: u64) {
        self.global[6].store(v, Ordering::Relaxed);
    }

    pub fn set_station(&self, v: Option<u16>) {
        self.global[7].store(v.map_or(ABSENT, u64::from), Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> Snapshot {
        let g = |i: usize| self.global[i].load(Ordering::Relaxed);
        let streams = self
            .per_stream
            .chunks_exact(STREAM_FIELDS)
            .map(|f| {
                let v = |j: usize| f[j].load(Ordering::Relaxed);
                StreamCounters {
                    received: v(0),
                    missing: v(1),
                    late: v(2),
                    duplicate: v(3),
                    dropped: v(4),
                    bytes: v(5),
                    invalid: v(6),
                }
            })
            .collect();
        Snapshot {
            counters: Counters {
                streams,
                malformed: g(0),
                foreign: g(1),
                chunks_emitted: g(2),
                chunks_dropped: g(3),
                resyncs: g(4),
            },
            kernel_drops: g(5),
            rcvbuf: g(6),
            station: Some(g(7)).filter(|&v| v != ABSENT).map(|v| v as u16),
            host: HostCounters::from_array(std::array::from_fn(|i| {
                Some(self.host[i].load(Ordering::Relaxed)).filter(|&v| v != ABSENT)
            })),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host_counters::UdpSnmp;

    #[test]
    fn publish_then_snapshot_round_trips() {
        let mut c = Counters::new(3);
        for (i, s) in c.streams.iter_mut().enumerate() {
            let b = 10 * i as u64 + 1;
            *s = StreamCounters {
                received: b,
                missing: b + 1,
                late: b + 2,
                duplicate: b + 3,
                dropped: b + 4,
                bytes: b + 5,
                invalid: b + 6,
            };
        }
        c.malformed = 7;
        c.foreign = 8;
        c.chunks_emitted = 9;
        c.chunks_dropped = 10;
        c.resyncs = 11;
        let stats = Stats::new(3);
        stats.publish(&c);
        stats.set_kernel_drops(12);
        stats.set_rcvbuf(13);
        assert_eq!(stats.snapshot().host, HostCounters::default());
        let host = HostCounters {
            udp: UdpSnmp {
                rcvbuf_errors: Some(14),
                ..Default::default()
            },
            softnet_time_squeeze: Some(0),
            ..Default::default()
        };
        stats.set_host(&host);
        let snap = stats.snapshot();
        assert_eq!(snap.host, host);
        assert_eq!(snap.counters, c);
        assert_eq!((snap.kernel_drops, snap.rcvbuf), (12, 13));
        // 3 streams: received+late+duplicate+dropped+invalid = 5b+15, b = 1, 11, 21.
        assert_eq!(c.accounted(), (5 + 15) + (55 + 15) + (105 + 15) + 7 + 8);
        assert_eq!(snap.station, None);
        stats.set_station(Some(0x4142));
        assert_eq!(stats.snapshot().station, Some(0x4142));
    }
}

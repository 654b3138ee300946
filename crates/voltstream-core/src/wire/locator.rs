//! The per-packet classifier a validated [`FormatSpec`] builds: which stream a
//! packet belongs to and where it sits on the stream's time line, for every
//! format, with the state a locator learns (the VDIF station). Split from
//! `format.rs`, which keeps the user-facing description and its validation.

use super::format::FormatSpec;
use super::{codif, counter, layout, roach2, spead, vdif, Locate, Located, WireError};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

pub(super) const NO_STREAM: u16 = u16::MAX;
/// `learned` before any frame fixed the station (station ids are 16 bits).
const NO_STATION: u32 = u32::MAX;

/// Bytes before a VDIF frame's data array.
pub(super) fn vdif_header_len(legacy: bool) -> usize {
    if legacy {
        vdif::LEGACY_HEADER_LEN
    } else {
        vdif::HEADER_LEN
    }
}

fn learned_station(learned: &AtomicU32) -> Option<u16> {
    let v = learned.load(Ordering::Relaxed);
    (v != NO_STATION).then_some(v as u16)
}

/// The [`Locate`] implementation for a validated [`FormatSpec`].
#[derive(Debug, Clone)]
pub struct Locator {
    kind: Kind,
}

impl Locator {
    /// The classifier of `spec`, which the caller has validated. Allocates once (a
    /// thread-id table); `locate` itself never allocates.
    pub(super) fn new(spec: &FormatSpec) -> Locator {
        let kind = match spec {
            FormatSpec::Vdif {
                threads,
                frame_len,
                frames_per_second,
                station,
                legacy,
            } => {
                let mut table = vec![NO_STREAM; vdif::MAX_THREADS].into_boxed_slice();
                for (i, &t) in threads.iter().enumerate() {
                    table[t as usize] = i as u16;
                }
                Kind::Vdif {
                    table,
                    streams: threads.len(),
                    frame_len: *frame_len,
                    fps: *frames_per_second,
                    station: *station,
                    learned: Arc::new(AtomicU32::new(NO_STATION)),
                    legacy: *legacy,
                }
            }
            FormatSpec::Ynao { subband } => Kind::Ynao { subband: *subband },
            FormatSpec::Spead {
                heap_address_bits,
                digitiser_ids,
                samples_per_heap,
                heap_bytes,
                packets_per_heap,
                heap_index,
                timestamp_id,
                digitiser_id_item,
            } => Kind::Spead(spead::HeapMap {
                heap_address_bits: *heap_address_bits,
                ids: digitiser_ids.clone().into_boxed_slice(),
                samples_per_heap: *samples_per_heap,
                heap_bytes: *heap_bytes,
                packets_per_heap: *packets_per_heap,
                timestamp_id: *timestamp_id,
                id_item: *digitiser_id_item,
                index: *heap_index,
            }),
            FormatSpec::Codif {
                threads,
                frame_len,
                frames_per_period,
                station,
                group,
            } => Kind::Codif {
                threads: threads.clone().into_boxed_slice(),
                frame_len: *frame_len,
                fpp: *frames_per_period,
                station: *station,
                group: *group,
            },
            FormatSpec::Counter {
                streams,
                payload_len,
            } => Kind::Counter {
                streams: *streams,
                payload_len: *payload_len,
            },
            FormatSpec::Layout(l) => Kind::Layout(l.clone()),
        };
        Locator { kind }
    }
}

#[derive(Debug, Clone)]
enum Kind {
    Vdif {
        table: Box<[u16]>,
        streams: usize,
        frame_len: usize,
        fps: u32,
        /// The station given; with none, the first valid frame of a configured
        /// thread fixes it in `learned` (shared by the clones of this locator),
        /// and frames of any other station are foreign from then on.
        station: Option<u16>,
        learned: Arc<AtomicU32>,
        legacy: bool,
    },
    Ynao {
        subband: Option<u8>,
    },
    Spead(spead::HeapMap),
    Codif {
        threads: Box<[u16]>,
        frame_len: usize,
        fpp: u32,
        station: Option<u16>,
        group: Option<u16>,
    },
    Counter {
        streams: usize,
        payload_len: usize,
    },
    Layout(layout::Layout),
}

impl Locate for Locator {
    fn station(&self) -> Option<u16> {
        match &self.kind {
            Kind::Vdif {
                station, learned, ..
            } => station.or_else(|| learned_station(learned)),
            Kind::Codif { station, .. } => *station,
            _ => None,
        }
    }

    fn streams(&self) -> usize {
        match &self.kind {
            Kind::Vdif { streams, .. } => *streams,
            Kind::Ynao { .. } => 1,
            Kind::Spead(m) => m.ids.len(),
            Kind::Codif { threads, .. } => threads.len(),
            Kind::Counter { streams, .. } => *streams,
            Kind::Layout(l) => l.streams(),
        }
    }

    fn payload_len(&self) -> usize {
        match &self.kind {
            Kind::Vdif {
                frame_len, legacy, ..
            } => frame_len - vdif_header_len(*legacy),
            Kind::Ynao { .. } => roach2::DATA_LEN,
            Kind::Spead(m) => m.packet_payload(),
            Kind::Codif { frame_len, .. } => frame_len - codif::HEADER_LEN,
            Kind::Counter { payload_len, .. } => *payload_len,
            Kind::Layout(l) => l.payload_len,
        }
    }

    fn locate<'a>(&self, packet: &'a [u8]) -> core::result::Result<Located<'a>, WireError> {
        match &self.kind {
            Kind::Vdif {
                table,
                frame_len,
                fps,
                station,
                learned,
                legacy,
                ..
            } => {
                let p = vdif::Packet::new_checked(packet)?;
                // A header of the other kind would shift the payload: not this layout.
                if p.legacy() != *legacy
                    || p.frame_len() != *frame_len
                    || packet.len() != *frame_len
                {
                    return Err(WireError::Malformed);
                }
                let want = station.or_else(|| learned_station(learned));
                if want.is_some_and(|s| s != p.station()) {
                    return Err(WireError::Foreign);
                }
                let stream = match table.get(p.thread() as usize) {
                    Some(&s) if s != NO_STREAM => s as usize,
                    _ => return Err(WireError::Foreign),
                };
                if p.invalid() {
                    return Err(WireError::Invalid { stream });
                }
                if p.frame() >= *fps {
                    return Err(WireError::Malformed);
                }
                if want.is_none() {
                    // The first valid frame of ours fixes the station; a frame of
                    // another station that raced it here is foreign.
                    let this = p.station() as u32;
                    if let Err(won) = learned.compare_exchange(
                        NO_STATION,
                        this,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    ) {
                        if won != this {
                            return Err(WireError::Foreign);
                        }
                    }
                }
                let index = p.seconds() as u64 * *fps as u64 + p.frame() as u64;
                let payload = packet
                    .get(vdif_header_len(*legacy)..)
                    .ok_or(WireError::Truncated)?;
                Ok(Located {
                    stream,
                    index,
                    payload,
                })
            }
            Kind::Ynao { subband } => {
                let p = roach2::Packet::new_checked(packet)?;
                if packet.len() != roach2::FRAME_LEN {
                    return Err(WireError::Malformed);
                }
                if subband.is_some_and(|s| s != p.subband()) {
                    return Err(WireError::Foreign);
                }
                Ok(Located {
                    stream: 0,
                    index: p.sequence(),
                    payload: packet
                        .get(roach2::HEADER_LEN..)
                        .ok_or(WireError::Truncated)?,
                })
            }
            Kind::Spead(m) => m.locate(packet),
            Kind::Codif {
                threads,
                frame_len,
                fpp,
                station,
                group,
            } => {
                let p = codif::Packet::new_checked(packet)?;
                if p.frame_len() != *frame_len
                    || packet.len() != *frame_len
                    || p.sync() != codif::SYNC
                {
                    return Err(WireError::Malformed);
                }
                if station.is_some_and(|s| s != p.station())
                    || group.is_some_and(|g| g != p.group())
                {
                    return Err(WireError::Foreign);
                }
                let stream = threads
                    .iter()
                    .position(|&t| t == p.thread())
                    .ok_or(WireError::Foreign)?;
                if p.invalid() {
                    return Err(WireError::Invalid { stream });
                }
                let period = p.period() as u32;
                if period == 0 || p.seconds() % period != 0 || p.frame() >= *fpp {
                    return Err(WireError::Malformed);
                }
                let index = (p.seconds() / period) as u64 * *fpp as u64 + p.frame() as u64;
                let payload = packet
                    .get(codif::HEADER_LEN..)
                    .ok_or(WireError::Truncated)?;
                Ok(Located {
                    stream,
                    index,
                    payload,
                })
            }
            Kind::Counter {
                streams,
                payload_len,
            } => {
                let p = counter::Packet::new_checked(packet)?;
                let payload = p.payload();
                if payload.len() < *payload_len {
                    return Err(WireError::Truncated);
                }
                if payload.len() > *payload_len {
                    return Err(WireError::Malformed);
                }
                let stream = p.stream() as usize;
                if stream >= *streams {
                    return Err(WireError::Foreign);
                }
                Ok(Located {
                    stream,
                    index: p.index(),
                    payload: packet
                        .get(counter::HEADER_LEN..)
                        .ok_or(WireError::Truncated)?,
                })
            }
            Kind::Layout(l) => l.locate(packet),
        }
    }
}

impl super::StreamKeyed for Locator {
    /// VDIF, CODIF, counter and layout formats keep the stream id at a fixed
    /// place. SPEAD's digitiser id is an item whose position may vary, and
    /// YNAO has one stream: `None`.
    fn stream_key(&self) -> Option<super::StreamKey> {
        use layout::{Endian, Field};
        let (field, ids, min_packet_len) = match &self.kind {
            Kind::Vdif {
                table, frame_len, ..
            } => {
                let mut ids = vec![0u64; self.streams()];
                for (thread, &s) in table.iter().enumerate() {
                    if s != NO_STREAM {
                        ids[s as usize] = thread as u64;
                    }
                }
                // Word 3 (little-endian), bits 16..26.
                let f = Field {
                    offset: 12,
                    bytes: 4,
                    endian: Endian::Little,
                    shift: 16,
                    bits: 10,
                };
                (f, ids, *frame_len)
            }
            Kind::Codif {
                threads, frame_len, ..
            } => {
                // Word 2 (little-endian u64), bits 16..32.
                let f = Field {
                    offset: 16,
                    bytes: 8,
                    endian: Endian::Little,
                    shift: 16,
                    bits: 16,
                };
                (f, threads.iter().map(|&t| t as u64).collect(), *frame_len)
            }
            Kind::Counter {
                streams,
                payload_len,
            } => (
                Field::be(8, 2),
                (0..*streams as u64).collect(),
                counter::HEADER_LEN + payload_len,
            ),
            Kind::Layout(l) => (l.stream?, l.stream_ids.clone(), l.packet_len),
            Kind::Ynao { .. } | Kind::Spead { .. } => return None,
        };
        Some(super::StreamKey {
            field,
            ids,
            min_packet_len,
        })
    }
}

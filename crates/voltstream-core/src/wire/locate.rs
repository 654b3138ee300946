use super::WireError;

/// Where a packet goes: the assembler's whole view of a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Located<'a> {
    /// Stream index, `0..Locate::streams()`.
    pub stream: usize,
    /// Position on the stream's packet timeline: consecutive packets of one
    /// stream have consecutive indices (VDIF: seconds * frames_per_second +
    /// frame number; YNAO: the sequence counter).
    pub index: u64,
    /// The sample bytes; always exactly `Locate::payload_len()` long.
    pub payload: &'a [u8],
}

/// A packet format configured for one capture: maps raw packets to placements.
///
/// Implementations must not panic on any input and must not allocate.
pub trait Locate: Send {
    /// Number of streams this configuration accepts.
    fn streams(&self) -> usize;
    /// Payload bytes per packet (fixed per capture).
    fn payload_len(&self) -> usize;
    /// Classifies one packet. `Err(Foreign)` for packets that are valid but not
    /// ours, `Err(Truncated | Malformed)` for packets that fail checks.
    fn locate<'a>(&self, packet: &'a [u8]) -> Result<Located<'a>, WireError>;
    /// The station this locator accepts, given or learnt from the first valid
    /// frame (VDIF); None where the format has no station or none is known yet.
    fn station(&self) -> Option<u16> {
        None
    }
}

/// Where a format keeps the stream id, so that packets can be steered to the
/// thread owning their stream before they are parsed (by a kernel BPF program;
/// see `capture::steer`). Only a hint for load spreading: the locator still
/// checks every packet, so a packet steered wrongly is counted, never lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamKey {
    /// The stream id field inside the UDP payload.
    pub field: super::layout::Field,
    /// The field's value for each stream, in stream order.
    pub ids: Vec<u64>,
    /// Shortest packet the format accepts (a steering program may read any
    /// byte below it).
    pub min_packet_len: usize,
}

/// Where a format keeps a packet's index, so that a steering program can give
/// whole chunks (index / packets_per_chunk) to threads: one stream over several
/// capture threads (see `capture::steer::chunk_program`). A hint, like
/// [`StreamKey`]: each thread's assembler still places packets by the index the
/// locator reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexKey {
    /// The index is one field of 1, 2, 4 or 8 whole bytes (YNAO's sequence
    /// counter, the counter format's index).
    Field(super::layout::Field),
    /// `seconds * per_second + frame`, each a part of one 32-bit word (VDIF).
    SecondsFrames {
        seconds: super::layout::Field,
        frame: super::layout::Field,
        per_second: u32,
    },
    /// `value >> shift`, the value big-endian of `value_bytes` (up to 6) at
    /// payload offset `value_at`, valid only where the big-endian 16-bit word
    /// at `tag_at` is `tag` (SPEAD one-packet heaps: the time stamp item's
    /// immediate value at a fixed item pointer, `shift` = log2 of the samples
    /// per heap). A packet without the tag goes to thread 0, whose assembler
    /// forwards it to its chunk's owner like any stray.
    TaggedShifted {
        value_at: usize,
        value_bytes: u8,
        shift: u32,
        tag_at: usize,
        tag: u16,
    },
}

/// A [`Locate`] that can say where its stream ids (and packet indices) are.
pub trait StreamKeyed {
    /// `None` when the stream id is not at a fixed place (or there is one stream).
    fn stream_key(&self) -> Option<StreamKey>;
    /// `None` when the index is not at a fixed place or needs more than a
    /// steering program can compute (SPEAD heaps of several packets, scaled
    /// layout indices).
    fn index_key(&self) -> Option<IndexKey> {
        None
    }
    /// Shortest packet the format accepts (what a steering program may read).
    fn min_packet_len(&self) -> usize {
        0
    }
}

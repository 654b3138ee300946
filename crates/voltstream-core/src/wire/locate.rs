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
}

/// Why a packet failed its checks. Cheap to return on the hot path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireError {
    /// Shorter than the format's fixed header or declared length.
    Truncated,
    /// A field holds a value the format forbids (version, magic, sizes...).
    Malformed,
    /// Well-formed, but not one of ours (wrong stream id, station, subband...).
    Foreign,
    /// One of ours (its stream is known), but its sender flagged it invalid (the
    /// VDIF/CODIF invalid bit): counted against the stream, its samples lost.
    Invalid { stream: usize },
}

impl core::fmt::Display for WireError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            WireError::Truncated => "packet truncated",
            WireError::Malformed => "packet malformed",
            WireError::Foreign => "packet not from a configured stream",
            WireError::Invalid { .. } => "frame flagged invalid by its sender",
        })
    }
}

impl std::error::Error for WireError {}

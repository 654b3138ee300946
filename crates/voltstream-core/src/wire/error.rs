/// Why a packet failed its checks. Cheap to return on the hot path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireError {
    /// Shorter than the format's fixed header or declared length.
    Truncated,
    /// A field holds a value the format forbids (version, magic, sizes...).
    Malformed,
    /// Well-formed, but not one of ours (wrong stream id, station, subband...).
    Foreign,
}

impl core::fmt::Display for WireError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            WireError::Truncated => "packet truncated",
            WireError::Malformed => "packet malformed",
            WireError::Foreign => "packet not from a configured stream",
        })
    }
}

impl std::error::Error for WireError {}

//! The per-packet dispatch: [`Locator`] holds the locator of the format a
//! validated [`super::FormatSpec`] names and forwards [`Locate`] and
//! [`StreamKeyed`] to it by one `match`, so every packet runs that format's
//! monomorphic code (no box, no virtual call). Each format's rules live in
//! its own file beside its wire view (`vdif::Locator`, `spead::HeapMap`,
//! ...); adding a format adds one line to the registry below.

use super::{codif, counter, layout, spead, vdif, ynao};
use super::{IndexKey, Locate, Located, StreamKey, StreamKeyed, WireError};

/// Builds `Kind` (one variant per format), the `From` conversions from
/// each format's locator, and the forwarding impls, from one list.
macro_rules! registry {
    ($($variant:ident($ty:ty),)*) => {
        #[derive(Debug, Clone)]
        enum Kind {
            $($variant($ty),)*
        }

        $(impl From<$ty> for Locator {
            fn from(l: $ty) -> Locator {
                Locator { kind: Kind::$variant(l), whole: 0 }
            }
        })*

        impl Locate for Locator {
            fn streams(&self) -> usize {
                match &self.kind {
                    $(Kind::$variant(l) => Locate::streams(l),)*
                }
            }

            fn payload_len(&self) -> usize {
                if self.whole != 0 {
                    return self.whole;
                }
                match &self.kind {
                    $(Kind::$variant(l) => Locate::payload_len(l),)*
                }
            }

            fn station(&self) -> Option<u16> {
                match &self.kind {
                    $(Kind::$variant(l) => Locate::station(l),)*
                }
            }

            #[inline]
            fn locate<'a>(&self, packet: &'a [u8]) -> Result<Located<'a>, WireError> {
                let mut at = match &self.kind {
                    $(Kind::$variant(l) => Locate::locate(l, packet)?,)*
                };
                if self.whole != 0 {
                    // The format checked the packet's length; a longer one keeps
                    // its first `whole` bytes, as the sample bytes would be kept.
                    at.payload = packet.get(..self.whole).ok_or(WireError::Truncated)?;
                }
                Ok(at)
            }
        }

        impl StreamKeyed for Locator {
            fn stream_key(&self) -> Option<StreamKey> {
                match &self.kind {
                    $(Kind::$variant(l) => l.stream_key(),)*
                }
            }

            fn index_key(&self) -> Option<IndexKey> {
                match &self.kind {
                    $(Kind::$variant(l) => l.index_key(),)*
                }
            }

            fn min_packet_len(&self) -> usize {
                match &self.kind {
                    $(Kind::$variant(l) => l.min_packet_len(),)*
                }
            }
        }
    };
}

/// The [`Locate`] implementation for a validated [`super::FormatSpec`]
/// (built by `FormatSpec::locator`).
#[derive(Debug, Clone)]
pub struct Locator {
    kind: Kind,
    /// Non-zero: each packet's slot holds its first `whole` bytes, header
    /// included, instead of its sample bytes (see [`Locator::whole_packets`]).
    whole: usize,
}

impl Locator {
    /// Makes every located payload the whole packet of `packet_len` bytes
    /// (the UDP payload, format header included): what a recorder of VLBI
    /// layouts writes, frames as received. Only for fixed-length formats.
    pub fn whole_packets(mut self, packet_len: usize) -> Self {
        self.whole = packet_len;
        self
    }
}

registry! {
    Vdif(vdif::Locator),
    Ynao(ynao::Locator),
    Spead(spead::HeapMap),
    Codif(codif::Locator),
    Counter(counter::Locator),
    Layout(layout::Layout),
}

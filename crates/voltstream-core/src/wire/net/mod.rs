//! Ethernet, IPv4, IPv6 and UDP headers as checked zero-copy views, and the one
//! function every capture engine classifies a received frame with.
//!
//! Contract: as everywhere in `wire`, `new_checked` accepts any bytes and
//! returns a view whose accessors cannot panic, or the [`Reason`] it refused
//! them; no function here panics on any input (random-input unit tests, and the
//! `net` cargo-fuzz target). Views read their fields at fixed offsets from the
//! start of their buffer, so once inlined a view costs the loads a hand-written
//! parser would make, and nothing allocates.
//!
//! [`classify`] walks one frame (802.1Q/802.1ad tags, IPv4 options or IPv6
//! extension headers) to its UDP datagram ([`Udp`]) or says why it has none
//! ([`Rejected`]): the engines (`capture/`) decide from that what is theirs.

/// What every view here shares: the struct, its constructors and the payload
/// accessors, from the view's own `check_len` and `payload_range`.
macro_rules! view {
    // An IP header: also its version field, and the check every IP header
    // starts with (the fixed header is there, and of this module's version).
    ($what:literal, ip version $v:literal) => {
        view!($what);

        impl<T: AsRef<[u8]>> Packet<T> {
            /// The IP version: the high nibble of the first byte, in IPv4 and IPv6 alike.
            #[inline]
            pub fn version(&self) -> u8 {
                self.byte(0) >> 4
            }

            /// The buffer's length, when it holds the fixed header and the
            /// version is this header's.
            #[inline]
            fn fixed_header(&self) -> Result<usize, Reason> {
                let len = self.at_least(HEADER_LEN)?;
                if self.version() != $v {
                    return Err(Reason::BadVersion);
                }
                Ok(len)
            }
        }
    };
    ($what:literal) => {
        #[doc = concat!("A read/write view of one ", $what, " held in `T`.")]
        #[derive(Debug, Clone)]
        pub struct Packet<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> Packet<T> {
            /// Wraps a buffer without checks; accessors still never panic
            /// (reads past the end give zero, the payload is then empty).
            #[inline]
            pub fn new_unchecked(buffer: T) -> Self {
                Packet { buffer }
            }

            /// Wraps untrusted bytes: the checks of [`Self::check_len`].
            #[inline]
            pub fn new_checked(buffer: T) -> Result<Self, Reason> {
                let p = Packet { buffer };
                p.check_len()?;
                Ok(p)
            }

            pub fn into_inner(self) -> T {
                self.buffer
            }

            /// The buffer's length, when it holds at least `min` bytes.
            #[inline]
            fn at_least(&self, min: usize) -> Result<usize, Reason> {
                match self.buffer.as_ref().len() {
                    len if len < min => Err(Reason::Truncated),
                    len => Ok(len),
                }
            }

            #[inline]
            #[allow(dead_code)] // not every header has single-byte fields
            fn byte(&self, at: usize) -> u8 {
                self.buffer.as_ref().get(at).copied().unwrap_or(0)
            }

            /// The payload; empty when the buffer is shorter than the header
            /// says (possible only unchecked).
            #[inline]
            pub fn payload(&self) -> &[u8] {
                let r = self.payload_range();
                self.buffer.as_ref().get(r).unwrap_or(&[])
            }
        }

        impl<'a> Packet<&'a [u8]> {
            /// The payload, borrowed from the buffer rather than the view (a
            /// view made on the stack can hand it on).
            #[inline]
            pub fn into_payload(self) -> &'a [u8] {
                let r = self.payload_range();
                self.buffer.get(r).unwrap_or(&[])
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
            /// The payload, writable; empty if the view is too short.
            pub fn payload_mut(&mut self) -> &mut [u8] {
                let r = self.payload_range();
                self.buffer.as_mut().get_mut(r).unwrap_or(&mut [])
            }
        }
    };
}

pub mod build;
pub mod ethernet;
mod frame;
pub mod ipv4;
pub mod ipv6;
pub mod udp;

pub use frame::{classify, Rejected, Seen, Udp};

/// Why a frame holds no usable UDP datagram. Cheap to return per packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Neither IPv4 nor IPv6 (ARP, LLDP, a third VLAN tag...).
    NotIp,
    /// IP, but another protocol (TCP, ICMP, an IPv6 header we do not walk).
    NotUdp,
    /// One piece of a fragmented datagram: it cannot be reassembled here.
    Fragment,
    /// The frame ends before a header does, or before the IP length says.
    Truncated,
    /// Lengths that contradict each other (IHL, IP total length, UDP length).
    BadLength,
    /// A version field that does not match the ethertype.
    BadVersion,
}

impl core::fmt::Display for Reason {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Reason::NotIp => "not an IP frame",
            Reason::NotUdp => "not UDP",
            Reason::Fragment => "an IP fragment",
            Reason::Truncated => "frame cut short",
            Reason::BadLength => "inconsistent header lengths",
            Reason::BadVersion => "IP version does not match the ethertype",
        })
    }
}

impl std::error::Error for Reason {}

/// Big-endian u16 at `at`; 0 past the end (views never panic).
#[inline(always)]
fn be16(b: &[u8], at: usize) -> u16 {
    match b.get(at..at + 2) {
        Some(s) => u16::from_be_bytes([s[0], s[1]]),
        None => 0,
    }
}

/// Writes a big-endian u16 at `at` when it fits.
#[inline(always)]
fn set_be16(b: &mut [u8], at: usize, v: u16) {
    if let Some(s) = b.get_mut(at..at + 2) {
        s.copy_from_slice(&v.to_be_bytes());
    }
}

/// `N` bytes at `at`; zeros past the end.
#[inline(always)]
fn array<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    match b.get(at..at + N) {
        Some(s) => {
            let mut a = [0; N];
            a.copy_from_slice(s);
            a
        }
        None => [0; N],
    }
}

/// Copies `v` to `at` when it fits.
#[inline(always)]
fn set_bytes(b: &mut [u8], at: usize, v: &[u8]) {
    if let Some(s) = b.get_mut(at..at + v.len()) {
        s.copy_from_slice(v);
    }
}

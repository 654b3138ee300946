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

// Each header states its fields with `fields!` and its view with `view!`
// (`wire/field.rs`), the same macros as the payload formats; what is left
// here is what only network headers share.
use crate::wire::field::{fields, view, Field};

/// The buffer's length, when it holds at least `min` bytes.
#[inline(always)]
fn at_least(b: &[u8], min: usize) -> Result<usize, Reason> {
    match b.len() {
        len if len < min => Err(Reason::Truncated),
        len => Ok(len),
    }
}

/// The IP version: the high nibble of the first byte, in IPv4 and IPv6 alike.
const IP_VERSION: Field = Field::be(0, 1).part(4, 4);

/// An IP header's view: `view!`, and what IPv4 and IPv6 share at their start,
/// the version and the check every IP `check_len` begins with (the fixed
/// header, `HEADER_LEN` bytes, is there, and of this file's version).
macro_rules! ip_view {
    ($what:literal, version $v:literal) => {
        view! {
            #[doc = concat!("A read/write view of one ", $what, " held in `T`.")]
            checked by check_len, error Reason, payload
        }

        impl<T: AsRef<[u8]>> Packet<T> {
            #[doc = concat!("The IP version: ", $v, " in a header that passed the checks.")]
            #[inline]
            pub fn version(&self) -> u8 {
                super::IP_VERSION.get(self.buffer.as_ref()) as u8
            }

            /// The buffer's length, when it holds the fixed header and the
            /// version is this header's.
            #[inline]
            fn fixed_header(&self) -> Result<usize, Reason> {
                let len = super::at_least(self.buffer.as_ref(), HEADER_LEN)?;
                if self.version() != $v {
                    return Err(Reason::BadVersion);
                }
                Ok(len)
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
            /// Writes the version field (the other bits of its byte kept).
            fn store_version(&mut self) {
                super::IP_VERSION.set(self.buffer.as_mut(), $v);
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

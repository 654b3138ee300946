//! Steering: a classic BPF program that reads a packet's stream id and returns
//! the index of the capture thread that owns the stream.
//!
//! The kernel runs it once per packet for a `PACKET_FANOUT_CBPF` group (and
//! could for `SO_ATTACH_REUSEPORT_CBPF`), before any socket sees the packet,
//! and delivers the packet to member `return value % members`. It runs on the
//! received skb, whose data starts at the network header (the MAC header was
//! pulled and a VLAN tag moved out of line by then), so every load is relative
//! to `SKF_NET_OFF`, which the kernel resolves to the IP header wherever
//! `skb->data` points.
//!
//! The program is a plain chain, `jeq id; ret thread` per stream, so every jump
//! offset is 0 or 1 and any number of streams up to the kernel's 4096
//! instructions fits. Anything that is not one of our ids (another stream, a
//! packet too short for the load, non-IPv4) returns 0: thread 0 counts it
//! (malformed or foreign), or its socket filter drops it if it is not our
//! traffic at all. Steering is a placement hint, never a filter: every thread
//! still parses and checks each packet with the full locator.

use super::cbpf::{
    bpf, BPF_ABS, BPF_ALU, BPF_AND, BPF_B, BPF_H, BPF_IND, BPF_JEQ, BPF_JMP, BPF_K, BPF_LD,
    BPF_LSH, BPF_MISC, BPF_RET, BPF_TAX, BPF_W, SKF_NET_OFF,
};
use crate::wire::{Endian, StreamKey};
use crate::{Error, Result};

/// Bytes of the UDP header, before the payload the stream field lives in.
const UDP_HEADER: u32 = 8;
/// The kernel's limit on classic BPF program length (`BPF_MAXINSNS`).
const MAX_INSNS: usize = 4096;

/// The stream field as one 1-, 2- or 4-byte big-endian load from the UDP
/// payload, masked: what a classic BPF program can compare.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Load {
    /// Offset in the UDP payload.
    pub offset: u32,
    /// 1, 2 or 4 bytes.
    pub width: u32,
    pub mask: u32,
    /// Masked load value of each stream, in stream order.
    pub values: Vec<u32>,
}

/// The bytes of `raw` (a `bytes`-wide field value) as they sit in the packet.
fn image(raw: u64, bytes: usize, endian: Endian) -> Vec<u8> {
    match endian {
        Endian::Big => raw.to_be_bytes()[8 - bytes..].to_vec(),
        Endian::Little => raw.to_le_bytes()[..bytes].to_vec(),
    }
}

impl Load {
    /// Narrows the key's field to the bytes its bits occupy, as one load.
    pub fn new(key: &StreamKey) -> Result<Load> {
        let f = &key.field;
        let bytes = f.bytes as usize;
        let too_wide = || {
            Error::Config(format!(
                "the stream id field (bytes {}..{}) spans more than 4 bytes; a steering \
                 program cannot compare it, use threads=1",
                f.offset,
                f.offset + bytes
            ))
        };
        let shifted = |v: u64| v.checked_shl(f.shift as u32).unwrap_or(0);
        let mask = image(shifted(f.max()), bytes, f.endian);
        let (Some(lo), Some(hi)) = (
            mask.iter().position(|&b| b != 0),
            mask.iter().rposition(|&b| b != 0),
        ) else {
            return Err(too_wide());
        };
        let used = hi + 1 - lo;
        let width = match used {
            1 | 2 | 4 => used,
            3 => 4,
            _ => return Err(too_wide()),
        };
        // A 3-byte field is read as 4: take the byte after it when the packet
        // has one, else the byte before (its mask bits are 0 either way).
        let start = if f.offset + lo + width <= key.min_packet_len {
            f.offset + lo
        } else if f.offset + lo > 0 {
            f.offset + lo - 1
        } else {
            return Err(too_wide());
        };
        let window = |img: &[u8]| -> u32 {
            (start..start + width).fold(0u32, |acc, at| {
                let b = at
                    .checked_sub(f.offset)
                    .and_then(|i| img.get(i))
                    .copied()
                    .unwrap_or(0);
                acc << 8 | b as u32
            })
        };
        Ok(Load {
            offset: start as u32,
            width: width as u32,
            mask: window(&mask),
            values: key
                .ids
                .iter()
                .map(|&id| window(&image(shifted(id), bytes, f.endian)))
                .collect(),
        })
    }
}

/// The steering program: stream `s` (value `load.values[s]`) goes to member
/// `owner[s]`; everything else to member 0.
pub(crate) fn program(load: &Load, owner: &[usize]) -> Result<Vec<libc::sock_filter>> {
    if owner.len() != load.values.len() {
        return Err(Error::Config(format!(
            "steering needs an owner thread for each of the {} streams, got {}",
            load.values.len(),
            owner.len()
        )));
    }
    let size = match load.width {
        1 => BPF_B,
        2 => BPF_H,
        _ => BPF_W,
    };
    let mut p = vec![
        bpf(BPF_LD | BPF_B | BPF_ABS, 0, 0, SKF_NET_OFF), // version + IHL
        bpf(BPF_ALU | BPF_AND | BPF_K, 0, 0, 0x0f),
        bpf(BPF_ALU | BPF_LSH | BPF_K, 0, 0, 2),
        bpf(BPF_MISC | BPF_TAX, 0, 0, 0), // X = IP header length
        bpf(
            BPF_LD | size | BPF_IND,
            0,
            0,
            SKF_NET_OFF.wrapping_add(UDP_HEADER + load.offset),
        ),
        bpf(BPF_ALU | BPF_AND | BPF_K, 0, 0, load.mask),
    ];
    for (&v, &t) in load.values.iter().zip(owner) {
        p.push(bpf(BPF_JMP | BPF_JEQ | BPF_K, 0, 1, v));
        p.push(bpf(BPF_RET | BPF_K, 0, 0, t as u32));
    }
    p.push(bpf(BPF_RET | BPF_K, 0, 0, 0));
    if p.len() > MAX_INSNS {
        return Err(Error::Config(format!(
            "{} streams are too many to steer with one classic BPF program (at most {}); \
             use threads=1",
            owner.len(),
            (MAX_INSNS - 7) / 2
        )));
    }
    Ok(p)
}

/// The default assignment: thread `t` of `threads` owns a contiguous block of
/// streams (so "one thread per GPU" gets neighbouring subbands), the first
/// `streams % threads` threads one stream more.
pub fn contiguous_owners(streams: usize, threads: usize) -> Vec<usize> {
    (0..streams).map(|s| s * threads / streams).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{FormatSpec, LayoutField, StreamKeyed};

    /// Runs the steering program on an IPv4 packet (the skb data a steering
    /// program sees).
    pub(crate) fn run(p: &[libc::sock_filter], ip: &[u8]) -> u32 {
        crate::capture::cbpf::run(p, ip, 0, 0)
    }

    fn ipv4_udp(payload: &[u8], ihl_words: u8) -> Vec<u8> {
        let mut ip = vec![0x40 | ihl_words];
        ip.resize(ihl_words as usize * 4, 0);
        ip[9] = 17;
        ip.extend_from_slice(&[0; 8]); // UDP header
        ip.extend_from_slice(payload);
        ip
    }

    fn steer(spec: &FormatSpec, owner: &[usize], payload: &[u8]) -> u32 {
        let key = spec.locator().unwrap().stream_key().unwrap();
        let p = program(&Load::new(&key).unwrap(), owner).unwrap();
        run(&p, &ipv4_udp(payload, 5))
    }

    #[test]
    fn counter_packets_go_to_their_owner_and_others_to_zero() {
        let spec = FormatSpec::Counter {
            streams: 5,
            payload_len: 4,
        };
        let owner = contiguous_owners(5, 3);
        assert_eq!(owner, [0, 0, 1, 1, 2]);
        for s in 0..7u16 {
            let mut pkt = 77u64.to_be_bytes().to_vec();
            pkt.extend_from_slice(&s.to_be_bytes());
            pkt.extend_from_slice(&[1, 2, 3, 4]);
            let want = owner.get(s as usize).copied().unwrap_or(0) as u32;
            assert_eq!(steer(&spec, &owner, &pkt), want, "stream {s}");
            // Options in the IP header move the payload; the program follows.
            let key = spec.locator().unwrap().stream_key().unwrap();
            let p = program(&Load::new(&key).unwrap(), &owner).unwrap();
            assert_eq!(run(&p, &ipv4_udp(&pkt, 7)), want);
            assert_eq!(run(&p, &ipv4_udp(&pkt[..9], 5)), 0, "too short");
        }
    }

    #[test]
    fn vdif_and_codif_little_endian_thread_ids_are_matched() {
        let vdif = FormatSpec::Vdif {
            threads: vec![0x2a5, 7, 0x100],
            frame_len: 64,
            frames_per_second: 10,
            station: None,
            legacy: false,
        };
        let mut frame = vec![0xffu8; 64];
        for (s, t) in [0x2a5u32, 7, 0x100].into_iter().enumerate() {
            // Word 3: station in bits 0..16, thread in 16..26, other bits set.
            let w3 = 0xfc00_0000 | t << 16 | 0x4142;
            frame[12..16].copy_from_slice(&w3.to_le_bytes());
            assert_eq!(steer(&vdif, &[2, 1, 0], &frame), [2, 1, 0][s]);
        }
        frame[12..16].copy_from_slice(&(0x3u32 << 16).to_le_bytes());
        assert_eq!(steer(&vdif, &[2, 1, 0], &frame), 0);
        let codif = FormatSpec::Codif {
            threads: vec![9, 0xbeef],
            frame_len: 72,
            frames_per_period: 1,
            station: None,
            group: None,
        };
        let mut frame = vec![0u8; 72];
        frame[16..24].copy_from_slice(&(0xbeefu64 << 16 | 0xffff_0000_ffff).to_le_bytes());
        assert_eq!(steer(&codif, &[0, 1], &frame), 1);
    }

    #[test]
    fn a_three_byte_field_is_read_as_four_and_wide_fields_are_refused() {
        let key = StreamKey {
            field: LayoutField::be(2, 3),
            ids: vec![0x0a0b0c, 5],
            min_packet_len: 5,
        };
        // No byte after the field: the window starts one byte before it.
        let l = Load::new(&key).unwrap();
        assert_eq!((l.offset, l.width, l.mask), (1, 4, 0x00ff_ffff));
        assert_eq!(l.values, [0x0a0b0c, 5]);
        let wide = StreamKey {
            field: LayoutField::be(0, 8),
            ids: vec![1],
            min_packet_len: 8,
        };
        assert!(matches!(Load::new(&wide), Err(Error::Config(_))));
        let p = program(&l, &[1, 0]).unwrap();
        assert!(program(&l, &[1]).is_err());
        assert_eq!(run(&p, &ipv4_udp(&[9, 9, 0x0a, 0x0b, 0x0c], 5)), 1);
    }
}

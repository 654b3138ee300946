//! Steering whole chunks: one stream (or a whole band) spread over several
//! capture threads.
//!
//! Thread `t` of `n` owns the chunk ids `c` with `c mod n == t`, where
//! `c = index / packets_per_chunk` is the chunk the assembler places a packet
//! in. The kernel runs this classic BPF program once per packet for the
//! `PACKET_FANOUT_CBPF` group and delivers the packet to the member it returns.
//! So no chunk is ever written by two threads: each thread's assembler counts
//! its own chunks exactly, each chunk stays one contiguous buffer the GPU copies
//! as it is, and the consumer only interleaves chunk ids (the Python
//! `ChunkTimeline`). docs/architecture.md ("One stream over several cores")
//! says why this beat sharing chunks between threads.
//!
//! The program computes `(index mod M) / packets_per_chunk`, `M =
//! packets_per_chunk * n`, in the 32-bit arithmetic classic BPF has:
//! - `M` a power of two: the index's low 32 bits decide, and 32-bit wrapping
//!   products keep those exact (VDIF's `seconds * fps + frame`);
//! - otherwise `M < 2^16`: each part is reduced mod `M` before it is
//!   multiplied, so no product reaches `2^32`.
//!
//! Other sizes are refused with the packets-per-chunk values that work. Loads
//! past the end of a short packet make the kernel return 0: thread 0's locator
//! counts such a packet (malformed), as for stream steering.

use super::cbpf::{
    bpf, BPF_A, BPF_ABS, BPF_ADD, BPF_ALU, BPF_AND, BPF_B, BPF_DIV, BPF_H, BPF_IND, BPF_JEQ,
    BPF_JMP, BPF_K, BPF_LD, BPF_LDX, BPF_LSH, BPF_MEM, BPF_MISC, BPF_MOD, BPF_MUL, BPF_OR, BPF_RET,
    BPF_RSH, BPF_ST, BPF_STX, BPF_TAX, BPF_W, BPF_X, SKF_NET_OFF,
};
use crate::wire::{Endian, IndexKey, LayoutField};
use crate::{Error, Result};

/// Bytes of the UDP header, before the payload the index lives in.
const UDP_HEADER: u32 = 8;
/// Scratch slots: the IP header length (X, which arithmetic with X clobbers),
/// a byte being assembled, and a partial sum.
const IHL: u32 = 15;
const TMP: u32 = 0;
const PART: u32 = 1;

/// A program being written, one instruction per call.
struct Prog(Vec<libc::sock_filter>);

impl Prog {
    fn op(&mut self, code: u16, k: u32) {
        self.0.push(bpf(code, 0, 0, k));
    }

    /// A = the UDP payload byte at `at` (X must hold the IP header length).
    fn byte(&mut self, at: usize) {
        self.op(BPF_LD | BPF_B | BPF_IND, payload_k(at));
    }

    /// A = the unsigned integer of the bytes `msb_first` (each a payload
    /// offset, most significant first), at most 4 of them.
    fn bytes(&mut self, msb_first: &[usize]) {
        let Some((&first, rest)) = msb_first.split_first() else {
            return;
        };
        self.byte(first);
        for &at in rest {
            self.op(BPF_ALU | BPF_LSH | BPF_K, 8);
            self.op(BPF_ST, TMP);
            self.byte(at);
            self.op(BPF_LDX | BPF_MEM, TMP);
            self.op(BPF_ALU | BPF_OR | BPF_X, 0);
            self.op(BPF_LDX | BPF_MEM, IHL);
        }
    }

    /// A = `n` (1 to 4) bytes at payload offset `at`, read in `endian`.
    fn int(&mut self, at: usize, n: usize, endian: Endian) {
        match (endian, n) {
            (Endian::Big, 4) => self.op(BPF_LD | BPF_W | BPF_IND, payload_k(at)),
            (Endian::Big, 2) => self.op(BPF_LD | BPF_H | BPF_IND, payload_k(at)),
            (Endian::Big, _) => self.bytes(&(at..at + n).collect::<Vec<_>>()),
            (Endian::Little, _) => self.bytes(&(at..at + n).rev().collect::<Vec<_>>()),
        }
    }

    /// A = a field of at most 4 bytes, shifted and masked as the field says.
    fn field32(&mut self, f: &LayoutField) {
        self.int(f.offset, f.bytes as usize, f.endian);
        if f.shift > 0 {
            self.op(BPF_ALU | BPF_RSH | BPF_K, f.shift as u32);
        }
        if f.bits > 0 && f.bits < 32 {
            self.op(BPF_ALU | BPF_AND | BPF_K, ((1u64 << f.bits) - 1) as u32);
        }
    }

    /// A += the partial sum in slot PART (X is restored to the header length).
    fn add_part(&mut self) {
        self.op(BPF_LDX | BPF_MEM, PART);
        self.op(BPF_ALU | BPF_ADD | BPF_X, 0);
        self.op(BPF_LDX | BPF_MEM, IHL);
    }
}

fn payload_k(at: usize) -> u32 {
    SKF_NET_OFF.wrapping_add(UDP_HEADER + at as u32)
}

/// How the index is reduced: the low 32 bits masked (power-of-two modulus,
/// `None` when it is 2^32 itself), or each part taken mod a modulus below 2^16.
enum Reduce {
    Mask(Option<u32>),
    Mod(u32),
}

/// The program giving chunk `index / packets_per_chunk` to member `chunk mod
/// threads`. Errors say which packets-per-chunk values work.
pub(crate) fn chunk_program(
    key: &IndexKey,
    packets_per_chunk: usize,
    threads: usize,
) -> Result<Vec<libc::sock_filter>> {
    let m = packets_per_chunk as u64 * threads as u64;
    let reduce = if m.is_power_of_two() && m <= 1 << 32 {
        Reduce::Mask((m < 1 << 32).then(|| (m - 1) as u32))
    } else if m < 1 << 16 {
        Reduce::Mod(m as u32)
    } else {
        return Err(Error::Config(format!(
            "spreading chunks over {threads} capture threads needs packets_per_chunk x threads \
             to be a power of two or below 65536; {packets_per_chunk} x {threads} is neither: \
             use a power of two packets per chunk (e.g. {})",
            (packets_per_chunk as u64).next_power_of_two()
        )));
    };
    let mut p = Prog(vec![
        bpf(BPF_LD | BPF_B | BPF_ABS, 0, 0, SKF_NET_OFF), // version + IHL
        bpf(BPF_ALU | BPF_AND | BPF_K, 0, 0, 0x0f),
        bpf(BPF_ALU | BPF_LSH | BPF_K, 0, 0, 2),
        bpf(BPF_MISC | BPF_TAX, 0, 0, 0), // X = IP header length
        bpf(BPF_STX, 0, 0, IHL),
    ]);
    let reduce_a = |p: &mut Prog| match reduce {
        Reduce::Mask(Some(mask)) => p.op(BPF_ALU | BPF_AND | BPF_K, mask),
        Reduce::Mask(None) => {}
        Reduce::Mod(m) => p.op(BPF_ALU | BPF_MOD | BPF_K, m),
    };
    match key {
        IndexKey::Field(f) if f.bytes <= 4 => p.field32(f),
        IndexKey::Field(f) if f.bytes <= 8 && f.shift == 0 && f.bits == 0 => {
            let (n, at) = (f.bytes as usize, f.offset);
            // High and low words: where each sits depends on the byte order.
            let (hi, lo) = match f.endian {
                Endian::Big => (at, at + n - 4),
                Endian::Little => (at + 4, at),
            };
            if let Reduce::Mod(m) = reduce {
                p.int(hi, n - 4, f.endian);
                p.op(BPF_ALU | BPF_MOD | BPF_K, m);
                p.op(BPF_ALU | BPF_MUL | BPF_K, ((1u64 << 32) % m as u64) as u32);
                p.op(BPF_ST, PART);
                p.int(lo, 4, f.endian);
                p.op(BPF_ALU | BPF_MOD | BPF_K, m);
                p.add_part();
            } else {
                p.int(lo, 4, f.endian);
            }
        }
        IndexKey::SecondsFrames {
            seconds,
            frame,
            per_second,
        } => {
            p.field32(seconds);
            let per = match reduce {
                Reduce::Mod(m) => {
                    p.op(BPF_ALU | BPF_MOD | BPF_K, m);
                    per_second % m
                }
                Reduce::Mask(_) => *per_second,
            };
            p.op(BPF_ALU | BPF_MUL | BPF_K, per);
            p.op(BPF_ST, PART);
            p.field32(frame);
            if let Reduce::Mod(m) = reduce {
                p.op(BPF_ALU | BPF_MOD | BPF_K, m);
            }
            p.add_part();
        }
        IndexKey::TaggedShifted {
            value_at,
            value_bytes,
            shift,
            tag_at,
            tag,
        } => {
            // Only bits shift .. shift + log2(M) of the value decide, and
            // classic BPF reads 32 bits: they must lie in the low word.
            let fits = matches!(reduce, Reduce::Mask(_))
                && *value_bytes >= 4
                && *value_bytes <= 6
                && *shift + m.trailing_zeros() <= 32;
            if !fits {
                return Err(Error::Config(format!(
                    "steering SPEAD heaps to {threads} capture threads needs packets_per_chunk \
                     x threads x samples_per_heap to be a power of two of at most 2^32; \
                     {packets_per_chunk} x {threads} x 2^{shift} is not: use fewer or \
                     power-of-two packets per chunk, or one capture thread"
                )));
            }
            // Not the tagged item at that place: thread 0 takes it.
            p.op(BPF_LD | BPF_H | BPF_IND, payload_k(*tag_at));
            p.0.push(bpf(BPF_JMP | BPF_JEQ | BPF_K, 1, 0, *tag as u32));
            p.op(BPF_RET | BPF_K, 0);
            p.int(value_at + *value_bytes as usize - 4, 4, Endian::Big);
            if *shift > 0 {
                p.op(BPF_ALU | BPF_RSH | BPF_K, *shift);
            }
        }
        IndexKey::Field(f) => {
            return Err(Error::Config(format!(
                "the index field ({} bytes at {}) is too wide for a steering program; use \
                 one capture thread",
                f.bytes, f.offset
            )))
        }
    }
    reduce_a(&mut p);
    if packets_per_chunk.is_power_of_two() {
        p.op(
            BPF_ALU | BPF_RSH | BPF_K,
            packets_per_chunk.trailing_zeros(),
        );
    } else {
        p.op(BPF_ALU | BPF_DIV | BPF_K, packets_per_chunk as u32);
    }
    p.op(BPF_RET | BPF_A, 0);
    Ok(p.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{FormatSpec, StreamKeyed};

    fn ipv4_udp(payload: &[u8], ihl_words: u8) -> Vec<u8> {
        let mut ip = vec![0x40 | ihl_words];
        ip.resize(ihl_words as usize * 4, 0);
        ip[9] = 17;
        ip.extend_from_slice(&[0; 8]);
        ip.extend_from_slice(payload);
        ip
    }

    fn key(spec: &FormatSpec) -> IndexKey {
        spec.locator().unwrap().index_key().unwrap()
    }

    /// Indices near 0, near 2^32 and 2^64, and pseudo-random ones.
    fn indices() -> Vec<u64> {
        let mut v: Vec<u64> = (0..300)
            .chain((1u64 << 32) - 150..(1 << 32) + 150)
            .collect();
        v.extend(u64::MAX - 200..=u64::MAX);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            v.push(x);
        }
        v
    }

    #[test]
    fn ynao_and_counter_chunks_go_to_chunk_mod_threads() {
        let ynao = FormatSpec::Ynao { subband: None };
        let counter = FormatSpec::Counter {
            streams: 3,
            payload_len: 4,
        };
        for (ppc, n) in [
            (4096, 4),
            (4096, 3),
            (256, 2),
            (1000, 7),
            (1 << 20, 8),
            (1, 1),
        ] {
            for spec in [&ynao, &counter] {
                let p = chunk_program(&key(spec), ppc, n).unwrap();
                for idx in indices() {
                    let mut pkt = idx.to_be_bytes().to_vec();
                    pkt.resize(40, 0xa5);
                    let want = ((idx / ppc as u64) % n as u64) as u32;
                    let got = crate::capture::cbpf::run(&p, &ipv4_udp(&pkt, 5), 0, 0);
                    assert_eq!(got, want, "{spec:?} ppc {ppc} threads {n} index {idx}");
                    // IP options move the payload; the program follows.
                    let got = crate::capture::cbpf::run(&p, &ipv4_udp(&pkt, 6), 0, 0);
                    assert_eq!(got, want);
                }
            }
        }
    }

    #[test]
    fn vdif_chunks_follow_seconds_times_rate_plus_frame() {
        for (fps, ppc, n) in [
            (25_600u32, 4096usize, 4usize),
            (15_625, 4194, 2),
            (125_000, 1024, 3),
        ] {
            let spec = FormatSpec::Vdif {
                threads: vec![0, 1],
                frame_len: 64,
                frames_per_second: fps,
                station: None,
                legacy: false,
            };
            let p = chunk_program(&key(&spec), ppc, n).unwrap();
            let mut x = 12345u64;
            for i in 0..3000u64 {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let sec = if i < 1000 {
                    i as u32
                } else {
                    (x >> 34) as u32 & 0x3fff_ffff
                };
                let frame = ((x >> 8) % fps as u64) as u32;
                let mut f = vec![0u8; 64];
                // Other bits of words 0 and 1 set: invalid/legacy flags, ref epoch.
                f[0..4].copy_from_slice(&(sec | 0xc000_0000).to_le_bytes());
                f[4..8].copy_from_slice(&(frame | 0xff00_0000).to_le_bytes());
                let idx = sec as u64 * fps as u64 + frame as u64;
                let want = ((idx / ppc as u64) % n as u64) as u32;
                let got = crate::capture::cbpf::run(&p, &ipv4_udp(&f, 5), 0, 0);
                assert_eq!(
                    got, want,
                    "fps {fps} ppc {ppc} n {n} sec {sec} frame {frame}"
                );
            }
        }
    }

    #[test]
    fn sizes_no_program_can_compute_are_refused_with_values_that_work() {
        let ynao = FormatSpec::Ynao { subband: None };
        let e = chunk_program(&key(&ynao), 40_000, 3)
            .unwrap_err()
            .to_string();
        assert!(e.contains("65536") && e.contains("65536)"), "{e}");
        // A short packet returns 0: thread 0's locator counts it.
        let p = chunk_program(&key(&ynao), 4096, 4).unwrap();
        assert_eq!(
            crate::capture::cbpf::run(&p, &ipv4_udp(&[1, 2, 3], 5), 0, 0),
            0
        );
    }

    /// A digitiser packet (SPEAD-64-48, time stamp item at pointer 4).
    fn spead_dig(timestamp: u64, id: u64) -> Vec<u8> {
        let r = crate::wire::SpeadRepr::digitiser(timestamp, 4096, id, 64);
        let mut b = vec![0u8; r.packet_len()];
        r.emit(&mut crate::wire::SpeadPacket::new_unchecked(&mut b[..]))
            .unwrap();
        b
    }

    #[test]
    fn spead_digitiser_chunks_follow_timestamp_over_samples_per_heap() {
        let spec = FormatSpec::spead_digitiser(vec![0, 1], 4096, 8).unwrap();
        for (ppc, n) in [(256usize, 2usize), (1024, 4), (1, 1), (1 << 20, 1)] {
            let p = chunk_program(&key(&spec), ppc, n).unwrap();
            for heap in indices() {
                // Time stamps are 48-bit: heaps below 2^36 at 4096 samples.
                let heap = heap & ((1 << 36) - 1);
                let pkt = spead_dig(heap * 4096, heap & 1);
                let want = ((heap / ppc as u64) % n as u64) as u32;
                let got = crate::capture::cbpf::run(&p, &ipv4_udp(&pkt, 5), 0, 0);
                assert_eq!(got, want, "ppc {ppc} threads {n} heap {heap}");
                let got = crate::capture::cbpf::run(&p, &ipv4_udp(&pkt, 7), 0, 0);
                assert_eq!(got, want);
            }
        }
    }

    #[test]
    fn spead_packet_without_the_timestamp_there_goes_to_thread_0() {
        let spec = FormatSpec::spead_digitiser(vec![0, 1], 4096, 8).unwrap();
        let p = chunk_program(&key(&spec), 4, 2).unwrap();
        let mut pkt = spead_dig(4 * 4096, 0);
        assert_eq!(crate::capture::cbpf::run(&p, &ipv4_udp(&pkt, 5), 0, 0), 1);
        // Swap the time stamp (pointer 4) and id (pointer 5) items.
        let (a, b) = (8 + 8 * 4, 8 + 8 * 5);
        let ts: Vec<u8> = pkt[a..a + 8].to_vec();
        pkt.copy_within(b..b + 8, a);
        pkt[b..b + 8].copy_from_slice(&ts);
        assert_eq!(crate::capture::cbpf::run(&p, &ipv4_udp(&pkt, 5), 0, 0), 0);
        assert_eq!(
            crate::capture::cbpf::run(&p, &ipv4_udp(&pkt[..20], 5), 0, 0),
            0
        );
    }

    #[test]
    fn spead_sizes_beyond_the_low_word_or_not_powers_of_two_are_refused() {
        let spec = FormatSpec::spead_digitiser(vec![0], 4096, 8).unwrap();
        // 4096 samples x 2^20 x 2 threads = 2^33.
        let e = chunk_program(&key(&spec), 1 << 20, 2)
            .unwrap_err()
            .to_string();
        assert!(e.contains("power of two of at most 2^32"), "{e}");
        let e = chunk_program(&key(&spec), 1000, 3).unwrap_err().to_string();
        assert!(e.contains("one capture thread"), "{e}");
        // Several packets per heap, or samples per heap not a power of two:
        // no key, the capture says to use one thread.
        let multi = FormatSpec::spead_heaps(
            vec![0],
            4096,
            8192,
            2,
            crate::wire::SpeadHeapIndex::Timestamp,
        )
        .unwrap();
        assert!(multi.locator().unwrap().index_key().is_none());
        let odd = FormatSpec::spead_digitiser(vec![0], 3000, 8).unwrap();
        assert!(odd.locator().unwrap().index_key().is_none());
    }
}

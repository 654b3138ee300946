//! Writes the seed inputs of the cargo-fuzz targets (fuzz/fuzz_targets) into
//! `<dir>/<target>/<name>`: valid packets of each format, so that a short CI run
//! starts past the header checks, and assembler scripts that already reorder,
//! duplicate, resync and starve. The seeds in fuzz/seeds are this program's
//! output; regenerate them after changing a format or the assembler script:
//!
//! ```text
//! cargo run -q -p voltstream-core --example fuzz_seeds -- fuzz/seeds
//! ```
use std::path::Path;

use voltstream_core::wire::{codif, counter, spead, vdif, ynao};

fn write(dir: &Path, target: &str, name: &str, bytes: &[u8]) {
    let d = dir.join(target);
    std::fs::create_dir_all(&d).expect("seed directory");
    std::fs::write(d.join(name), bytes).expect("seed file");
}

fn vdif_frame(thread: u16, frame: u32, frame_len: usize, legacy: bool) -> Vec<u8> {
    let r = vdif::Repr {
        invalid: false,
        legacy,
        seconds: 12_345,
        ref_epoch: 48,
        frame,
        version: 1,
        log2_nchan: 2,
        frame_len,
        complex: false,
        bits_per_sample: 2,
        thread,
        station: 0x4142,
        edv: 0,
    };
    let mut b: Vec<u8> = (0..frame_len).map(|i| i as u8).collect();
    r.emit(&mut vdif::Packet::new_unchecked(&mut b[..]))
        .expect("a valid VDIF header");
    b
}

fn codif_frame(thread: u16, frame: u32, data_len: usize) -> Vec<u8> {
    let r = codif::Repr {
        complex: true,
        seconds: 27 * 100,
        frame,
        epoch: 48,
        station: 0x4b41,
        bits_per_sample: 16,
        data_len,
        group: 2,
        thread,
        nchan: 2,
        block_len: 1,
        period: 27,
        total_samples: 32_000,
        ..Default::default()
    };
    let mut b = vec![3u8; r.frame_len()];
    r.emit(&mut codif::Packet::new_unchecked(&mut b[..]))
        .expect("a valid CODIF header");
    b
}

fn spead_heap(timestamp: u64, id: u64, len: usize) -> Vec<u8> {
    let r = spead::Repr::digitiser(timestamp, 64, id, len as u64);
    let mut b = vec![0x5au8; r.packet_len()];
    r.emit(&mut spead::Packet::new_unchecked(&mut b[..]))
        .expect("a valid SPEAD header");
    b
}

fn ynao_frame(subband: u8) -> Vec<u8> {
    let mut b = vec![7u8; ynao::FRAME_LEN];
    ynao::Repr {
        sequence: 1 << 33,
        mjd: 60_000,
        second: 5,
        nanosecond: 16_000,
        subband,
    }
    .emit(&mut ynao::Packet::new_unchecked(&mut b[..]))
    .expect("a valid YNAO header");
    b
}

fn counter_packet(stream: u16, index: u64, payload_len: usize) -> Vec<u8> {
    let mut b = vec![0x33u8; counter::HEADER_LEN + payload_len];
    counter::Repr { index, stream }
        .emit(&mut counter::Packet::new_unchecked(&mut b[..]))
        .expect("room for the header");
    b
}

/// Builds an input of fuzz_targets/assembler.rs; see that file for the
/// encoding (configuration bytes, start cursor, then one op per packet).
struct Script(Vec<u8>);

impl Script {
    /// streams, packets per chunk, window, resync bound, chunks in the pool,
    /// chunks the consumer holds, payload bytes (each minus its minimum), cursor.
    fn new(cfg: [u8; 7], cursor: u64) -> Script {
        let mut v = cfg.to_vec();
        v.extend((cursor << 40).to_le_bytes());
        Script(v)
    }
    fn op(mut self, kind: u8, arg: u8, extra: &[u8]) -> Script {
        self.0.push(kind << 5 | arg);
        self.0.push(0x11); // salt
        self.0.extend_from_slice(extra);
        self
    }
    /// In-order packet of `stream`, advancing the cursor when `advance`.
    fn next(self, stream: u8, advance: bool) -> Script {
        self.op(0, stream | if advance { 0x10 } else { 0 }, &[])
    }
    fn near(self, stream: u8, delta: i8) -> Script {
        self.op(2, stream, &[delta as u8])
    }
    fn step(self, stream: u8, delta: i16) -> Script {
        self.op(3, stream, &delta.to_le_bytes())
    }
    fn run(mut self, streams: u8, n: usize) -> Script {
        for _ in 0..n {
            for s in 0..streams {
                self = self.next(s, s + 1 == streams);
            }
        }
        self
    }
}

fn assembler_seeds(dir: &Path) {
    let t = "assembler";
    // Two streams, 4 per chunk, window 2, resync 8, 6 chunks, hold 1, 8 bytes:
    // steady traffic with reordering, duplicates (same and other bytes) and
    // late packets.
    let s = Script::new([1, 3, 1, 7, 5, 1, 7], 100)
        .run(2, 6)
        .near(0, -3)
        .near(1, 2)
        .op(5, 0, &[])
        .op(5, 1, &[])
        .run(2, 5)
        .near(0, -20)
        .run(2, 3);
    write(dir, t, "reorder_dup_late", &s.0);
    // Gaps, a far jump and a far step back (two resyncs), a finish and the
    // end of the 64-bit timeline.
    let s = Script::new([0, 8, 2, 3, 5, 0, 3], 7)
        .run(1, 10)
        .step(0, 40)
        .run(1, 4)
        .op(4, 1, &(1u64 << 50).to_le_bytes())
        .run(1, 4)
        .step(0, -2000)
        .run(1, 3)
        .op(7, 0, &[])
        .op(4, 0, &[3])
        .run(1, 4);
    write(dir, t, "gaps_resync_end", &s.0);
    // Three streams, 70 per chunk (a bitmap of 4 words), one chunk in the pool
    // and a consumer that holds it: chunks dropped whole, then released.
    let s = Script::new([2, 69, 0, 1, 0, 3, 0], 1)
        .run(3, 80)
        .op(7, 1, &[])
        .run(3, 80);
    write(dir, t, "starved", &s.0);
    // Foreign, truncated, too long and garbage packets between good ones.
    let s = Script::new([1, 1, 1, 1, 3, 0, 4], 50)
        .run(2, 4)
        .op(6, 0, &[2, 0])
        .op(6, 1, &[5])
        .op(6, 2, &[])
        .op(6, 3, &[12, 0, 0, 0, 0, 0, 0, 0, 9, 0, 1, 7, 7])
        .run(2, 4);
    write(dir, t, "foreign_malformed", &s.0);
    // A resync bound of 2^40 chunks (config byte 163) and a jump of 2^30
    // packets below it: counted missing, no resync.
    let s = Script::new([0, 3, 1, 163, 3, 0, 3], 5)
        .run(1, 8)
        .op(3, 0x10, &[1, 0, 30])
        .run(1, 4);
    write(dir, t, "long_jump_below_resync", &s.0);
}

fn main() {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "fuzz/seeds".into());
    let dir = Path::new(&dir);
    // Each target's locator config is in its source: VDIF threads 0, 1, 7 at
    // 1000 frames/s; CODIF threads 0, 1, 7; SPEAD digitisers 0, 1, 0x42 with
    // 64 samples of 10 bits; counter with 3 streams of 64 bytes.
    write(dir, "vdif", "thread1_64", &vdif_frame(1, 999, 64, false));
    write(dir, "vdif", "thread7_1056", &vdif_frame(7, 3, 1056, false));
    write(dir, "vdif", "legacy", &vdif_frame(0, 0, 64, true));
    write(dir, "codif", "thread1", &codif_frame(1, 999, 8));
    write(dir, "codif", "thread7_1024", &codif_frame(7, 5, 1024));
    write(dir, "spead", "dig1", &spead_heap(64 * 1_000_003, 1, 80));
    write(dir, "spead", "dig42", &spead_heap(0, 0x42, 80));
    write(dir, "ynao", "subband0", &ynao_frame(0));
    write(dir, "ynao", "subband3", &ynao_frame(3));
    write(dir, "counter", "stream2", &counter_packet(2, 1 << 40, 64));
    write(dir, "counter", "foreign", &counter_packet(3, 5, 64));
    // Layout: a 24-byte table (see fuzz_targets/layout.rs) then the packet:
    // index u64 BE at 0, stream u16 BE at 8 (ids 0 and 1), check byte 10 ==
    // 0x55, 16 payload bytes at 16.
    let mut l = vec![0, 8, 0, 0, 0, 1, 1, 8, 2, 0, 0, 0, 1, 10, 1, 0, 0, 0];
    l.extend([0x55, 0, 16, 16, 0, 0]);
    let mut p = counter_packet(1, 77, 22);
    p[10] = 0x55;
    l.extend(p);
    write(dir, "layout", "counter_like", &l);
    assembler_seeds(dir);
}

//! The recorder on a real capture thread fed from memory, writing to real files.

use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::{Layout, RecordSpec, Recorder};
use crate::capture::{Capture, ChunkConfig, InMemoryEngine};
use crate::wire::{vdif, FormatSpec, Locator};
use crate::Error;

const LEN: usize = 1024;
const PER_CHUNK: usize = 8; // 2 streams x 8 packets a chunk

fn packet(stream: u16, index: u64) -> Vec<u8> {
    let mut p = index.to_be_bytes().to_vec();
    p.extend_from_slice(&stream.to_be_bytes());
    p.extend((0..LEN).map(|k| (index as usize * 131 + k * 7 + stream as usize) as u8));
    p
}

/// A fresh directory under the temporary dir, standing in for one disk.
fn disk(test: &str, k: usize) -> PathBuf {
    let d = std::env::temp_dir().join(format!("vs-record-{test}-{}-{k}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    d
}

/// Captures `chunks` whole chunks of two counter streams from memory, recording
/// them as `spec` says; `during` runs once the recorder has started.
fn record(chunks: u64, spec: &RecordSpec, during: impl FnOnce()) -> super::RecordReport {
    record_without(chunks, spec, &[], during)
}

/// As `record`, with the packets `skip` (stream, index) never sent.
fn record_without(
    chunks: u64,
    spec: &RecordSpec,
    skip: &[(u16, u64)],
    during: impl FnOnce(),
) -> super::RecordReport {
    let packets = (0..chunks * PER_CHUNK as u64)
        .flat_map(|i| (0..2u16).map(move |s| (s, i)))
        .filter(|si| !skip.contains(si))
        .map(|(s, i)| packet(s, i))
        .collect::<Vec<_>>();
    let locate = FormatSpec::Counter {
        streams: 2,
        payload_len: LEN,
    }
    .locator()
    .unwrap();
    let locate = if spec.layout.whole_packets() {
        locate.whole_packets(LEN + 10)
    } else {
        locate
    };
    run_capture(packets, locate, 2 * chunks * PER_CHUNK as u64, spec, during)
}

/// Captures `packets` (`all` of them ours) from memory into `spec`'s recording,
/// with a pool that holds every chunk (the capture never lacks a free one).
fn run_capture(
    packets: Vec<Vec<u8>>,
    locate: Locator,
    all: u64,
    spec: &RecordSpec,
    during: impl FnOnce(),
) -> super::RecordReport {
    let pool = 2 * (all / PER_CHUNK as u64) as usize + 4;
    let (report, dropped) = capture_into(packets, locate, all, pool, spec, during);
    // The recorder never held the capture back: no chunk lacked a free buffer.
    assert_eq!(dropped, 0);
    report
}

/// As `run_capture` with a pool of `pool` chunks; also returns the chunks the
/// capture dropped for want of a free one.
fn capture_into(
    packets: Vec<Vec<u8>>,
    locate: Locator,
    all: u64,
    pool: usize,
    spec: &RecordSpec,
    during: impl FnOnce(),
) -> (super::RecordReport, u64) {
    let skipped = all - packets.len() as u64;
    let engine = InMemoryEngine::from_packets(packets);
    let streams: Vec<usize> = (0..locate_streams(&locate)).collect();
    let mut cfg = ChunkConfig::new(PER_CHUNK);
    cfg.nchunks = pool;
    let cap = Capture::start(engine, locate, &cfg, None).unwrap();
    let rec = Recorder::start(vec![cap.consumer()], vec![streams], spec).unwrap();
    during();
    // Every packet read (the last chunks stay open until the stop flushes them).
    let all = all - skipped;
    let deadline = Instant::now() + Duration::from_secs(10);
    while cap.stats().counters.total().seen() < all && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    cap.stop().unwrap();
    let (report, _) = rec.finish();
    (report, cap.stats().counters.chunks_dropped)
}

/// `chunks` whole chunks of both counter streams, in time order.
fn counter_packets(chunks: u64) -> Vec<Vec<u8>> {
    (0..chunks * PER_CHUNK as u64)
        .flat_map(|i| (0..2u16).map(move |s| packet(s, i)))
        .collect()
}

/// The two counter streams' locator, keeping whole packets (vbs, Mark6).
fn whole_counter_locator() -> Locator {
    FormatSpec::Counter {
        streams: 2,
        payload_len: LEN,
    }
    .locator()
    .unwrap()
    .whole_packets(LEN + 10)
}

fn locate_streams(l: &Locator) -> usize {
    crate::wire::Locate::streams(l)
}

/// Every chunk file of `scan` on `disks`, by number.
fn chunk_files(disks: &[PathBuf], scan: &str) -> Vec<(u64, PathBuf)> {
    let mut files = Vec::new();
    for d in disks {
        for e in fs::read_dir(d.join(scan)).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_str().unwrap().to_string();
            let number = name.strip_prefix(&format!("{scan}.")).unwrap();
            assert_eq!(number.len(), 8, "{name}: an 8-digit chunk number");
            files.push((number.parse().unwrap(), p));
        }
    }
    files.sort();
    files
}

/// Every file holds its chunk's payloads exactly.
fn assert_intact(files: &[(u64, PathBuf)]) {
    for (n, path) in files {
        assert_eq!(
            fs::read(path).unwrap(),
            expected_chunk(*n),
            "{}",
            path.display()
        );
    }
}

/// One disk and a spec recording `scan` on it with `queue` chunks of queue.
fn one_disk(test: &str, scan: &str, queue: usize) -> (Vec<PathBuf>, RecordSpec) {
    let disks = vec![disk(test, 0)];
    let mut spec = RecordSpec::new(disks.clone(), scan);
    spec.queue_chunks = queue;
    (disks, spec)
}

/// Chunk `c` as the vbs layout writes it: whole packets, stream by stream.
fn expected_chunk(c: u64) -> Vec<u8> {
    (0..2u16).flat_map(|s| expected_run(s, c, 1, 0)).collect()
}

/// `chunks` chunks of stream `s` from chunk `c` on, each packet from byte `skip`.
fn expected_run(s: u16, c: u64, chunks: u64, skip: usize) -> Vec<u8> {
    let per = PER_CHUNK as u64;
    (c * per..(c + chunks) * per)
        .flat_map(|i| packet(s, i)[skip..].to_vec())
        .collect()
}

#[test]
fn every_chunk_lands_whole_in_its_numbered_file_across_the_disks() {
    let disks: Vec<_> = (0..3).map(|k| disk("spread", k)).collect();
    // Queues deep enough for the whole burst: here every chunk must be written.
    let mut spec = RecordSpec::new(disks.clone(), "scan1");
    spec.queue_chunks = 30;
    let report = record(30, &spec, || {});
    assert_eq!(report.chunks_unwritten, 0);
    assert_eq!(report.chunks_written, 30);
    assert_eq!(
        report.bytes_written,
        30 * 2 * PER_CHUNK as u64 * (LEN as u64 + 10)
    );
    let files = chunk_files(&disks, "scan1");
    let numbers: Vec<u64> = files.iter().map(|(n, _)| *n).collect();
    assert_eq!(numbers, (0..30).collect::<Vec<_>>());
    assert_intact(&files);
    // Idle disks share the work; no writer failed, nothing is left half-written.
    for w in &report.writers {
        assert!(
            w.chunks > 0 && w.failed.is_none() && w.lost_chunks == 0,
            "{w:?}"
        );
        assert!(fs::read_dir(&w.dir).unwrap().all(|e| {
            let name = e.unwrap().file_name();
            !name.to_string_lossy().ends_with(".partial")
        }));
    }
    disks.iter().for_each(|d| fs::remove_dir_all(d).unwrap());
}

#[test]
fn a_failed_disk_is_taken_out_and_every_chunk_is_counted_once() {
    let disks: Vec<_> = (0..2).map(|k| disk("fail", k)).collect();
    let broken = disks[1].join("scan2");
    let report = record(40, &RecordSpec::new(disks.clone(), "scan2"), || {
        // The disk goes away under the recorder: its scan folder becomes a file,
        // so every create in it fails (ENOTDIR).
        fs::remove_dir_all(&broken).unwrap();
        fs::write(&broken, b"not a folder").unwrap();
    });
    let (good, bad) = (&report.writers[0], &report.writers[1]);
    assert!(bad.failed.as_deref().unwrap().contains("scan2"), "{bad:?}");
    assert!(bad.lost_chunks >= 1 && bad.chunks == 0, "{bad:?}");
    assert!(good.failed.is_none() && good.lost_chunks == 0);
    let accounted = report.chunks_written + report.chunks_unwritten + bad.lost_chunks;
    assert_eq!(accounted, 40, "{report:?}");
    // What the good disk holds is whole and correct.
    assert_intact(&chunk_files(&disks[..1], "scan2"));
    assert_eq!(report.chunks_written, good.chunks);
    disks.iter().for_each(|d| fs::remove_dir_all(d).unwrap());
}

#[test]
fn a_disk_that_falls_behind_costs_whole_chunks_counted_never_a_partial_one() {
    // The disk stops answering (files.rs: a STALL file in the scan folder) while
    // the capture runs. The dispatcher holds what it can of a small pool, then
    // lets the oldest chunks go, counted, so the capture goes on; the disk comes
    // back and writes what it was given.
    let (disks, spec) = one_disk("slow", "scan3", 1);
    let stall = disks[0].join("scan3").join("STALL");
    let packets = counter_packets(30);
    let locate = whole_counter_locator();
    let all = 30 * 2 * PER_CHUNK as u64;
    let marker = stall.clone();
    let (report, dropped) = capture_into(packets, locate, all, 8, &spec, move || {
        fs::write(&marker, b"").unwrap();
        let unmark = marker.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            fs::remove_file(unmark).unwrap();
        });
    });
    assert!(report.chunks_unwritten > 0, "{report:?}");
    assert!(report.chunks_written > 0, "{report:?}");
    assert_eq!(
        report.chunks_written + report.chunks_unwritten + dropped,
        30,
        "{report:?}"
    );
    // What was written is whole chunk files, each right; none is partial.
    let files = chunk_files(&disks, "scan3");
    assert_eq!(files.len() as u64, report.chunks_written);
    // Chunks are numbered as the recorder takes them: chunks the capture itself
    // dropped (the feeder outruns the stalled pool) were never taken, so file n
    // holds the n-th chunk taken, not chunk n of the stream. Each file must still
    // be one whole chunk, exactly, in time order.
    let mut last = None;
    for (n, path) in &files {
        let data = fs::read(path).unwrap();
        let first = u64::from_be_bytes(data[..8].try_into().unwrap());
        let chunk = first / PER_CHUNK as u64;
        assert_eq!(data, expected_chunk(chunk), "file {n} ({})", path.display());
        assert!(
            last < Some(chunk),
            "file {n}: chunk {chunk} after chunk {last:?}"
        );
        last = Some(chunk);
    }
    disks.iter().for_each(|d| fs::remove_dir_all(d).unwrap());
}

#[test]
fn a_packet_that_never_came_is_written_as_zeros_and_counted() {
    let (disks, spec) = one_disk("zero", "scan4", 8);
    let report = record_without(4, &spec, &[(1, 5)], || {});
    assert_eq!(report.chunks_written, 4);
    assert_eq!(report.writers[0].filled_packets, 1);
    let files = chunk_files(&disks, "scan4");
    let mut want = expected_chunk(0);
    let (slot, len) = (PER_CHUNK + 5, LEN + 10); // stream 1, packet 5; whole packets
    want[slot * len..(slot + 1) * len].fill(0);
    assert_eq!(fs::read(&files[0].1).unwrap(), want);
    assert_intact(&files[1..]);
    disks.iter().for_each(|d| fs::remove_dir_all(d).unwrap());
}

#[test]
fn bad_specs_and_existing_scans_are_refused_by_name() {
    let d = disk("spec", 0);
    let config = |spec: RecordSpec| match spec.validate() {
        Err(Error::Config(m)) => m,
        other => panic!("expected a config error, got {other:?}"),
    };
    assert!(config(RecordSpec::new(vec![], "s")).contains("at least one directory"));
    assert!(config(RecordSpec::new(vec![d.clone()], "../up")).contains("scan name"));
    assert!(config(RecordSpec::new(vec![d.clone()], "")).contains("scan name"));
    fs::create_dir(d.join("taken")).unwrap();
    let err = Recorder::start(vec![], vec![], &RecordSpec::new(vec![d.clone()], "taken"))
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("cannot create the scan folder") && err.contains("taken"),
        "{err}"
    );
    fs::remove_dir_all(&d).unwrap();
}

/// Every file of `scan` on `disks` whose name ends with `ext`, sorted by name.
fn files_ending(disks: &[PathBuf], scan: &str, ext: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = disks
        .iter()
        .flat_map(|d| fs::read_dir(d.join(scan)).unwrap())
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(ext))
        .collect();
    files.sort_by_key(|p| p.file_name().unwrap().to_owned());
    files
}

fn takes_direct(dir: &std::path::Path) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    let probe = dir.join("direct-probe");
    let ok = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .custom_flags(libc::O_DIRECT)
        .open(&probe)
        .is_ok();
    let _ = fs::remove_file(probe);
    ok
}

fn dada_key(header: &str, key: &str) -> u64 {
    let line = header.lines().find(|l| l.starts_with(&format!("{key} ")));
    line.unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn dada_files_hold_runs_of_one_stream_with_headers_that_say_where() {
    let (disks, mut spec) = one_disk("dada", "scan5", 30);
    spec.layout = Layout::Dada {
        headers: vec!["HDR_VERSION 1.0\nNBIT 8".into()],
    };
    spec.file_chunks = 3;
    let report = record(7, &spec, || {});
    assert_eq!(report.chunks_written, 7, "{report:?}");
    // Each stream's part of a chunk (8 KiB) is page-aligned in the pool, and so is
    // its place after the 4096-byte header: written with O_DIRECT where the file
    // system takes it (not tmpfs).
    if takes_direct(&disks[0]) {
        assert_eq!(report.writers[0].direct_chunks, 7, "{report:?}");
    }
    let part = (PER_CHUNK * LEN) as u64; // one stream's bytes of a chunk
    for s in 0..2u16 {
        let files = files_ending(&disks, "scan5", ".dada");
        let mine: Vec<_> = files
            .iter()
            .filter(|p| p.to_string_lossy().contains(&format!("_s{s:02}_")))
            .collect();
        assert_eq!(mine.len(), 3, "{files:?}"); // 3 + 3 + 1 chunks
        for (k, path) in mine.iter().enumerate() {
            let bytes = fs::read(path).unwrap();
            let text = String::from_utf8_lossy(&bytes[..super::DADA_HEADER_LEN]);
            let text = text.trim_end_matches('\0');
            assert!(text.starts_with("HDR_VERSION 1.0\nNBIT 8\n"), "{text}");
            let chunks = if k < 2 { 3 } else { 1 };
            assert_eq!(dada_key(text, "FILE_SIZE"), chunks * part, "{text}");
            assert_eq!(dada_key(text, "FILE_NUMBER"), k as u64);
            assert_eq!(dada_key(text, "OBS_OFFSET"), 3 * k as u64 * part);
            assert_eq!(dada_key(text, "HDR_SIZE"), 4096);
            let name = format!("scan5_s{s:02}_{:016}.dada", 3 * k as u64 * part);
            assert!(path.ends_with(&name), "{path:?}");
            let data = &bytes[super::DADA_HEADER_LEN..];
            assert!(
                data == expected_run(s, 3 * k as u64, chunks, 10),
                "{path:?}"
            );
        }
    }
    disks.iter().for_each(|d| fs::remove_dir_all(d).unwrap());
}

#[test]
fn a_missing_chunk_ends_a_dada_file_and_the_next_starts_at_its_offset() {
    let (disks, mut spec) = one_disk("dadagap", "scan6", 30);
    spec.layout = Layout::Dada {
        headers: vec![String::new()],
    };
    spec.file_chunks = 10;
    // Chunk 2 of 6 never arrives (both streams), so the run breaks there.
    let skip: Vec<(u16, u64)> = (0..2u16)
        .flat_map(|s| (2 * PER_CHUNK as u64..3 * PER_CHUNK as u64).map(move |i| (s, i)))
        .collect();
    let report = record_without(6, &spec, &skip, || {});
    let files = files_ending(&disks, "scan6", ".dada");
    let offsets: Vec<u64> = files
        .iter()
        .map(|p| {
            let text = String::from_utf8_lossy(&fs::read(p).unwrap()[..256]).into_owned();
            dada_key(&text, "OBS_OFFSET")
        })
        .collect();
    let part = (PER_CHUNK * LEN) as u64;
    // Each stream: chunks 0-1 in one file, 3-5 in the next (the assembler may
    // deliver the gap as a chunk of absent packets instead: then one file).
    assert!(
        offsets == vec![0, 3 * part, 0, 3 * part] || offsets == vec![0, 0],
        "{offsets:?} {report:?}"
    );
    disks.iter().for_each(|d| fs::remove_dir_all(d).unwrap());
}

/// The Mark6 blocks of `path`: (block number, data), checking the file header.
fn mark6_blocks(path: &std::path::Path, packet_size: i32) -> Vec<(u32, Vec<u8>)> {
    let bytes = fs::read(path).unwrap();
    let word = |at: usize| i32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    assert_eq!(word(0) as u32, super::MARK6_SYNC);
    assert_eq!((word(4), word(12), word(16)), (2, 2, packet_size));
    let mut blocks = Vec::new();
    let mut at = 20;
    while at < bytes.len() {
        let (number, size) = (word(at) as u32, word(at + 4) as usize);
        assert!(size <= word(8) as usize);
        blocks.push((number, bytes[at + 8..at + size].to_vec()));
        at += size;
    }
    assert_eq!(at, bytes.len(), "no partial block");
    blocks
}

#[test]
fn mark6_files_gather_back_into_every_chunk_in_order() {
    let disks: Vec<_> = (0..2).map(|k| disk("mark6", k)).collect();
    let mut spec = RecordSpec::new(disks.clone(), "scan7");
    spec.layout = Layout::Mark6 { packet_format: 2 };
    spec.queue_chunks = 30;
    let report = record(12, &spec, || {});
    assert_eq!(report.chunks_written, 12);
    let mut blocks: Vec<_> = disks
        .iter()
        .flat_map(|d| mark6_blocks(&d.join("scan7"), (LEN + 10) as i32))
        .collect();
    blocks.sort();
    assert_eq!(blocks.len(), 12);
    for (n, (number, data)) in blocks.iter().enumerate() {
        assert_eq!(*number as usize, n);
        assert!(*data == expected_chunk(n as u64), "block {n}");
    }
    disks.iter().for_each(|d| fs::remove_dir_all(d).unwrap());
}

fn vdif_frame(seconds: u32, frame: u32) -> Vec<u8> {
    let repr = vdif::Repr {
        invalid: false,
        legacy: false,
        seconds,
        ref_epoch: 52,
        frame,
        version: 1,
        log2_nchan: 0,
        frame_len: 1056,
        complex: false,
        bits_per_sample: 8,
        thread: 3,
        station: 0x5a5a,
        edv: 0,
    };
    let mut b: Vec<u8> = (0..1056).map(|k| (k as u32 * 7 + frame) as u8).collect();
    repr.emit(&mut vdif::Packet::new_unchecked(&mut b[..]))
        .unwrap();
    b
}

#[test]
fn a_vdif_frame_that_never_came_is_written_as_a_fill_frame_with_its_time() {
    let (disks, mut spec) = one_disk("vdif", "scan8", 30);
    let fps = 10;
    spec.layout = Layout::Vdif {
        frames_per_second: fps,
    };
    let format = FormatSpec::Vdif {
        threads: vec![3],
        frame_len: 1056,
        frames_per_second: fps,
        station: None,
        legacy: false,
    };
    let all: Vec<(u32, u32)> = (0..4 * PER_CHUNK as u32)
        .map(|i| (100 + i / fps, i % fps))
        .collect();
    let lost = 13; // second 101, frame 3
    let packets = all
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != lost)
        .map(|(_, &(s, f))| vdif_frame(s, f))
        .collect();
    let locate = format.locator().unwrap().whole_packets(1056);
    // The capture's first index is 100 s * fps: chunks start there.
    let report = run_capture(packets, locate, all.len() as u64, &spec, || {});
    assert_eq!(report.writers[0].filled_packets, 1, "{report:?}");
    let files = files_ending(&disks, "scan8", ".vdif");
    let bytes: Vec<u8> = files.iter().flat_map(|p| fs::read(p).unwrap()).collect();
    assert_eq!(bytes.len(), all.len() * 1056);
    for (i, frame) in bytes.chunks(1056).enumerate() {
        let (s, f) = all[i];
        if i != lost {
            assert!(frame == vdif_frame(s, f), "frame {i}");
            continue;
        }
        let h = vdif::Packet::new_checked(frame).unwrap();
        assert!(h.invalid() && h.seconds() == s && h.frame() == f);
        assert_eq!((h.thread(), h.station(), h.frame_len()), (3, 0x5a5a, 1056));
        let words: Vec<u32> = frame[32..]
            .chunks(4)
            .map(|w| u32::from_le_bytes(w.try_into().unwrap()))
            .collect();
        assert!(words.iter().all(|&w| w == super::VDIF_FILL_WORD));
    }
    disks.iter().for_each(|d| fs::remove_dir_all(d).unwrap());
}

#[test]
fn every_written_chunk_is_passed_on_in_order_across_three_disks() {
    // Three writers finish chunks out of order; the consumer after them (a fold)
    // must still get every chunk, in order, and the pool every chunk back.
    let dirs: Vec<PathBuf> = (0..3).map(|k| disk("forward", k)).collect();
    let mut spec = RecordSpec::new(dirs.clone(), "f1");
    spec.forward_chunks = 64;
    let chunks = 24u64;
    let packets = counter_packets(chunks);
    let all = packets.len() as u64;
    let locate = whole_counter_locator();
    let mut cfg = ChunkConfig::new(PER_CHUNK);
    cfg.nchunks = 2 * chunks as usize + 4;
    let cap = Capture::start(InMemoryEngine::from_packets(packets), locate, &cfg, None).unwrap();
    let rec = Recorder::start(vec![cap.consumer()], vec![vec![0, 1]], &spec).unwrap();
    let forward = rec.forwarded().expect("forward_chunks > 0");
    let fold = std::thread::spawn(move || {
        let mut ids = Vec::new();
        while let Some(c) = forward.pop(Duration::from_secs(10)) {
            ids.push(c.lease.chunk_id()); // the lease goes back to the pool here
        }
        ids
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while cap.stats().counters.total().seen() < all && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    cap.stop().unwrap();
    let (report, _) = rec.finish();
    let ids = fold.join().unwrap();
    assert_eq!(report.chunks_written, chunks);
    assert_eq!(ids, (0..chunks).collect::<Vec<_>>());
    assert_eq!(
        (report.chunks_forwarded, report.chunks_not_forwarded),
        (chunks, 0)
    );
    assert_eq!(cap.consumer().free_count(), cfg.nchunks);
    let files: usize = dirs
        .iter()
        .map(|d| fs::read_dir(d.join("f1")).unwrap().count())
        .sum();
    assert_eq!(files as u64, chunks);
    for d in dirs {
        let _ = fs::remove_dir_all(d);
    }
}

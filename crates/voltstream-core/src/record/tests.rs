//! The recorder on a real capture thread fed from memory, writing to real files.

use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::{RecordSpec, Recorder};
use crate::capture::{Capture, ChunkConfig, InMemoryEngine};
use crate::wire::FormatSpec;
use crate::Error;

const LEN: usize = 1024;
const PER_CHUNK: usize = 8; // 2 streams x 8 x 1024 bytes = 16 KiB: O_DIRECT-aligned

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
    let engine = InMemoryEngine::from_packets(packets);
    let locate = FormatSpec::Counter {
        streams: 2,
        payload_len: LEN,
    }
    .locator()
    .unwrap();
    let mut cfg = ChunkConfig::new(PER_CHUNK);
    cfg.nchunks = 2 * chunks as usize + 4;
    let cap = Capture::start(engine, locate, &cfg, None).unwrap();
    let rec = Recorder::start(vec![cap.consumer()], spec).unwrap();
    during();
    // Every packet read (the last chunks stay open until the stop flushes them).
    let all = chunks * 2 * PER_CHUNK as u64 - skip.len() as u64;
    let deadline = Instant::now() + Duration::from_secs(10);
    while cap.stats().counters.total().received < all && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    cap.stop().unwrap();
    let report = rec.finish();
    // The recorder never held the capture back: no chunk lacked a free buffer.
    assert_eq!(cap.stats().counters.chunks_dropped, 0);
    report
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

fn expected_chunk(c: u64) -> Vec<u8> {
    let mut want = Vec::new();
    for s in 0..2u16 {
        for k in 0..PER_CHUNK as u64 {
            want.extend_from_slice(&packet(s, c * PER_CHUNK as u64 + k)[10..]);
        }
    }
    want
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
    assert_eq!(report.bytes_written, 30 * 2 * PER_CHUNK as u64 * LEN as u64);
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
fn a_disk_that_falls_behind_costs_whole_chunks_counted_never_the_capture() {
    // One disk, a one-chunk queue, a burst far faster than fdatasync'ed writes.
    let (disks, spec) = one_disk("slow", "scan3", 1);
    let report = record(30, &spec, || {});
    assert_eq!(
        report.chunks_written + report.chunks_unwritten,
        30,
        "{report:?}"
    );
    let files = chunk_files(&disks, "scan3");
    assert_eq!(files.len() as u64, report.chunks_written);
    assert_intact(&files);
    disks.iter().for_each(|d| fs::remove_dir_all(d).unwrap());
}

#[test]
fn a_packet_that_never_came_is_written_as_zeros_and_counted() {
    let (disks, spec) = one_disk("zero", "scan4", 8);
    let report = record_without(4, &spec, &[(1, 5)], || {});
    assert_eq!(report.chunks_written, 4);
    assert_eq!(report.writers[0].zero_filled_packets, 1);
    let files = chunk_files(&disks, "scan4");
    let mut want = expected_chunk(0);
    let slot = PER_CHUNK + 5; // stream 1, packet 5
    want[slot * LEN..(slot + 1) * LEN].fill(0);
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
    let err = Recorder::start(vec![], &RecordSpec::new(vec![d.clone()], "taken"))
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("cannot create the scan folder") && err.contains("taken"),
        "{err}"
    );
    fs::remove_dir_all(&d).unwrap();
}

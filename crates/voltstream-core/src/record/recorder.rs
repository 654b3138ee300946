//! The recorder: a dispatcher thread takes every chunk the capture delivers and
//! hands it to the least-loaded writer (one per directory), never waiting for one.

use std::fs;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::writer::{Job, Writer, WriterReport};
use crate::ring::{Consumer, Lease};
use crate::{Error, Result};

/// How long the dispatcher waits on one capture thread's ring before looking at
/// the next (and at whether the capture has ended).
const POLL: Duration = Duration::from_millis(20);
/// With several rings, the dispatcher polls them without blocking; after a round
/// that found nothing it naps this long (a chunk of any ring waits at most this).
const IDLE_NAP: Duration = Duration::from_millis(1);

/// Where and how a scan is recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordSpec {
    /// One directory per disk (or RAID set); each gets one writer thread.
    pub dirs: Vec<PathBuf>,
    /// The scan's name: a folder `<dir>/<scan>/` on every disk, holding the chunk
    /// files `<scan>.<8-digit number>` (jive5ab's FlexBuff "vbs" layout: chunk
    /// numbers count across all disks, so a reader orders them by number).
    pub scan: String,
    /// Chunks each writer may hold queued before the dispatcher passes it over.
    pub queue_chunks: usize,
}

impl RecordSpec {
    pub fn new(dirs: Vec<PathBuf>, scan: impl Into<String>) -> Self {
        RecordSpec {
            dirs,
            scan: scan.into(),
            queue_chunks: 2,
        }
    }

    pub fn validate(&self) -> Result<()> {
        if self.dirs.is_empty() {
            return Err(Error::Config(
                "give at least one directory to record to".into(),
            ));
        }
        let ok = |c: char| c.is_ascii_alphanumeric() || "_-+.".contains(c);
        if self.scan.is_empty() || self.scan.starts_with('.') || !self.scan.chars().all(ok) {
            return Err(Error::Config(format!(
                "scan name {:?}: use letters, digits and _ - + . (it names a folder and its \
                 files on every disk)",
                self.scan
            )));
        }
        if self.queue_chunks == 0 {
            return Err(Error::Config("queue_chunks must be at least 1".into()));
        }
        Ok(())
    }
}

/// Counters of a recording; every chunk the capture delivered is in exactly one
/// of `chunks_written`, `chunks_unwritten` and the writers' `lost_chunks`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordReport {
    pub chunks_written: u64,
    pub bytes_written: u64,
    /// Chunks no writer had room for (every live queue full, or every disk out),
    /// dropped whole so that the capture never waits.
    pub chunks_unwritten: u64,
    pub writers: Vec<WriterReport>,
}

/// A running recording.
pub struct Recorder {
    writers: Arc<Vec<Writer>>,
    unwritten: Arc<AtomicU64>,
    dispatcher: Option<JoinHandle<()>>,
}

impl Recorder {
    /// Creates `<dir>/<scan>/` on every disk (refusing a scan that is already
    /// there) and starts the writers and the dispatcher, which reads `consumers`
    /// (one per capture thread) until the capture ends.
    pub fn start(consumers: Vec<Consumer>, spec: &RecordSpec) -> Result<Recorder> {
        spec.validate()?;
        let mut writers = Vec::with_capacity(spec.dirs.len());
        for dir in &spec.dirs {
            let scan_dir = dir.join(&spec.scan);
            fs::create_dir(&scan_dir).map_err(|e| {
                Error::io(
                    format!("cannot create the scan folder {}", scan_dir.display()),
                    e,
                )
            })?;
            writers.push(Writer::start(scan_dir, spec.queue_chunks)?);
        }
        let writers = Arc::new(writers);
        let unwritten = Arc::new(AtomicU64::new(0));
        let dispatcher = {
            let (writers, unwritten, scan) =
                (writers.clone(), unwritten.clone(), spec.scan.clone());
            std::thread::Builder::new()
                .name("vs-record-dispatch".into())
                .spawn(move || dispatch(&consumers, &writers, &unwritten, &scan))
                .map_err(|e| Error::io("cannot start the recorder's dispatcher", e))?
        };
        Ok(Recorder {
            writers,
            unwritten,
            dispatcher: Some(dispatcher),
        })
    }

    /// Counters now (while it runs, or after `finish`).
    pub fn report(&self) -> RecordReport {
        let writers: Vec<WriterReport> = self.writers.iter().map(Writer::report).collect();
        RecordReport {
            chunks_written: writers.iter().map(|w| w.chunks).sum(),
            bytes_written: writers.iter().map(|w| w.bytes).sum(),
            chunks_unwritten: self.unwritten.load(Ordering::Acquire),
            writers,
        }
    }

    /// Waits for the dispatcher (it ends once the capture has stopped and every
    /// chunk was taken), then for the writers to write what they hold.
    pub fn finish(mut self) -> RecordReport {
        if let Some(d) = self.dispatcher.take() {
            let _ = d.join();
        }
        if let Some(writers) = Arc::get_mut(&mut self.writers) {
            writers.iter_mut().for_each(Writer::finish);
        }
        self.report()
    }
}

fn dispatch(consumers: &[Consumer], writers: &[Writer], unwritten: &AtomicU64, scan: &str) {
    let mut number = 0u64;
    let mut turn = 0usize;
    let mut idle = false;
    loop {
        if consumers.iter().all(Consumer::is_finished) {
            return;
        }
        let mut took = false;
        for consumer in consumers {
            // Empty each ring before looking at the next: a busy capture thread
            // must not wait on an idle one. Block only after a round found nothing.
            let wait = if idle && consumers.len() == 1 {
                POLL
            } else {
                Duration::ZERO
            };
            while let Some(lease) = consumer.pop(wait) {
                took = true;
                let name = format!("{scan}.{number:08}");
                number += 1;
                turn = turn.wrapping_add(1);
                if !hand_over(writers, turn, lease, &name) {
                    // No room anywhere: the chunk goes back to the pool unwritten.
                    unwritten.fetch_add(1, Ordering::AcqRel);
                }
                if wait > Duration::ZERO {
                    break;
                }
            }
        }
        idle = !took;
        if idle && consumers.len() > 1 {
            std::thread::sleep(IDLE_NAP);
        }
    }
}

/// Offers the chunk to the live writers, least loaded first (ties broken by
/// turns, so that idle disks share the work); false when none had room.
fn hand_over(writers: &[Writer], turn: usize, lease: Lease, name: &str) -> bool {
    let n = writers.len();
    let mut order: Vec<usize> = (0..n)
        .map(|k| (turn + k) % n)
        .filter(|&w| !writers[w].state.is_failed())
        .collect();
    order.sort_by_key(|&w| writers[w].state.queued());
    let mut job = Job {
        lease,
        path: PathBuf::new(),
    };
    for w in order {
        job.path = writers[w].dir.join(name);
        match writers[w].offer(job) {
            None => return true,
            Some(refused) => job = refused,
        }
    }
    false
}

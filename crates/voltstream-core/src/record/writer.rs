//! One writer thread per directory (a disk or a RAID set): it takes chunk leases
//! from a short queue and writes each one straight from the chunk pool into the
//! layout's files (`files.rs`), then gives the chunk back. The first write error
//! takes the writer out: its open files are closed at their last whole chunk,
//! its queued chunks are counted lost, and the dispatcher stops choosing it.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use super::files::{Files, Place};
use super::forward::{Forward, Forwarded};
use crate::ring::Lease;
use crate::{Error, Result};

/// A chunk to write, and where it goes in the recording.
pub(crate) struct Job {
    pub lease: Lease,
    pub place: Place,
}

/// What one writer has done; read by the recorder's report while it runs.
#[derive(Debug, Default)]
pub struct WriterState {
    queued: AtomicUsize,
    chunks: AtomicU64,
    bytes: AtomicU64,
    lost: AtomicU64,
    direct: AtomicU64,
    zeroed: AtomicU64,
    failed: Mutex<Option<String>>,
}

/// One writer's counters, as of the moment they were read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriterReport {
    pub dir: PathBuf,
    /// Chunk files written whole.
    pub chunks: u64,
    pub bytes: u64,
    /// Of those, written with O_DIRECT (straight from the pool).
    pub direct_chunks: u64,
    /// Chunks handed to this writer that were not written: queued when it failed.
    pub lost_chunks: u64,
    /// Packet slots written as fill (VDIF fill frames, zeros in the other
    /// layouts): their packet never arrived (the capture counts why: missing,
    /// or past the end of the stream in the last chunk).
    pub filled_packets: u64,
    /// Why the writer stopped writing (the first error), if it did.
    pub failed: Option<String>,
}

impl WriterState {
    pub(crate) fn is_failed(&self) -> bool {
        self.failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    pub(crate) fn queued(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    fn fail(&self, why: String) {
        let mut f = self.failed.lock().unwrap_or_else(|e| e.into_inner());
        f.get_or_insert(why);
    }
}

/// The sending end of a writer and its thread.
pub(crate) struct Writer {
    pub dir: PathBuf,
    pub state: Arc<WriterState>,
    queue: Option<SyncSender<Job>>,
    thread: Option<JoinHandle<()>>,
}

impl Writer {
    /// Starts the thread writing `files` into `dir`, with room for `depth`
    /// queued chunks.
    /// `forward`: where each written chunk goes instead of back to the pool.
    pub fn start(
        dir: PathBuf,
        files: Files,
        depth: usize,
        forward: Option<Arc<Forward>>,
    ) -> Result<Writer> {
        let (tx, rx) = sync_channel(depth.max(1));
        let state = Arc::new(WriterState::default());
        let thread = {
            let state = state.clone();
            std::thread::Builder::new()
                .name("vs-record".into())
                .spawn(move || run(&rx, &state, files, forward.as_deref()))
                .map_err(|e| Error::io("cannot start a recorder writer thread", e))?
        };
        Ok(Writer {
            dir,
            state,
            queue: Some(tx),
            thread: Some(thread),
        })
    }

    /// Hands `job` over without waiting; gives it back when the queue is full
    /// (or the writer gone).
    pub fn offer(&self, job: Job) -> Option<Job> {
        let Some(queue) = &self.queue else {
            return Some(job);
        };
        self.state.queued.fetch_add(1, Ordering::AcqRel);
        match queue.try_send(job) {
            Ok(()) => None,
            Err(TrySendError::Full(job) | TrySendError::Disconnected(job)) => {
                self.state.queued.fetch_sub(1, Ordering::AcqRel);
                Some(job)
            }
        }
    }

    /// Writes what is queued, then ends the thread.
    pub fn finish(&mut self) {
        self.queue = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    pub fn report(&self) -> WriterReport {
        let s = &self.state;
        WriterReport {
            dir: self.dir.clone(),
            chunks: s.chunks.load(Ordering::Acquire),
            bytes: s.bytes.load(Ordering::Acquire),
            direct_chunks: s.direct.load(Ordering::Acquire),
            lost_chunks: s.lost.load(Ordering::Acquire),
            filled_packets: s.zeroed.load(Ordering::Acquire),
            failed: s.failed.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.finish();
    }
}

fn run(rx: &Receiver<Job>, state: &WriterState, mut files: Files, forward: Option<&Forward>) {
    for mut job in rx.iter() {
        let mut written = false;
        if state.is_failed() {
            state.lost.fetch_add(1, Ordering::AcqRel);
        } else {
            match files.write(&mut job.lease, job.place) {
                Ok(w) => {
                    state.chunks.fetch_add(1, Ordering::AcqRel);
                    state
                        .direct
                        .fetch_add(u64::from(w.direct), Ordering::AcqRel);
                    state.bytes.fetch_add(w.bytes, Ordering::AcqRel);
                    state.zeroed.fetch_add(w.filled, Ordering::AcqRel);
                    written = true;
                }
                Err(e) => {
                    let at = files.folder().display();
                    state.fail(format!("{at}: writing chunk {}: {e}", job.place.number));
                    state.lost.fetch_add(1, Ordering::AcqRel);
                    // What is open ends at its last whole chunk; the disk is out.
                    let _ = files.close_all();
                }
            }
        }
        // The chunk goes back to the pool here, written or not, unless it is
        // passed on (written) to the forward consumer.
        if let Some(f) = forward {
            let Job { lease, place } = job;
            f.settle(
                place.number,
                written.then_some(Forwarded {
                    lease,
                    ring: place.ring,
                }),
            );
        } else {
            drop(job);
        }
        state.queued.fetch_sub(1, Ordering::AcqRel);
    }
    if let Err(e) = files.close_all() {
        state.fail(format!("closing the files: {e}"));
    }
}

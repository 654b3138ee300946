//! One writer thread per directory (a disk or a RAID set): it takes chunk leases
//! from a short queue and writes each chunk's data to its own file, straight from
//! the chunk pool, then gives the chunk back.
//!
//! A file is written under a temporary name and renamed when complete, so a reader
//! (or a crash) sees whole chunk files or none. With O_DIRECT (the chunk's data is
//! page-aligned, and its length a multiple of 4096) the bytes go from the pool to
//! the disk without the page cache; where the file system refuses O_DIRECT (tmpfs)
//! or the length is unaligned, the write is buffered and `fdatasync`ed before the
//! rename, which also keeps the page cache from growing. The first write error
//! takes the writer out: its queued chunks are counted lost, nothing else is
//! written to its directory, and the dispatcher stops choosing it.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::ring::Lease;
use crate::{Error, Result};

/// Alignment O_DIRECT needs of a write's address, length and offset here.
const DIRECT_ALIGN: usize = 4096;

/// A chunk to write, and the name its file gets once complete.
pub(crate) struct Job {
    pub lease: Lease,
    pub path: PathBuf,
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
    /// Packet slots written as zeros: their packet never arrived (the capture
    /// counts why: missing, or past the end of the stream in the last chunk).
    pub zero_filled_packets: u64,
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
    /// Starts the thread writing into `dir`, with room for `depth` queued chunks.
    pub fn start(dir: PathBuf, depth: usize) -> Result<Writer> {
        let (tx, rx) = sync_channel(depth.max(1));
        let state = Arc::new(WriterState::default());
        let thread = {
            let state = state.clone();
            std::thread::Builder::new()
                .name("vs-record".into())
                .spawn(move || run(&rx, &state))
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
            zero_filled_packets: s.zeroed.load(Ordering::Acquire),
            failed: s.failed.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.finish();
    }
}

fn run(rx: &Receiver<Job>, state: &WriterState) {
    for mut job in rx.iter() {
        if state.is_failed() {
            state.lost.fetch_add(1, Ordering::AcqRel);
        } else {
            // A slot whose packet never came holds a stale payload from the
            // chunk's last use: it is written as zeros, never as old data.
            let zeroed = job.lease.zero_absent() as u64;
            state.zeroed.fetch_add(zeroed, Ordering::AcqRel);
            match write_chunk_file(&job.path, job.lease.data()) {
                Ok(direct) => {
                    state.chunks.fetch_add(1, Ordering::AcqRel);
                    state.direct.fetch_add(u64::from(direct), Ordering::AcqRel);
                    let len = job.lease.data().len() as u64;
                    state.bytes.fetch_add(len, Ordering::AcqRel);
                }
                Err(e) => {
                    state.fail(format!("{}: {e}", job.path.display()));
                    state.lost.fetch_add(1, Ordering::AcqRel);
                }
            }
        }
        // The chunk goes back to the pool here, written or not.
        drop(job);
        state.queued.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Writes `data` as the file `path` (whole, or not at all: under a temporary
/// name until complete). Returns whether O_DIRECT was used.
fn write_chunk_file(path: &Path, data: &[u8]) -> io::Result<bool> {
    let partial = path.with_extension("partial");
    let aligned = data.len() % DIRECT_ALIGN == 0 && data.as_ptr() as usize % DIRECT_ALIGN == 0;
    // O_DIRECT bypasses the page cache, but the file's size and blocks are only
    // durable after a sync: the rename below must not name an incomplete file.
    let direct = aligned
        && open(&partial, libc::O_DIRECT)
            .and_then(|mut f| f.write_all(data).and_then(|()| f.sync_data()))
            .is_ok();
    if !direct {
        let mut f = open(&partial, 0)?;
        f.write_all(data)?;
        f.sync_data()?;
    }
    fs::rename(&partial, path)?;
    Ok(direct)
}

fn open(path: &Path, flags: libc::c_int) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(flags)
        .open(path)
}

//! The recorder: a dispatcher thread takes every chunk the capture delivers and
//! hands it to the least-loaded writer (one per directory), never waiting for one.
//! In the DADA and VDIF layouts a file holds consecutive chunks, so the chunks
//! of a file go to the writer that opened it while it has room; when it has none
//! (or a chunk is missing) the file ends there and the next one starts on the
//! least-loaded writer.

use std::collections::VecDeque;
use std::fs;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::files::{Files, Piece, Place};
use super::forward::Forward;
use super::layout::{Layout, Names};
use super::writer::{Job, Writer, WriterReport};
use crate::ring::{Consumer, Lease};
use crate::{Error, Result};

/// How long the dispatcher waits on one capture thread's ring before looking at
/// the next (and at whether the capture has ended).
const POLL: Duration = Duration::from_millis(20);
/// With several rings, the dispatcher polls them without blocking; after a round
/// that found nothing it naps this long (a chunk of any ring waits at most this).
const IDLE_NAP: Duration = Duration::from_millis(1);
/// Free pool chunks a capture thread keeps while the dispatcher holds chunks no
/// writer had room for: below this, the oldest held chunk goes back unwritten.
const RESERVE: usize = 2;

/// Where and how a scan is recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordSpec {
    /// One directory per disk (or RAID set); each gets one writer thread.
    pub dirs: Vec<PathBuf>,
    /// The scan's name: its folder `<dir>/<scan>/` on every disk (its file, in
    /// the Mark6 layout) and the stem of its file names.
    pub scan: String,
    pub layout: Layout,
    /// DADA and VDIF: chunks per file (a file may end sooner: a missing chunk,
    /// or its disk out of room, ends it).
    pub file_chunks: usize,
    /// Chunks each writer may hold queued before the dispatcher passes it over.
    pub queue_chunks: usize,
    /// A VDIF stream's frames per second: in every layout of whole packets, a
    /// frame that never arrived is written as a VDIF fill frame (its time, the
    /// invalid bit) rather than zeros. Implied by the vdif layout.
    pub vdif_fill: Option<u32>,
    /// Chunks, once written, passed on to one more consumer (`Recorder::forwarded`)
    /// instead of back to the pool: at most this many ready and this many waiting
    /// for an earlier chunk's write. 0: none, every chunk goes back when written.
    pub forward_chunks: usize,
}

impl RecordSpec {
    pub fn new(dirs: Vec<PathBuf>, scan: impl Into<String>) -> Self {
        RecordSpec {
            dirs,
            scan: scan.into(),
            layout: Layout::Vbs,
            file_chunks: 16,
            queue_chunks: 2,
            vdif_fill: None,
            forward_chunks: 0,
        }
    }

    /// Frames per second of the VDIF stream whose missing frames become fill
    /// frames, if any (never in DADA, which holds samples only).
    pub fn fill_frames_per_second(&self) -> Option<u32> {
        match self.layout {
            Layout::Vdif { frames_per_second } => Some(frames_per_second),
            Layout::Dada { .. } => None,
            _ => self.vdif_fill,
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
        if self.file_chunks == 0 {
            return Err(Error::Config("file_chunks must be at least 1".into()));
        }
        self.layout.validate()
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
    /// Written chunks passed on to the forward consumer, and those not passed on
    /// because it was behind (both 0 without one).
    pub chunks_forwarded: u64,
    pub chunks_not_forwarded: u64,
    pub writers: Vec<WriterReport>,
}

/// A running recording.
pub struct Recorder {
    writers: Arc<Vec<Writer>>,
    unwritten: Arc<AtomicU64>,
    dispatcher: Option<JoinHandle<()>>,
    pieces: Arc<Mutex<Vec<Piece>>>,
    forward: Option<Arc<Forward>>,
}

impl Recorder {
    /// Creates the scan's folder (Mark6: checks its file is new) on every disk
    /// and starts the writers and the dispatcher, which reads `consumers` (one
    /// per capture thread; `rings[k]` the global stream ids of thread `k`'s
    /// chunk positions) until the capture ends.
    pub fn start(
        consumers: Vec<Consumer>,
        rings: Vec<Vec<usize>>,
        spec: &RecordSpec,
    ) -> Result<Recorder> {
        spec.validate()?;
        let layout = Arc::new(spec.layout.clone());
        let rings = Arc::new(rings);
        let pieces = Arc::new(Mutex::new(Vec::new()));
        let forward =
            (spec.forward_chunks > 0).then(|| Arc::new(Forward::new(spec.forward_chunks)));
        let mut writers = Vec::with_capacity(spec.dirs.len());
        for dir in &spec.dirs {
            let names = Names::new(dir, &spec.scan, &layout);
            claim(&names, &layout)?;
            let files = Files::new(
                names,
                layout.clone(),
                rings.clone(),
                spec.file_chunks as u64,
                spec.fill_frames_per_second(),
                pieces.clone(),
            );
            writers.push(Writer::start(
                dir.clone(),
                files,
                spec.queue_chunks,
                forward.clone(),
            )?);
        }
        let writers = Arc::new(writers);
        let unwritten = Arc::new(AtomicU64::new(0));
        let dispatcher = {
            let (writers, unwritten) = (writers.clone(), unwritten.clone());
            let forward = forward.clone();
            let plan = Plan {
                runs: layout.runs(),
                file_chunks: spec.file_chunks,
            };
            std::thread::Builder::new()
                .name("vs-record-dispatch".into())
                .spawn(move || dispatch(&consumers, &writers, &unwritten, plan, forward.as_deref()))
                .map_err(|e| Error::io("cannot start the recorder's dispatcher", e))?
        };
        Ok(Recorder {
            writers,
            unwritten,
            dispatcher: Some(dispatcher),
            pieces,
            forward,
        })
    }

    /// The forward stage (with `forward_chunks` > 0): every written chunk, in
    /// dispatch order, for one more consumer; closed by `finish`.
    pub fn forwarded(&self) -> Option<Arc<Forward>> {
        self.forward.clone()
    }

    /// The finished pieces (files, Mark6 blocks) from number `from` of the log
    /// on, in the order they were finished: what the manifest lists.
    pub fn pieces(&self, from: usize) -> Vec<Piece> {
        let log = self.pieces.lock().unwrap_or_else(|e| e.into_inner());
        log.get(from..).map(<[Piece]>::to_vec).unwrap_or_default()
    }

    /// Counters now (while it runs, or after `finish`).
    pub fn report(&self) -> RecordReport {
        let writers: Vec<WriterReport> = self.writers.iter().map(Writer::report).collect();
        let (forwarded, not_forwarded) = self.forward.as_ref().map_or((0, 0), |f| f.counts());
        RecordReport {
            chunks_written: writers.iter().map(|w| w.chunks).sum(),
            bytes_written: writers.iter().map(|w| w.bytes).sum(),
            chunks_unwritten: self.unwritten.load(Ordering::Acquire),
            chunks_forwarded: forwarded,
            chunks_not_forwarded: not_forwarded,
            writers,
        }
    }

    /// Waits for the dispatcher (it ends once the capture has stopped and every
    /// chunk was taken), then for the writers to write what they hold and close
    /// their files; returns the report and every piece.
    pub fn finish(mut self) -> (RecordReport, Vec<Piece>) {
        if let Some(d) = self.dispatcher.take() {
            let _ = d.join();
        }
        if let Some(writers) = Arc::get_mut(&mut self.writers) {
            writers.iter_mut().for_each(Writer::finish);
        }
        if let Some(f) = &self.forward {
            f.close();
        }
        (self.report(), self.pieces(0))
    }
}

/// Makes the scan's place on one disk, refusing a scan that is already there.
fn claim(names: &Names, layout: &Layout) -> Result<()> {
    if layout.has_folder() {
        return fs::create_dir(&names.folder).map_err(|e| {
            Error::io(
                format!("cannot create the scan folder {}", names.folder.display()),
                e,
            )
        });
    }
    let file = names.mark6();
    if file.exists() {
        return Err(Error::Config(format!(
            "{} exists: pick a new scan name",
            file.display()
        )));
    }
    if !names.folder.is_dir() {
        return Err(Error::Config(format!(
            "{} is not a directory",
            names.folder.display()
        )));
    }
    Ok(())
}

/// How the dispatcher groups chunks into files.
#[derive(Debug, Clone, Copy)]
struct Plan {
    /// Files hold runs of consecutive chunks (DADA, VDIF).
    runs: bool,
    file_chunks: usize,
}

/// One capture thread's place in the recording.
#[derive(Debug, Default)]
struct RingState {
    /// First packet index recorded (OBS_OFFSET's origin); set by the first chunk.
    origin: Option<u64>,
    /// The chunk id that would continue the open run.
    expect: u64,
    /// The open run: its writer, file number and chunks so far.
    open: Option<(usize, u64, usize)>,
    next_file: u64,
}

fn dispatch(
    consumers: &[Consumer],
    writers: &[Writer],
    unwritten: &AtomicU64,
    plan: Plan,
    forward: Option<&Forward>,
) {
    let mut number = 0u64;
    let mut turn = 0usize;
    let mut idle = false;
    let mut rings: Vec<RingState> = consumers.iter().map(|_| RingState::default()).collect();
    // Chunks taken from a ring that no writer had room for yet, oldest first, with
    // their chunk numbers (given when taken: a chunk dropped leaves a gap).
    let mut waiting: Vec<VecDeque<(Lease, u64)>> =
        consumers.iter().map(|_| VecDeque::new()).collect();
    loop {
        let mut took = false;
        for (ring, consumer) in consumers.iter().enumerate() {
            // Empty each ring before looking at the next: a busy capture thread
            // must not wait on an idle one. Block only after a round found nothing.
            let wait = if idle && consumers.len() == 1 && waiting[ring].is_empty() {
                POLL
            } else {
                Duration::ZERO
            };
            while let Some(lease) = consumer.pop(wait) {
                took = true;
                waiting[ring].push_back((lease, number));
                number += 1;
                if wait > Duration::ZERO {
                    break;
                }
            }
            let state = &mut rings[ring];
            while let Some((lease, number)) = waiting[ring].pop_front() {
                let origin = *state.origin.get_or_insert(lease.first_index());
                let place = Place {
                    number,
                    file: 0,
                    ring,
                    origin,
                };
                turn = turn.wrapping_add(1);
                let placed = if plan.runs {
                    place_in_run(writers, turn, lease, place, state, plan.file_chunks)
                } else {
                    hand_over(writers, turn, Job { lease, place })
                        .map(drop)
                        .map_err(|j| j.lease)
                };
                if let Err(lease) = placed {
                    waiting[ring].push_front((lease, number));
                    break;
                }
            }
            // Waiting chunks are the pool's: while the capture runs, the oldest
            // goes back unwritten before the assembler could lack a free chunk
            // (the capture is never held back). Once it has stopped, they wait.
            let all_failed = writers.iter().all(|w| w.state.is_failed());
            while !waiting[ring].is_empty()
                && (all_failed || (!consumer.is_closed() && consumer.free_count() < RESERVE))
            {
                if let (Some((_, number)), Some(f)) = (waiting[ring].pop_front(), forward) {
                    f.settle(number, None);
                }
                unwritten.fetch_add(1, Ordering::AcqRel);
            }
        }
        let finished = consumers.iter().all(Consumer::is_finished);
        if finished && waiting.iter().all(VecDeque::is_empty) {
            return;
        }
        idle = !took;
        if (idle && consumers.len() > 1) || waiting.iter().any(|w| !w.is_empty()) {
            std::thread::sleep(IDLE_NAP);
        }
    }
}

/// DADA/VDIF: the chunk continues its ring's open file on that file's writer
/// when it is the next chunk, the file has room and the writer takes it;
/// otherwise it starts a new file on the least-loaded writer. Gives the chunk
/// back, and changes nothing, when no writer has room.
// A refused chunk's lease is handed back by value, once per chunk: no copy of data.
#[allow(clippy::result_large_err)]
fn place_in_run(
    writers: &[Writer],
    turn: usize,
    lease: Lease,
    place: Place,
    state: &mut RingState,
    file_chunks: usize,
) -> std::result::Result<(), Lease> {
    let id = lease.chunk_id();
    let mut job = Job { lease, place };
    if let Some((w, file, chunks)) = state.open {
        if state.expect == id && chunks < file_chunks && !writers[w].state.is_failed() {
            job.place.file = file;
            match writers[w].offer(job) {
                None => {
                    state.open = Some((w, file, chunks + 1));
                    state.expect = id + 1;
                    return Ok(());
                }
                Some(refused) => job = refused,
            }
        }
    }
    job.place.file = state.next_file;
    match hand_over(writers, turn, job) {
        Ok(w) => {
            state.open = Some((w, state.next_file, 1));
            state.next_file += 1;
            state.expect = id + 1;
            Ok(())
        }
        Err(job) => Err(job.lease),
    }
}

/// Offers the chunk to the live writers, least loaded first (ties broken by
/// turns, so that idle disks share the work); the writer that took it, or the
/// job back when none had room.
#[allow(clippy::result_large_err)] // the job goes back by value, once per chunk
fn hand_over(writers: &[Writer], turn: usize, mut job: Job) -> std::result::Result<usize, Job> {
    let n = writers.len();
    let mut order: Vec<usize> = (0..n)
        .map(|k| (turn + k) % n)
        .filter(|&w| !writers[w].state.is_failed())
        .collect();
    order.sort_by_key(|&w| writers[w].state.queued());
    for w in order {
        match writers[w].offer(job) {
            None => return Ok(w),
            Some(refused) => job = refused,
        }
    }
    Err(job)
}

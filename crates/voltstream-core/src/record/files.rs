//! One writer's files: what a chunk becomes on its disk in each layout.
//!
//! Owned by the writer thread. vbs: each chunk its own file, written whole under
//! a temporary name and renamed (O_DIRECT straight from the pool where aligned).
//! Mark6: one file per disk, a block per chunk. DADA and VDIF: per stream, a run
//! of consecutive chunks per file, appended in place. Every append is synced
//! before the chunk counts as written, and a failed write is cut back to the
//! last whole chunk, so after a crash or a full disk each file is readable to its
//! last complete block. Each finished file (or Mark6 block, or vbs chunk) is
//! logged as a [`Piece`] for the scan's manifest.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::layout::{self, Layout, Names, DADA_HEADER_LEN};
use crate::ring::Lease;

/// Alignment O_DIRECT needs of a write's address, length and offset here.
const DIRECT_ALIGN: usize = 4096;

/// Where a chunk goes in the recording (decided by the dispatcher).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Place {
    /// Chunk number across the scan: a vbs file's name, a Mark6 block's number.
    pub number: u64,
    /// DADA and VDIF: the file this chunk belongs to (per capture thread, from
    /// 0); a new number starts new files.
    pub file: u64,
    /// The capture thread (ring) the chunk came from.
    pub ring: usize,
    /// The first packet index recorded on that ring: DADA's OBS_OFFSET origin.
    pub origin: u64,
}

/// One finished part of the recording: a file, or a Mark6 block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    pub path: PathBuf,
    /// Global stream ids whose packets it holds (in the order written).
    pub streams: Vec<usize>,
    /// vbs chunk number, Mark6 block number, or DADA/VDIF file number.
    pub number: u64,
    /// Packet index of its first packet slot, per stream.
    pub first_index: u64,
    /// Packet slots per stream it holds.
    pub packets: u64,
    /// Byte offset of its data in `path` (after a DADA header, a Mark6 block header).
    pub offset: u64,
    /// Data bytes (headers not counted).
    pub bytes: u64,
    /// Per stream (in `streams` order): slots at its end whose packet never
    /// arrived (filled). The recording's last piece of a stream is cut by these
    /// at its end (`record/run.py`), so it stops where the stream stopped.
    pub tail_absent: Vec<u64>,
}

/// What writing one chunk did.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Written {
    pub bytes: u64,
    pub direct: bool,
    /// Absent slots written as fill (VDIF fill frames, else zeros).
    pub filled: u64,
}

/// A DADA or VDIF file being appended to.
struct Run {
    file: File,
    /// The same file opened with O_DIRECT, for aligned chunk data (None where
    /// the file system refuses it, e.g. tmpfs, or after it refused a write).
    direct: Option<File>,
    piece: Piece,
    /// Data bytes the DADA header announced when the file was opened.
    planned: u64,
}

pub(crate) struct Files {
    names: Names,
    layout: Arc<Layout>,
    /// Global stream ids of each ring's stream positions.
    rings: Arc<Vec<Vec<usize>>>,
    /// DADA/VDIF: chunks per file, for the header's planned FILE_SIZE.
    file_chunks: u64,
    /// VDIF streams' frames per second: absent slots become fill frames.
    vdif_fill: Option<u32>,
    runs: HashMap<usize, Run>,
    mark6: Option<(File, u64)>,
    /// VDIF: a real frame's header per stream, the model of its fill frames.
    templates: HashMap<usize, [u8; 32]>,
    log: Arc<Mutex<Vec<Piece>>>,
}

impl Files {
    pub fn new(
        names: Names,
        layout: Arc<Layout>,
        rings: Arc<Vec<Vec<usize>>>,
        file_chunks: u64,
        vdif_fill: Option<u32>,
        log: Arc<Mutex<Vec<Piece>>>,
    ) -> Files {
        Files {
            names,
            layout,
            rings,
            file_chunks: file_chunks.max(1),
            vdif_fill,
            runs: HashMap::new(),
            mark6: None,
            templates: HashMap::new(),
            log,
        }
    }

    /// The scan's folder on this disk (the disk itself for Mark6).
    pub fn folder(&self) -> &Path {
        &self.names.folder
    }

    /// Writes one chunk where `place` says; absent slots become fill first.
    pub fn write(&mut self, lease: &mut Lease, place: Place) -> io::Result<Written> {
        #[cfg(test)]
        stall_while_marked(&self.names.folder);
        let streams = self.rings.get(place.ring).cloned().unwrap_or_default();
        let filled = match self.vdif_fill {
            Some(fps) => self.fill_vdif(lease, &streams, fps),
            None => lease.zero_absent() as u64,
        };
        let mut written = match &*self.layout {
            Layout::Vbs => self.write_vbs(lease, place, &streams)?,
            Layout::Mark6 { packet_format } => {
                self.write_mark6(lease, place, &streams, *packet_format)?
            }
            Layout::Vdif { .. } | Layout::Dada { .. } => {
                self.append_runs(lease, place, &streams)?
            }
        };
        written.filled = filled;
        Ok(written)
    }

    /// Ends every open file (DADA headers made to agree with the data).
    pub fn close_all(&mut self) -> io::Result<()> {
        let mut first = Ok(());
        for (_, run) in self.runs.drain() {
            let done = close_run(run, &self.layout, &self.log);
            if first.is_ok() {
                first = done;
            }
        }
        if let Some((f, _)) = self.mark6.take() {
            let done = f.sync_data();
            if first.is_ok() {
                first = done;
            }
        }
        first
    }

    fn log(&self, piece: Piece) {
        self.log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(piece);
    }

    fn write_vbs(&mut self, lease: &Lease, place: Place, streams: &[usize]) -> io::Result<Written> {
        let path = self.names.vbs_chunk(place.number);
        let direct = write_whole_file(&path, lease.data())?;
        let bytes = lease.data().len() as u64;
        self.log(Piece {
            path,
            streams: streams.to_vec(),
            number: place.number,
            first_index: lease.first_index(),
            packets: lease.layout().packets_per_chunk as u64,
            offset: 0,
            bytes,
            tail_absent: (0..streams.len()).map(|pos| tail(lease, pos, 0)).collect(),
        });
        Ok(Written {
            bytes,
            direct,
            filled: 0,
        })
    }

    fn write_mark6(
        &mut self,
        lease: &Lease,
        place: Place,
        streams: &[usize],
        packet_format: i32,
    ) -> io::Result<Written> {
        let data = lease.data();
        if self.mark6.is_none() {
            let path = self.names.mark6();
            let mut f = open_new(&path, 0)?;
            let block = data.len() + layout::MARK6_BLOCK_HEADER_LEN;
            let slot = lease.layout().payload_len;
            f.write_all(&layout::mark6_file_header(block, packet_format, slot))?;
            self.mark6 = Some((f, layout::MARK6_FILE_HEADER_LEN as u64));
        }
        let Some((f, end)) = self.mark6.as_mut() else {
            unreachable!("opened above");
        };
        let header = layout::mark6_block_header(place.number, data.len());
        let at = *end;
        let done = f
            .write_all_at(&header, at)
            .and_then(|()| f.write_all_at(data, at + header.len() as u64))
            .and_then(|()| f.sync_data());
        if let Err(e) = done {
            let _ = f.set_len(at); // the file ends with its last whole block
            return Err(e);
        }
        *end = at + (header.len() + data.len()) as u64;
        let piece = Piece {
            path: self.names.mark6(),
            streams: streams.to_vec(),
            number: place.number,
            first_index: lease.first_index(),
            packets: lease.layout().packets_per_chunk as u64,
            offset: at + header.len() as u64,
            bytes: data.len() as u64,
            tail_absent: (0..streams.len()).map(|pos| tail(lease, pos, 0)).collect(),
        };
        self.log(piece);
        Ok(Written {
            bytes: data.len() as u64,
            direct: false,
            filled: 0,
        })
    }

    /// DADA and VDIF: each stream's part of the chunk (contiguous in the chunk)
    /// appended to that stream's file of this run.
    fn append_runs(
        &mut self,
        lease: &Lease,
        place: Place,
        streams: &[usize],
    ) -> io::Result<Written> {
        let chunk = lease.layout();
        let part = chunk.packets_per_chunk * chunk.payload_len;
        let (mut bytes, mut all_direct) = (0, true);
        for (pos, &stream) in streams.iter().enumerate() {
            let data = &lease.data()[pos * part..(pos + 1) * part];
            if self.runs.get(&stream).map(|r| r.piece.number) != Some(place.file) {
                if let Some(old) = self.runs.remove(&stream) {
                    close_run(old, &self.layout, &self.log)?;
                }
                let run =
                    self.open_run(stream, place, lease.first_index(), chunk.payload_len, part)?;
                self.runs.insert(stream, run);
            }
            let Some(run) = self.runs.get_mut(&stream) else {
                unreachable!("inserted above");
            };
            let at = run.piece.offset + run.piece.bytes;
            let aligned = is_aligned(data) && at % DIRECT_ALIGN as u64 == 0;
            let direct = match run.direct.as_ref().filter(|_| aligned) {
                Some(f) => match f.write_all_at(data, at) {
                    Ok(()) => true,
                    Err(_) => {
                        run.direct = None; // refused: buffered from now on
                        false
                    }
                },
                None => false,
            };
            let done = if direct {
                Ok(())
            } else {
                run.file.write_all_at(data, at)
            };
            // Synced before the chunk counts as written: the file's new size (and,
            // buffered, its data) must survive a power cut.
            if let Err(e) = done.and_then(|()| run.file.sync_data()) {
                let _ = run.file.set_len(at); // back to the last whole chunk
                return Err(e);
            }
            all_direct &= direct;
            run.piece.bytes += part as u64;
            run.piece.packets += chunk.packets_per_chunk as u64;
            let before = run.piece.tail_absent.first().copied().unwrap_or(0);
            run.piece.tail_absent = vec![tail(lease, pos, before)];
            bytes += part as u64;
        }
        Ok(Written {
            bytes,
            direct: all_direct && bytes > 0,
            filled: 0,
        })
    }

    /// Opens this run's file of `stream`; a DADA file starts with its header,
    /// announcing a full run of `file_chunks` chunks of `part` bytes.
    fn open_run(
        &self,
        stream: usize,
        place: Place,
        first: u64,
        slot: usize,
        part: usize,
    ) -> io::Result<Run> {
        let (path, offset, planned) = match &*self.layout {
            Layout::Dada { .. } => {
                let header = self.layout.dada_keys(stream);
                let obs_offset = first.saturating_sub(place.origin) * slot as u64;
                let planned = self.file_chunks * part as u64;
                let path = self.names.dada(stream, obs_offset);
                let f = open_new(&path, 0)?;
                f.write_all_at(
                    &layout::dada_header(header, planned, place.file, obs_offset),
                    0,
                )?;
                let piece = piece_at(path, stream, place.file, first, DADA_HEADER_LEN);
                return Ok(Run {
                    file: f,
                    direct: open_direct(&piece.path),
                    piece,
                    planned,
                });
            }
            _ => (self.names.vdif(stream, place.file), 0, 0),
        };
        let file = open_new(&path, 0)?;
        Ok(Run {
            file,
            direct: open_direct(&path),
            piece: piece_at(path, stream, place.file, first, offset),
            planned,
        })
    }

    /// Writes a fill frame into every absent slot; the header model is the
    /// first frame of the stream in this chunk, else the last one seen. A stream
    /// with no frame seen yet is zero-filled (no model for its time stamps).
    fn fill_vdif(&mut self, lease: &mut Lease, streams: &[usize], fps: u32) -> u64 {
        let chunk = lease.layout();
        let (per, len) = (chunk.packets_per_chunk, chunk.payload_len);
        let mut models: Vec<Option<[u8; 32]>> = Vec::with_capacity(streams.len());
        for (pos, stream) in streams.iter().enumerate() {
            if let Some(p) = lease.first_present(pos) {
                let at = (pos * per + p) * len;
                let mut h = [0u8; 32];
                let n = len.min(32);
                h[..n].copy_from_slice(&lease.data()[at..at + n]);
                self.templates.insert(*stream, h);
            }
            models.push(self.templates.get(stream).copied());
        }
        let first = lease.first_index();
        lease.fill_absent(
            |slot, frame| match models.get(slot / per).copied().flatten() {
                Some(model) => {
                    layout::vdif_fill_frame(frame, &model, first + (slot % per) as u64, fps)
                }
                None => frame.fill(0),
            },
        ) as u64
    }
}

/// Tests stand in for a disk that stops answering: while the scan folder holds a
/// file named `STALL`, this writer waits before each chunk.
#[cfg(test)]
fn stall_while_marked(folder: &Path) {
    while folder.join("STALL").exists() {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

fn piece_at(path: PathBuf, stream: usize, number: u64, first_index: u64, offset: usize) -> Piece {
    Piece {
        path,
        streams: vec![stream],
        number,
        first_index,
        packets: 0,
        offset: offset as u64,
        bytes: 0,
        tail_absent: vec![0],
    }
}

/// Absent slots at the end of stream position `pos` of the chunk; with none
/// present, the whole chunk added to `before` (the stream's count so far).
fn tail(lease: &Lease, pos: usize, before: u64) -> u64 {
    let per = lease.layout().packets_per_chunk;
    match (0..per).rev().find(|&p| lease.is_present(pos, p)) {
        Some(last) => (per - 1 - last) as u64,
        None => before + per as u64,
    }
}

/// Ends a DADA or VDIF file: a DADA header whose FILE_SIZE was planned larger
/// than the run became is rewritten with the size written.
fn close_run(run: Run, layout: &Layout, log: &Mutex<Vec<Piece>>) -> io::Result<()> {
    if let Layout::Dada { .. } = layout {
        if run.piece.bytes != run.planned {
            let obs_offset = dada_obs_offset(&run);
            let header = layout.dada_keys(run.piece.streams[0]);
            let text = layout::dada_header(header, run.piece.bytes, run.piece.number, obs_offset);
            run.file.write_all_at(&text, 0)?;
        }
    }
    run.file.sync_data()?;
    log.lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(run.piece);
    Ok(())
}

/// A DADA run's OBS_OFFSET, read back from its file name (where it was put at open).
fn dada_obs_offset(run: &Run) -> u64 {
    run.piece
        .path
        .file_stem()
        .and_then(|s| s.to_str())
        .and_then(|s| s.rsplit('_').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn is_aligned(data: &[u8]) -> bool {
    data.len() % DIRECT_ALIGN == 0 && data.as_ptr() as usize % DIRECT_ALIGN == 0
}

/// A second, O_DIRECT handle on a file just created (None where refused).
fn open_direct(path: &Path) -> Option<File> {
    OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .ok()
}

/// Writes `data` as the file `path`, whole or not at all: under a temporary
/// name until complete and synced. Returns whether O_DIRECT was used.
fn write_whole_file(path: &Path, data: &[u8]) -> io::Result<bool> {
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    let aligned = is_aligned(data);
    // O_DIRECT bypasses the page cache, but the file's size and blocks are only
    // durable after a sync: the rename below must not name an incomplete file.
    let direct = aligned
        && open_new(&partial, libc::O_DIRECT)
            .and_then(|mut f| f.write_all(data).and_then(|()| f.sync_data()))
            .is_ok();
    let done = if direct {
        Ok(())
    } else {
        open_new(&partial, 0).and_then(|mut f| f.write_all(data).and_then(|()| f.sync_data()))
    };
    if let Err(e) = done.and_then(|()| fs::rename(&partial, path)) {
        let _ = fs::remove_file(&partial); // never leave half a chunk behind
        return Err(e);
    }
    Ok(direct)
}

fn open_new(path: &Path, flags: libc::c_int) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(flags)
        .open(path)
}

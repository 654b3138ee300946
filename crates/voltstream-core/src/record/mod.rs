//! Recording a capture to many disks at once (issue 12, first part: the data path).
//!
//! Contract: the recorder never holds the capture back. A dispatcher thread takes
//! every chunk from the capture's rings and hands it to the least-loaded writer,
//! one thread per directory (a disk or a RAID set); when no writer has room, the
//! chunk goes back to the pool at once, counted `chunks_unwritten`. Each chunk is
//! written whole, straight from the pool (O_DIRECT where the file system and the
//! chunk's alignment allow), to its own file `<dir>/<scan>/<scan>.<8-digit number>`
//! (jive5ab's FlexBuff "vbs" layout; docs/research/recording-formats.md), under a
//! temporary name until complete, so a crash leaves whole chunk files and at most
//! one `.partial` per disk. A disk that fails is taken out (its queued chunks
//! counted lost) and recording goes on on the others. Every chunk delivered is
//! counted exactly once: written, unwritten, or lost with its disk.
//!
//! Not yet (docs/research/recorder-design.md): the DADA, VDIF and Mark6 layouts,
//! the scan manifest and repair, the `record` verb.

mod files;
mod forward;
mod layout;
mod recorder;
mod writer;

pub use files::Piece;
pub use forward::{Forward, Forwarded};
pub use layout::{Layout, DADA_HEADER_LEN, MARK6_SYNC, VDIF_FILL_WORD};
pub use recorder::{RecordReport, RecordSpec, Recorder};
pub use writer::WriterReport;

#[cfg(test)]
mod tests;

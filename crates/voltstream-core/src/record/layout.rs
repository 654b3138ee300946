//! How a recording is laid out on disk: the four layouts `voltstream record`
//! writes, their file names and the few bytes of each that are not samples
//! (DADA headers, the Mark6 file and block headers, VDIF fill frames).
//! The formats' definitions, with their sources, are in docs/formats.md.

use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// Bytes of a DADA header block: the size every PSRDADA tool assumes unless
/// HDR_SIZE says otherwise.
pub const DADA_HEADER_LEN: usize = 4096;
/// Mark6 scatter-gather file header: sync word, version, block size, packet
/// format, packet size (five little-endian 32-bit words).
pub const MARK6_FILE_HEADER_LEN: usize = 20;
/// Mark6 version-2 block header: block number, block size including this header.
pub const MARK6_BLOCK_HEADER_LEN: usize = 8;
pub const MARK6_SYNC: u32 = 0xfeed_6666;
pub const MARK6_VERSION: i32 = 2;
/// The word that fills a VDIF fill frame's payload (the value DiFX's
/// `vdifmux` and mark5access recognise as "no data").
pub const VDIF_FILL_WORD: u32 = 0x1122_3344;

/// What the recorder writes, and how each chunk maps onto files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// jive5ab FlexBuff: every chunk its own file `<dir>/<scan>/<scan>.<8 digits>`,
    /// whole packets, no header; chunk numbers count across all disks.
    Vbs,
    /// Mark6 scatter-gather (d-plane version 2): one file `<dir>/<scan>` per disk,
    /// a 20-byte file header, then one block per chunk (8-byte header: block
    /// number, size); block numbers count across all files.
    Mark6 {
        /// The file header's packet format word: 0 VDIF, 1 Mark5B, 2 other.
        packet_format: i32,
    },
    /// Per stream, files of consecutive chunks,
    /// `<dir>/<scan>/<scan>_s<stream>_<file number>.vdif`: the frames as received,
    /// a missing one as a fill frame (invalid bit, right time, fill payload).
    Vdif {
        /// Index = seconds * this + frame number (the capture's value).
        frames_per_second: u32,
    },
    /// Per stream, PSRDADA files of consecutive chunks,
    /// `<dir>/<scan>/<scan>_s<stream>_<OBS_OFFSET, 16 digits>.dada`: a 4096-byte
    /// header (the stream's `headers` entry plus FILE_SIZE, FILE_NUMBER,
    /// OBS_OFFSET), then the stream's sample bytes, missing packets as zeros.
    Dada {
        /// The header's other keys, `KEY value` lines (observation, sampling):
        /// one for every stream, or one per stream (a band in several streams,
        /// each its own subband's frequency).
        headers: Vec<String>,
    },
}

impl Layout {
    /// The DADA header keys of `stream`'s files: its own entry, or the one for all.
    pub fn dada_keys(&self, stream: usize) -> &str {
        match self {
            Layout::Dada { headers } => headers
                .get(stream)
                .or(headers.first())
                .map_or("", |h| h.as_str()),
            _ => "",
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Layout::Vbs => "vbs",
            Layout::Mark6 { .. } => "mark6",
            Layout::Vdif { .. } => "vdif",
            Layout::Dada { .. } => "dada",
        }
    }

    /// Whether the chunks must hold whole packets (headers included): every
    /// layout but DADA, which holds samples only.
    pub fn whole_packets(&self) -> bool {
        !matches!(self, Layout::Dada { .. })
    }

    /// Whether a file holds a run of consecutive chunks of one stream (DADA,
    /// VDIF), rather than chunks wherever a disk has room (vbs, Mark6).
    pub fn runs(&self) -> bool {
        matches!(self, Layout::Vdif { .. } | Layout::Dada { .. })
    }

    /// Whether the scan has a folder on every disk (all but Mark6, whose scan is
    /// one file per disk).
    pub fn has_folder(&self) -> bool {
        !matches!(self, Layout::Mark6 { .. })
    }

    pub fn validate(&self) -> Result<()> {
        match self {
            Layout::Vdif {
                frames_per_second: 0,
            } => Err(Error::Config(
                "the vdif layout needs the stream's frames per second".into(),
            )),
            Layout::Dada { headers } => {
                for header in headers {
                    if header.len() + 160 > DADA_HEADER_LEN {
                        return Err(Error::Config(format!(
                            "a DADA header of {} bytes leaves no room in {DADA_HEADER_LEN} \
                             bytes for FILE_SIZE, FILE_NUMBER and OBS_OFFSET",
                            header.len()
                        )));
                    }
                    if header.contains('\0') {
                        return Err(Error::Config(
                            "a DADA header is text: it must not hold NUL bytes".into(),
                        ));
                    }
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// Names of a scan's files on one disk.
#[derive(Debug, Clone)]
pub(crate) struct Names {
    /// `<dir>/<scan>/` (the scan's folder) or, for Mark6, `<dir>/`.
    pub folder: PathBuf,
    pub scan: String,
}

impl Names {
    pub fn new(dir: &Path, scan: &str, layout: &Layout) -> Names {
        let folder = if layout.has_folder() {
            dir.join(scan)
        } else {
            dir.to_path_buf()
        };
        Names {
            folder,
            scan: scan.to_owned(),
        }
    }

    pub fn vbs_chunk(&self, number: u64) -> PathBuf {
        self.folder.join(format!("{}.{number:08}", self.scan))
    }

    pub fn mark6(&self) -> PathBuf {
        self.folder.join(&self.scan)
    }

    pub fn vdif(&self, stream: usize, file: u64) -> PathBuf {
        self.folder
            .join(format!("{}_s{stream:02}_{file:08}.vdif", self.scan))
    }

    pub fn dada(&self, stream: usize, obs_offset: u64) -> PathBuf {
        self.folder
            .join(format!("{}_s{stream:02}_{obs_offset:016}.dada", self.scan))
    }
}

/// The 4096-byte DADA header of one file: the observation's keys, then this
/// file's place in the stream. `file_size` counts data bytes only.
pub fn dada_header(keys: &str, file_size: u64, file_number: u64, obs_offset: u64) -> Vec<u8> {
    let mut text = String::with_capacity(DADA_HEADER_LEN);
    text.push_str(keys);
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&format!(
        "HDR_SIZE {DADA_HEADER_LEN}\nFILE_SIZE {file_size}\nFILE_NUMBER {file_number}\n\
         OBS_OFFSET {obs_offset}\n"
    ));
    let mut block = text.into_bytes();
    block.resize(DADA_HEADER_LEN, 0);
    block
}

/// The Mark6 file header for blocks of up to `block_size` bytes (header
/// included) of packets of `packet_size` bytes.
pub fn mark6_file_header(block_size: usize, packet_format: i32, packet_size: usize) -> Vec<u8> {
    let words = [
        MARK6_SYNC as i32,
        MARK6_VERSION,
        i32::try_from(block_size).unwrap_or(i32::MAX),
        packet_format,
        i32::try_from(packet_size).unwrap_or(i32::MAX),
    ];
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// The 8-byte header of block `number` holding `data_len` bytes.
pub fn mark6_block_header(number: u64, data_len: usize) -> [u8; MARK6_BLOCK_HEADER_LEN] {
    let mut h = [0u8; MARK6_BLOCK_HEADER_LEN];
    // Block numbers are 32-bit in the format; they wrap after 2^31 blocks
    // (about 80 PB of 40 MB blocks), which a reader orders modulo 2^32.
    h[..4].copy_from_slice(&(number as u32).to_le_bytes());
    let size = (data_len + MARK6_BLOCK_HEADER_LEN) as u32;
    h[4..].copy_from_slice(&size.to_le_bytes());
    h
}

/// Turns `frame` (a VDIF frame's bytes) into the fill frame for packet index
/// `index`: the header of `template` (a real frame of the same stream) with the
/// invalid bit set and the time of `index`, the payload all fill words.
pub fn vdif_fill_frame(frame: &mut [u8], template: &[u8], index: u64, frames_per_second: u32) {
    let legacy = template[3] & 0x40 != 0;
    let header_len = if legacy { 16 } else { 32 };
    let header_len = header_len.min(frame.len()).min(template.len());
    frame[..header_len].copy_from_slice(&template[..header_len]);
    let fps = u64::from(frames_per_second.max(1));
    let seconds = (index / fps) as u32 & 0x3fff_ffff;
    let number = (index % fps) as u32 & 0x00ff_ffff;
    let word0 = u32::from_le_bytes(frame[..4].try_into().unwrap_or_default());
    let word0 = (word0 & 0x4000_0000) | 0x8000_0000 | seconds;
    frame[..4].copy_from_slice(&word0.to_le_bytes());
    let word1 = u32::from_le_bytes(frame[4..8].try_into().unwrap_or_default());
    let word1 = (word1 & 0xff00_0000) | number;
    frame[4..8].copy_from_slice(&word1.to_le_bytes());
    for word in frame[header_len..].chunks_mut(4) {
        let fill = VDIF_FILL_WORD.to_le_bytes();
        word.copy_from_slice(&fill[..word.len()]);
    }
}

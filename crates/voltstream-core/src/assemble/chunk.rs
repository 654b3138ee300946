use crate::memory::{Buffer, Placement};
use crate::{Error, Result};

/// Shape of every chunk of one capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkLayout {
    pub streams: usize,
    pub packets_per_chunk: usize,
    pub payload_len: usize,
}

impl ChunkLayout {
    /// Checks that the layout is non-empty and its byte size fits in memory.
    pub fn validate(&self) -> Result<()> {
        if self.streams == 0 || self.packets_per_chunk == 0 || self.payload_len == 0 {
            return Err(Error::Config(format!(
                "chunk layout needs at least one stream, one packet and one payload byte \
                 (got {} streams, {} packets per chunk, {} bytes per payload)",
                self.streams, self.packets_per_chunk, self.payload_len
            )));
        }
        let fits = matches!(self.checked_bytes(), Some(b) if b <= isize::MAX as usize / 2);
        if !fits {
            return Err(Error::Config(format!(
                "a chunk of {} streams x {} packets x {} bytes is too large; lower \
                 packets_per_chunk",
                self.streams, self.packets_per_chunk, self.payload_len
            )));
        }
        Ok(())
    }

    fn checked_bytes(&self) -> Option<usize> {
        self.streams
            .checked_mul(self.packets_per_chunk)?
            .checked_mul(self.payload_len)
    }

    /// Packets (and presence bits) per chunk, all streams.
    pub fn packets(&self) -> usize {
        self.streams * self.packets_per_chunk
    }

    /// Data bytes per chunk.
    pub fn bytes(&self) -> usize {
        self.packets() * self.payload_len
    }

    /// 64-bit words of the presence bitmap.
    pub fn words(&self) -> usize {
        self.packets().div_ceil(64)
    }
}

/// A time-contiguous block of packets for every stream, with its presence bitmap.
///
/// Data is laid out `[stream][packet][payload byte]`; bit `stream *
/// packets_per_chunk + packet` of [`Chunk::present_words`] says whether that
/// payload arrived. Bytes of absent packets are left from an earlier use of the
/// chunk: consumers must consult the bitmap (or zero them) before using the data.
#[derive(Debug)]
pub struct Chunk {
    pub(crate) data: Buffer,
    pub(crate) present: Box<[u64]>,
    pub(crate) layout: ChunkLayout,
    pub(crate) chunk_id: u64,
    pub(crate) present_count: usize,
}

impl Chunk {
    /// Allocates one chunk (pre-faulted); done at start-up only.
    pub fn new(layout: ChunkLayout) -> Result<Chunk> {
        Self::placed(layout, &Placement::default())
    }

    /// As [`Chunk::new`], with its data placed as asked (huge pages, NUMA node).
    pub fn placed(layout: ChunkLayout, placement: &Placement) -> Result<Chunk> {
        layout.validate()?;
        Ok(Chunk {
            data: Buffer::placed(layout.bytes(), placement)?,
            present: vec![0; layout.words()].into_boxed_slice(),
            layout,
            chunk_id: 0,
            present_count: 0,
        })
    }

    pub fn layout(&self) -> ChunkLayout {
        self.layout
    }

    /// The memory holding the chunk's data (for placement reports).
    pub fn buffer(&self) -> &Buffer {
        &self.data
    }

    /// Position on the chunk timeline: packet index / packets_per_chunk.
    pub fn chunk_id(&self) -> u64 {
        self.chunk_id
    }

    /// Packet index of packet 0 of every stream in this chunk.
    pub fn first_index(&self) -> u64 {
        self.chunk_id
            .saturating_mul(self.layout.packets_per_chunk as u64)
    }

    /// Number of packets present, all streams.
    pub fn present_count(&self) -> usize {
        self.present_count
    }

    pub fn data(&self) -> &[u8] {
        self.data.as_slice()
    }

    pub fn data_mut(&mut self) -> &mut [u8] {
        self.data.as_mut_slice()
    }

    /// Pointer to the data, stable for the chunk's whole life (for FFI exports).
    pub fn data_ptr(&self) -> *const u8 {
        self.data.as_ptr()
    }

    pub fn present_words(&self) -> &[u64] {
        &self.present
    }

    /// Zeroes the payload slot of every packet the bitmap marks absent (their bytes
    /// are left from the chunk's last use); returns how many. For consumers that
    /// write the chunk out whole, such as the recorder.
    pub fn zero_absent(&mut self) -> usize {
        self.fill_absent(|_, slot| slot.fill(0))
    }

    /// Calls `fill(slot, bytes)` for every absent slot (slot = stream position *
    /// packets_per_chunk + packet) with its bytes, walking the bitmap a word at
    /// a time; returns how many there were. Present slots are not touched.
    pub fn fill_absent(&mut self, mut fill: impl FnMut(usize, &mut [u8])) -> usize {
        let packets = self.layout.packets();
        if self.present_count == packets {
            return 0;
        }
        let len = self.layout.payload_len;
        let data = self.data.as_mut_slice();
        let mut filled = 0;
        for (w, &word) in self.present.iter().enumerate() {
            // Absent slots of this word, bits past the last packet masked off.
            let valid = (packets - w * 64).min(64);
            let mut absent = !word & (u64::MAX >> (64 - valid));
            while absent != 0 {
                let slot = w * 64 + absent.trailing_zeros() as usize;
                fill(slot, &mut data[slot * len..(slot + 1) * len]);
                absent &= absent - 1;
                filled += 1;
            }
        }
        filled
    }

    /// The first slot of stream position `stream` whose packet arrived.
    pub fn first_present(&self, stream: usize) -> Option<usize> {
        let per = self.layout.packets_per_chunk;
        (0..per).find(|&p| self.is_present(stream, p))
    }

    /// Whether packet `packet` of stream `stream` arrived; false when out of range.
    pub fn is_present(&self, stream: usize, packet: usize) -> bool {
        if stream >= self.layout.streams || packet >= self.layout.packets_per_chunk {
            return false;
        }
        let bit = stream * self.layout.packets_per_chunk + packet;
        self.present[bit / 64] & (1 << (bit % 64)) != 0
    }

    /// The payload slot of one packet (present or not); `None` when out of range.
    pub fn payload(&self, stream: usize, packet: usize) -> Option<&[u8]> {
        if stream >= self.layout.streams || packet >= self.layout.packets_per_chunk {
            return None;
        }
        let start = (stream * self.layout.packets_per_chunk + packet) * self.layout.payload_len;
        self.data().get(start..start + self.layout.payload_len)
    }
}

"""Chunk checks shared by the capture tests: take every chunk of a stopped capture, and
compare chunks with the packets sent (present where not lost, the exact bytes); a chunk
of whole frames in real memory, as the engine hands one over (the voltage ring's
tests)."""

from __future__ import annotations

import numpy as np


def drain(cap, timeout=0.2):
    """Every chunk the capture still holds, in order (the caller releases them)."""
    chunks = []
    while (ch := cap.next_chunk(timeout)) is not None:
        chunks.append(ch)
    return chunks


def collect(cap):
    """Stops the capture; returns {(stream, index): packet payload} and the stats."""
    cap.stop()
    got = {}
    for ch in drain(cap):
        data = np.frombuffer(ch, np.uint8).reshape(ch.nstreams, ch.packets_per_chunk, -1)
        present = np.frombuffer(ch.present, np.uint8).reshape(ch.nstreams, -1)
        for s, k in zip(*np.nonzero(present), strict=True):
            got[(int(s), ch.chunk_id * ch.packets_per_chunk + int(k))] = data[s, k].tobytes()
        del data
        ch.release()
    return got, cap.stats()


def check_chunks(chunks, data, gap, ppc):
    """Chunk k starts at index k * ppc, holds ``data[index, stream]`` wherever (index,
    stream) is not in ``gap``, and marks exactly those present; releases each chunk."""
    nstreams, plen = data.shape[1], data.shape[2]
    for k, ch in enumerate(chunks):
        assert (ch.chunk_id, ch.first_index) == (k, k * ppc)
        assert (ch.nstreams, ch.packets_per_chunk, ch.payload_len) == (nstreams, ppc, plen)
        got = np.frombuffer(ch, np.uint8).reshape(nstreams, ppc, plen)
        present = np.frombuffer(ch.present, np.uint8).reshape(nstreams, ppc).astype(bool)
        want_present = np.array(
            [[(k * ppc + j, s) not in gap for j in range(ppc)] for s in range(nstreams)]
        )
        np.testing.assert_array_equal(present, want_present)
        assert ch.present_count == want_present.sum()
        want = data[k * ppc : (k + 1) * ppc].transpose(1, 0, 2)
        np.testing.assert_array_equal(got[present], want[present])
        del got
        ch.release()


class FrameChunk:
    """A chunk as the engine hands it over: whole packets ``frames`` (packets, bytes) in
    real memory, one stream, ``present`` per packet; stale bytes where none arrived."""

    def __init__(self, cid: int, frames: np.ndarray, present: list[int]) -> None:
        self.chunk_id, self.thread, self.streams = cid, 0, [0]
        self.packets_per_chunk = len(present)
        self.present = np.asarray(present, np.uint8).tobytes()
        self.present_count = sum(present)
        self.buf = np.ascontiguousarray(frames)
        self.buf[~np.asarray(present, bool)] = 0x5A
        self.address = self.buf.ctypes.data
        self.released = False

    def release(self) -> None:
        self.released = True

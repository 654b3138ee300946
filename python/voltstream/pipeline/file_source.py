"""A file's samples read in large blocks straight into page-locked buffers, for the GPU.

The file fold's source on the product path (pipeline/gpu.py): instead of a memory map
read by one thread and copied again into staging memory, ``readers`` threads
``preadv`` slices of each block directly into one of ``depth`` buffers allocated once
(page-locked when CuPy is there), ahead of the consumer. Each block is handed out as a
:class:`FileBlock` (address, length, samples); the consumer releases it once its copy
to the GPU has completed, and only then is the buffer refilled with a later block.
Reads release the GIL, so several threads reach the page cache's copy bandwidth.

Only byte ranges of whole samples are read, in the file's own layout (for DADA, TFP
samples after the header): the GPU kernels read the bytes as they are.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from voltstream.errors import FormatError

__all__ = ["FileBlock", "FileBlocks", "pinned_buffer"]


def pinned_buffer(nbytes: int) -> np.ndarray:
    """A page-locked uint8 buffer (CuPy's pinned allocator), or plain memory without CuPy."""
    try:
        import cupyx

        return cupyx.empty_pinned((nbytes,), np.uint8)
    except Exception:  # no CuPy or no driver: the copies will still work, slower
        return np.empty(nbytes, np.uint8)


@dataclass
class FileBlock:
    """Samples ``first .. first + nsamp`` of the file, in one pool buffer."""

    index: int
    first: int
    nsamp: int
    nbytes: int
    buffer: np.ndarray = field(repr=False)
    _source: FileBlocks = field(repr=False)
    _released: bool = field(default=False, repr=False)

    @property
    def parts(self) -> list[tuple[int, int, int]]:
        return [(self.buffer.ctypes.data, self.nbytes, 0)]

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._source._refill(self)


class FileBlocks:
    """Blocks of ``block_samples`` samples of ``path``'s data (``nsamp`` samples of
    ``bytes_per_sample`` bytes from byte ``offset``), in order. See the module doc."""

    def __init__(self, path, offset: int, nsamp: int, bytes_per_sample: int,
                 block_samples: int, depth: int = 4, readers: int = 4, alloc=None):  # fmt: skip
        if block_samples < 1 or depth < 2 or readers < 1:
            raise FormatError("file blocks need block_samples >= 1, depth >= 2, readers >= 1")
        self.path, self.offset, self.nsamp = str(path), int(offset), int(nsamp)
        self.bps, self.block_samples = int(bytes_per_sample), int(block_samples)
        self.nblocks = -(-self.nsamp // self.block_samples)
        self.readers = readers
        alloc = alloc or pinned_buffer
        ndepth = min(depth, self.nblocks)
        self.buffers = [alloc(self.block_samples * self.bps) for _ in range(ndepth)]
        self.fd = os.open(self.path, os.O_RDONLY)
        self.pool = ThreadPoolExecutor(readers, thread_name_prefix="vs-read")
        self.pending: dict[int, tuple[np.ndarray, list]] = {}  # block -> (buffer, reads)
        self.next_read = 0
        self.bytes_read = 0
        for buf in self.buffers:
            self._start(buf)

    def _start(self, buf: np.ndarray) -> None:
        k = self.next_read
        if k >= self.nblocks:
            return
        self.next_read += 1
        first = k * self.block_samples
        n = min(self.block_samples, self.nsamp - first)
        nbytes = n * self.bps
        step = -(-nbytes // self.readers)
        step += -step % 4096  # page-aligned slices
        at = self.offset + first * self.bps
        reads = [
            self.pool.submit(self._read, buf, a, min(step, nbytes - a), at + a)
            for a in range(0, nbytes, step)
        ]
        self.pending[k] = (buf, reads)

    def _read(self, buf: np.ndarray, at: int, n: int, pos: int) -> int:
        view = memoryview(buf)[at : at + n]
        got = 0
        while got < n:
            r = os.preadv(self.fd, [view[got:]], pos + got)
            if r == 0:
                raise FormatError(
                    f"{self.path}: ends at byte {pos + got}, before the {self.nsamp} samples its "
                    "header announced (truncated while reading?)"
                )
            got += r
        return n

    def _refill(self, blk: FileBlock) -> None:
        if self.fd is not None:
            self._start(blk.buffer)

    def blocks(self, wait_free=None):
        """The blocks in order. Block k is read into the buffer block k - depth gave
        back: when the consumer still holds every buffer, ``wait_free()`` must make it
        release one (e.g. wait for the oldest copy to the GPU); without it, an error."""
        for k in range(self.nblocks):
            while k not in self.pending:
                if wait_free is None:
                    raise FormatError(
                        f"all {len(self.buffers)} file buffers are held: release blocks "
                        "before asking for more"
                    )
                wait_free()
            buf, reads = self.pending.pop(k)
            for r in reads:
                self.bytes_read += r.result()
            first = k * self.block_samples
            n = min(self.block_samples, self.nsamp - first)
            yield FileBlock(k, first, n, n * self.bps, buf, self)

    def __iter__(self):
        return self.blocks()

    def close(self) -> None:
        """Stops the readers (reads in flight finish) and closes the file."""
        for _, reads in self.pending.values():
            for r in reads:
                r.cancel()
        self.pool.shutdown(wait=True)
        self.pending.clear()
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> FileBlocks:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

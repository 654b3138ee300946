"""The file source of the product path: a baseband file read straight into page-locked
host buffers by reader threads, ahead of the consumer, block by block.

(Over 600 lines for one concept: the block plans of DADA and VDIF, the reader threads
and the in-order handout share one lock and one state; split them when a third format
or a second reader kind comes.)

::

    file ──preadv (reader threads, GIL released)──▶ pool of ``depth`` host buffers
        ──HostBlock (parts, nsamp, skip, valid, release)──▶ StageRunner (pipeline/gpu.py)
        ──async H2D copy; release() on its event──▶ buffer back to the pool

No sample is touched in Python: the file's bytes land in their final host buffer (one
copy, page cache to pinned memory, made by the kernel in ``preadv``) and the GPU's
packed-unpack kernel reads them there through :attr:`FileSource.layout`.

- **DADA** (8-bit, real or complex, TFP): the data after the header is time-major
  already; a block is a contiguous byte range of whole samples, described by
  ``PackedLayout.time_major(8, "twos", ...)``. A partial sample at the end of the file
  is left out and counted (:attr:`FileSource.leftover_bytes`, :attr:`FileSource.notes`).
  16-bit DADA raises :class:`~voltstream.errors.ConfigError` (the packed unpack reads
  2/4/8-bit values): the caller falls back to its staged path.
- **VDIF, regular** (every thread's frame present and valid in each time step, in
  polarisation order, so frame ``k`` of the file is time frame ``k // npol`` of
  polarisation ``k % npol``): a block is a contiguous byte range of whole time frames,
  headers included, read as it is. The layout's strides step over the headers
  (``s_blk = npol * frame_len`` and ``s_p = frame_len``, in values) and every block's
  :attr:`HostBlock.skip` is the header length, so value ``v`` of the layout formula is
  at bit ``8 * skip + v * nbit`` of the block. ``layout.nbytes(n)`` then counts from
  the first data byte: ``skip + nbytes(nsamp)`` is exactly the block's size.
- **VDIF, irregular** (a frame missing, flagged invalid, out of order): each frame's
  data array is read to its place in ``VdifFile.read_packed``'s layout (time frame,
  pol, data), by scatter ``preadv`` over runs of consecutive frames (the headers go to
  a scratch buffer), absent frames zeroed; the block carries the per-sample mask
  (``HostBlock.valid``) that ``VdifFile.valid_samples`` gives. The bytes equal
  ``read_packed``'s; the reads release the GIL and never touch a memory map (a file
  cut short while mapped would kill the process with SIGBUS).

Buffers and order. The pool holds ``depth`` buffers of :attr:`FileSource.buffer_bytes`,
made once at open by ``alloc`` (default ``cupyx.empty_pinned``, or page-touched
``np.empty`` without CuPy; :meth:`FileSource.buffers` lists them for
``HostRegistry``). A free buffer is given to the next block in time order; the block
is cut into stripes (8 MiB) that the ``readers`` threads read in parallel, so even
one block in flight uses every reader. Iteration yields block ``k`` only after
``k - 1``, once all its stripes are in; a buffer is reused only after its block's
``release()`` (the consumer's GPU copy completed), which is the backpressure: a
consumer that holds blocks stalls the readers, never grows the pool. When the
consumer holds every buffer and asks for another block, ``next()`` waits
``stall_timeout_s`` for a release from another thread and then raises ConfigError
(not a hang). Errors of the readers (a file cut short after it was opened, an I/O
error) are raised by ``next()`` in the iterating thread as FormatError
(:class:`~voltstream.errors.TruncatedFileError` for a short file). ``close()`` (also
on leaving a ``with`` block) stops and joins the readers, mid-iteration too, and
drops the pool: the caller must have waited for the copies from held blocks first
(``Handoff.drain``); a block's ``data`` view keeps its buffer alive until dropped.

``direct=True`` opens the file with ``O_DIRECT`` (reads bypass the page cache: for
cold files on fast disks; slower for a file already cached): reads start and end on
4096-byte boundaries, so a block's bytes start ``skip`` bytes into its buffer (``skip``
then varies per block; :attr:`block_bytes` allows for it). File systems without
``O_DIRECT`` (tmpfs) fall back to buffered reads with a note. The irregular VDIF path
always reads buffered.

Measured read throughput (bench/file_source.py: the source alone, no GPU, each block
released at once; 3 GB files in the page cache, 64 MiB blocks, depth 4, pre-touched
np.empty buffers; development VM with 2 cores and a 12.8 GB/s single-thread memcpy,
so readers beyond 2 cannot help there):

    ========================  ==========  ==========  ==========
    GB/s (G samples/s)        1 reader    2 readers   4 readers
    ========================  ==========  ==========  ==========
    DADA, /tmp (ext4)         6.7 (3.3)   13.1 (6.6)  13.0 (6.5)
    VDIF as stored, /tmp      6.7 (3.4)   12.8 (6.4)  12.9 (6.4)
    DADA, /dev/shm            5.6 (2.8)   10.8 (5.4)  10.8 (5.4)
    VDIF as stored, /dev/shm  5.6 (2.8)   10.8 (5.4)  10.7 (5.3)
    VDIF gathered, /dev/shm   4.4 (2.2)    8.4 (4.2)   8.3 (4.2)
    ========================  ==========  ==========  ==========

Reading scales with the cores (one page-cache copy per byte, about 6 GB/s a core), so
15 G samples/s (30 GB/s of 8-bit data) needs about 5-6 readers on cores of their own;
measure on the GPU machine with the same script. Opening a VDIF file checks every
frame header first (VdifFile, one thread: 0.07-0.14 s for these 3 GB, and a full read
of a file not yet cached). O_DIRECT from this VM's disk: 0.9 GB/s (1 reader), 1.8 GB/s (4).
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from voltstream.dsp.packed import PackedLayout
from voltstream.errors import ConfigError, FormatError, TruncatedFileError, VoltstreamError
from voltstream.io.baseband import open_baseband

__all__ = ["FileSource", "HostBlock", "open_file_source", "pageable_alloc", "pinned_alloc"]

DEFAULT_BLOCK_BYTES = 64 << 20
STRIPE_BYTES = 8 << 20
ALIGN = 4096
try:
    _IOV_MAX = max(16, os.sysconf("SC_IOV_MAX"))
except (ValueError, OSError):  # pragma: no cover - every Linux has it
    _IOV_MAX = 1024


@dataclass
class HostBlock:
    """One block of a source, in host memory the GPU can copy from as it is.

    ``parts`` are (host address, nbytes, byte offset in the device buffer) runs to
    copy; the samples start ``skip`` bytes into the device buffer, in the source's
    ``layout``. ``valid`` is a bool per time sample (False: lost), None when all are
    valid. ``release()`` gives the host memory back to the source's pool; call it
    once the copy from it has completed. ``data`` is the block's bytes (a view of the
    pool buffer covering ``parts``) for CPU consumers; do not read it after release.
    """

    chunk_id: int
    parts: list[tuple[int, int, int]]
    nsamp: int
    skip: int
    valid: np.ndarray | None
    release: Callable[[], None]
    data: np.ndarray | None = None

    @property
    def nbytes(self) -> int:
        """The bytes the block's copy moves (what ``StageRunner`` counts as fed)."""
        return sum(n for _, n, _ in self.parts)


def pinned_alloc(nbytes: int) -> np.ndarray:
    """A page-locked uint8 host buffer (``cupyx.empty_pinned``)."""
    import cupyx

    return cupyx.empty_pinned((int(nbytes),), dtype=np.uint8)


def pageable_alloc(nbytes: int) -> np.ndarray:
    """Pageable memory with every page faulted in (so reads do not fault per block); to
    page-lock afterwards with ``HostRegistry.register(source.buffers())``."""
    buf = np.empty(int(nbytes), dtype=np.uint8)
    buf[::4096] = 0
    return buf


def _default_alloc() -> tuple[Callable[[int], np.ndarray], str | None]:
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            return pinned_alloc, None
        why = "no CUDA device"
    except Exception as e:  # no CuPy, no driver: both mean pageable buffers
        why = f"CuPy unavailable ({type(e).__name__})"
    return pageable_alloc, f"host buffers are pageable ({why}); the GPU copies will stage"


@dataclass(frozen=True)
class _Range:
    """A block read as one contiguous file range [lo, hi) (DADA, regular VDIF)."""

    lo: int
    hi: int


@dataclass(frozen=True)
class _Frames:
    """A block gathered frame by frame: time frames [f0, f1) (irregular VDIF)."""

    f0: int
    f1: int


class FileSource:
    """Blocks of a DADA or VDIF file in pooled host buffers; see the module docstring.

    ``reader`` is an opened :class:`~voltstream.io.dada.DadaReader` or
    :class:`~voltstream.io.vdif.VdifFile` (what ``open_baseband`` returns); the source
    reads the file through a descriptor of its own, keeps the reader as ``.reader`` and
    closes it on :meth:`close` only with ``close_reader=True`` (as
    :func:`open_file_source` does).
    """

    def __init__(
        self,
        reader: Any,
        block_samples: int | None = None,
        readers: int = 4,
        depth: int = 4,
        alloc: Callable[[int], np.ndarray] | None = None,
        *,
        direct: bool = False,
        stripe_bytes: int = STRIPE_BYTES,
        stall_timeout_s: float = 10.0,
        close_reader: bool = False,
    ) -> None:
        if readers < 1 or depth < 1:
            raise ConfigError(f"a file source needs readers >= 1 and depth >= 1, got "
                              f"{readers} and {depth}")  # fmt: skip
        if stripe_bytes < ALIGN:
            raise ConfigError(f"stripe_bytes must be at least {ALIGN}, got {stripe_bytes}")
        self.reader = reader
        self._close_reader = close_reader
        self.path = Path(reader.path)
        self.obs = reader.obs
        self.nsamp = int(reader.nsamp)
        self.notes: list[str] = []
        self.leftover_bytes = 0
        self.stall_timeout_s = float(stall_timeout_s)
        self._stripe = stripe_bytes // ALIGN * ALIGN
        if hasattr(reader, "frame_table"):
            self._plan_vdif(reader, block_samples)
        else:
            self._plan_dada(reader, block_samples)
        self.layout.check()
        self.nblocks = -(-self.nsamp // self.block_samples)

        self._fd = self._fd_direct = -1
        self.direct = False
        try:
            self._fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(self._fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
            if direct and self.kind != "vdif-gather":
                self._open_direct()
            elif direct:
                self.notes.append("O_DIRECT is not used for the frame-by-frame VDIF path")
            self._file_size = os.fstat(self._fd).st_size
        except OSError as e:
            self._close_fds()
            raise FormatError(f"cannot open {self.path} for reading: {e.strerror}") from e

        # Buffer size: the largest block, plus room to align reads for O_DIRECT.
        slack = 2 * ALIGN if self.direct else 0
        self.buffer_bytes = self._max_block_bytes + slack
        self.block_bytes = self._max_block_bytes + (ALIGN if self.direct else 0)
        if alloc is None:
            alloc, note = _default_alloc()
            if note:
                self.notes.append(note)
        # Pinned already: the runner (pipeline/gpu.py StageRunner.attach) registers
        # only buffers that are not.
        self.page_locked = alloc is pinned_alloc
        self._pool: list[np.ndarray] = []
        self._raw: list[np.ndarray] = []
        try:
            for _ in range(depth):
                raw = alloc(self.buffer_bytes + (ALIGN if self.direct else 0))
                raw = np.asarray(raw).reshape(-1).view(np.uint8)
                buf = raw
                if self.direct:  # O_DIRECT reads need an aligned address
                    off = -raw.ctypes.data % ALIGN
                    buf = raw[off : off + self.buffer_bytes]
                if buf.size < self.buffer_bytes:
                    raise ConfigError(f"alloc({self.buffer_bytes}) returned {buf.size} bytes")
                self._raw.append(raw)
                self._pool.append(buf[: self.buffer_bytes])
        except BaseException:
            self._close_fds()
            raise
        self.depth = depth

        self._cv = threading.Condition(threading.Lock())
        self._free: deque[int] = deque(range(depth))
        self._tasks: deque = deque()
        self._pending: dict[int, list] = {}  # block -> [buffer, stripes left, read start]
        self._ready: dict[int, tuple[int, int]] = {}  # block -> (buffer, read start)
        self._next_assign = 0
        self._next_yield = 0
        self._held = 0
        self._error: BaseException | None = None
        self._closed = False
        self.blocks_read = 0
        self.bytes_read = 0
        self.read_s = 0.0  # summed over the reader threads
        self.wait_s = 0.0  # the consumer's waits for data in next()
        self.max_in_flight = 0
        with self._cv:
            self._assign_locked()
        self._threads = [
            threading.Thread(
                target=self._reader_loop, name=f"voltstream-file-reader-{i}", daemon=True
            )
            for i in range(readers)
        ]
        for t in self._threads:
            t.start()

    # --- planning

    def _plan_dada(self, r: Any, block_samples: Any) -> None:
        if getattr(r, "order", "TFP") != "TFP":
            raise ConfigError(
                f"{self.path}: ORDER {r.order} is not time-major; it is read on the staged "
                "path (read_raw)"
            )
        if r.obs.nbit != 8:
            raise ConfigError(
                f"{self.path}: {r.obs.nbit}-bit DADA cannot go to the GPU as stored (the "
                "packed unpack reads 2/4/8-bit values); use the staged path (read_raw)"
            )
        o = r.obs
        self.kind = "dada"
        self.layout = PackedLayout.time_major(8, "twos", o.nchan, o.npol, o.ndim)
        self._bps = int(r.bytes_per_sample)
        self._data_offset = int(r.hdr_size)
        self.leftover_bytes = int(getattr(r, "leftover_bytes", 0))
        if self.leftover_bytes:
            self.notes.append(
                f"{self.leftover_bytes} trailing bytes of a partial sample are left out"
            )
        if block_samples is None:
            block_samples = max(1, DEFAULT_BLOCK_BYTES // self._bps)
        self.block_samples = min(self._check_block(block_samples), self.nsamp)
        self._skip = 0
        self._max_block_bytes = self.block_samples * self._bps

    def _plan_vdif(self, r: Any, block_samples: Any) -> None:
        o = r.obs
        self._spf = int(r.samples_per_frame)
        self._npol = o.npol
        self._flen = int(r.frame_len)
        self._hlen = int(r.header_len)
        self._dlen = self._flen - self._hlen
        self._table = r.frame_table
        self._ntime = self._table.shape[0]
        nbit = o.nbit
        enc = "vdif2" if nbit == 2 else "offset"
        per_time = o.npol * (self._flen if r.regular else self._dlen)
        if block_samples is None:
            fpb = max(1, DEFAULT_BLOCK_BYTES // per_time)
        else:
            fpb = max(1, self._check_block(block_samples) // self._spf)
        fpb = min(fpb, self._ntime)
        self._fpb = fpb
        self.block_samples = fpb * self._spf
        self._max_block_bytes = fpb * per_time
        if r.regular:
            self.kind = "vdif"
            vals = self._flen * 8 // nbit  # values per frame, header included
            self.layout = PackedLayout(
                nbit, enc, o.ndim, o.nchan, o.npol, self._spf, s_blk=o.npol * vals,
                s_t=o.nchan * o.ndim, s_c=o.ndim, s_p=vals,
            )  # fmt: skip
            self._skip = self._hlen
        else:
            self.kind = "vdif-gather"
            self.layout = r.packed_layout()
            self._skip = 0
            self.notes.append(
                f"VDIF file is not regular ({r.missing_frames} missing, {r.invalid_frames} "
                "invalid frames, or out of order): frames are gathered one by one and "
                "lost samples masked"
            )
        # The valid mask per block, from the frame table (None: complete).
        self._have = (self._table >= 0).all(axis=1)

    def _check_block(self, block_samples: Any) -> int:
        b = int(block_samples)
        if b < 1:
            raise ConfigError(f"block_samples must be at least 1, got {block_samples}")
        return b

    def _open_direct(self) -> None:
        flag = getattr(os, "O_DIRECT", 0)
        if not flag:
            self.notes.append("O_DIRECT is not available here; reading through the page cache")
            return
        try:
            self._fd_direct = os.open(self.path, os.O_RDONLY | flag | getattr(os, "O_CLOEXEC", 0))
        except OSError as e:
            self.notes.append(
                f"O_DIRECT refused by the file system ({e.strerror}); reading through the "
                "page cache"
            )
            return
        self.direct = True

    # --- blocks

    def _block(self, k: int) -> tuple[int, _Range | _Frames]:
        """(sample count, where the block's bytes are) of block k."""
        if self.kind == "dada":
            s0 = k * self.block_samples
            n = min(self.block_samples, self.nsamp - s0)
            lo = self._data_offset + s0 * self._bps
            return n, _Range(lo, lo + n * self._bps)
        f0 = k * self._fpb
        f1 = min(f0 + self._fpb, self._ntime)
        n = (f1 - f0) * self._spf
        if self.kind == "vdif":
            per = self._npol * self._flen
            return n, _Range(f0 * per, f1 * per)
        return n, _Frames(f0, f1)

    def _tasks_of(self, k: int, buf: int) -> tuple[list, int]:
        """The reads of block k into buffer ``buf``, and where its bytes start there."""
        _, where = self._block(k)
        if isinstance(where, _Frames):
            # Stripes of whole time frames, about stripe_bytes each.
            per = max(1, self._stripe // (self._npol * self._dlen))
            tasks = [
                ("frames", k, buf, where.f0, f, min(f + per, where.f1))
                for f in range(where.f0, where.f1, per)
            ]
            return tasks, 0
        lo = where.lo
        if self.direct:
            lo = where.lo // ALIGN * ALIGN
        tasks = [
            ("range", k, buf, lo, a, min(a + self._stripe, where.hi))
            for a in range(lo, where.hi, self._stripe)
        ]
        return tasks, where.lo - lo

    def _assign_locked(self) -> None:
        while self._free and self._next_assign < self.nblocks and not self._stopped():
            buf = self._free.popleft()
            k = self._next_assign
            self._next_assign += 1
            tasks, start = self._tasks_of(k, buf)
            self._pending[k] = [buf, len(tasks), start]
            self._tasks.extend(tasks)
            in_flight = self._next_assign - self._next_yield + self._held
            self.max_in_flight = max(self.max_in_flight, in_flight)
        self._cv.notify_all()

    def _stopped(self) -> bool:
        return self._closed or self._error is not None

    # --- reader threads

    def _reader_loop(self) -> None:
        while True:
            with self._cv:
                while not self._tasks:
                    if self._stopped() or self._next_assign >= self.nblocks:
                        return
                    self._cv.wait()
                if self._stopped():
                    return
                task = self._tasks.popleft()
            t0 = time.perf_counter()
            try:
                nbytes = self._run(task)
            except BaseException as e:  # every failure must reach the consumer
                err = e if isinstance(e, VoltstreamError) else self._wrap(e, task)
                with self._cv:
                    if self._error is None:
                        self._error = err
                    self._tasks.clear()
                    self._cv.notify_all()
                return
            dt = time.perf_counter() - t0
            with self._cv:
                self.read_s += dt
                self.bytes_read += nbytes
                k = task[1]
                st = self._pending.get(k)
                if st is None:  # closed meanwhile
                    return
                st[1] -= 1
                if st[1] == 0:
                    del self._pending[k]
                    self._ready[k] = (st[0], st[2])
                    self.blocks_read += 1
                    self._cv.notify_all()

    def _wrap(self, e: BaseException, task: Any) -> FormatError:
        if isinstance(e, OSError):
            return FormatError(
                f"{self.path}: reading block {task[1]} failed: {e.strerror or e}; "
                "check the disk and the file"
            )
        return FormatError(f"{self.path}: the file reader failed on block {task[1]}: {e!r}")

    def _run(self, task: Any) -> int:
        kind, k, b = task[0], task[1], task[2]
        buf = self._pool[b]
        if kind == "range":
            base, lo, hi = task[3], task[4], task[5]
            if self.direct:  # whole aligned units; the file's end cuts the last short
                req = -(-hi // ALIGN) * ALIGN
                fd = self._fd_direct
            else:
                req, fd = hi, self._fd
            got = _pread_full(fd, memoryview(buf)[lo - base : req - base], lo, hi - lo)
            if got < hi - lo:
                raise self._short(k, lo + got, hi)
            return hi - lo
        f_block, fa, fb = task[3], task[4], task[5]
        return self._gather(buf, k, f_block, fa, fb)

    def _short(self, k: int, at: int, want: int) -> TruncatedFileError:
        return TruncatedFileError(
            f"{self.path} ends at byte {at}, before byte {want} that block {k} needs "
            f"(the file had {self._file_size} bytes when opened): it was cut short "
            "while being read"
        )

    def _gather(self, buf: np.ndarray, k: int, f_block: int, fa: int, fb: int) -> int:
        """Time frames fa..fb of the file's frame table into their read_packed places."""
        dlen, flen, hlen = self._dlen, self._flen, self._hlen
        rows = self._table[fa:fb].reshape(-1).tolist()
        base = (fa - f_block) * self._npol * dlen
        mv = buf.data.cast("B")
        scratch = bytearray(hlen)
        total = 0
        i, n = 0, len(rows)
        while i < n:
            r = rows[i]
            if r < 0:
                buf[base + i * dlen : base + (i + 1) * dlen] = 0
                i += 1
                continue
            # A run of destinations whose frames follow one another in the file.
            j = i + 1
            limit = min(n, i + _IOV_MAX // 2)
            while j < limit and rows[j] == r + (j - i):
                j += 1
            iov: list = []
            for d in range(i, j):
                iov.append(scratch)
                iov.append(mv[base + d * dlen : base + (d + 1) * dlen])
            want = (j - i) * flen
            got = _preadv_full(self._fd, iov, r * flen)
            if got < want:
                raise self._short(k, r * flen + got, r * flen + want)
            total += want
            i = j
        return total

    # --- the consumer side

    def __iter__(self) -> Iterator[HostBlock]:
        return self

    def __next__(self) -> HostBlock:
        t0 = time.perf_counter()
        with self._cv:
            k = self._next_yield
            stall_since = None
            while True:
                if self._closed or k >= self.nblocks:
                    raise StopIteration
                if k in self._ready:
                    break
                if self._error is not None:
                    raise self._error
                if self._next_assign <= k and not self._free:
                    # Every buffer is held by the consumer: only a release from another
                    # thread can go on.
                    now = time.perf_counter()
                    stall_since = stall_since or now
                    if now - stall_since >= self.stall_timeout_s:
                        raise ConfigError(
                            f"the consumer holds all {self.depth} buffers of the file "
                            f"source and asks for block {k}: release blocks once their "
                            "copies are done before taking more, or raise depth"
                        )
                else:
                    stall_since = None
                self._cv.wait(0.25)
            b, start = self._ready.pop(k)
            self._next_yield += 1
            self._held += 1
        self.wait_s += time.perf_counter() - t0
        n, where = self._block(k)
        valid = None
        if isinstance(where, _Range):
            nbytes = where.hi - where.lo
        else:
            nbytes = (where.f1 - where.f0) * self._npol * self._dlen
            have = self._have[where.f0 : where.f1]
            if not have.all():
                valid = np.repeat(have, self._spf)
        buf = self._pool[b]
        data = buf[: start + nbytes]
        return HostBlock(
            chunk_id=k,
            parts=[(int(data.ctypes.data), start + nbytes, 0)],
            nsamp=n,
            skip=self._skip + start,
            valid=valid,
            release=self._releaser(b),
            data=data,
        )

    def _releaser(self, b: int) -> Callable[[], None]:
        done = False

        def release() -> None:
            nonlocal done
            with self._cv:
                if done:
                    return
                done = True
                self._held -= 1
                if self._closed:
                    return
                self._free.append(b)
                self._assign_locked()

        return release

    def buffers(self) -> list[tuple[int, int]]:
        """(address, nbytes) of every pool buffer, fixed for the source's life (to
        page-lock them with ``HostRegistry`` when ``alloc`` gave pageable memory)."""
        return [(int(b.ctypes.data), int(b.nbytes)) for b in self._pool]

    chunk_buffers = buffers  # a capture's name for its pool: what StageRunner.attach reads

    @property
    def in_flight(self) -> int:
        """Blocks given a buffer and not yet released (read, being read or held)."""
        with self._cv:
            return self.depth - len(self._free)

    def stats(self) -> dict:
        return {
            "kind": self.kind,
            "blocks": self.nblocks,
            "blocks_read": self.blocks_read,
            "bytes_read": self.bytes_read,
            "read_s": self.read_s,
            "consumer_wait_s": self.wait_s,
            "readers": len(self._threads),
            "depth": self.depth,
            "buffer_bytes": self.buffer_bytes,
            "direct": self.direct,
            "notes": list(self.notes),
        }

    def close(self) -> None:
        """Stops and joins the readers, closes the file and drops the pool."""
        with self._cv:
            if self._closed:
                return
            self._closed = True
            self._tasks.clear()
            self._cv.notify_all()
        for t in self._threads:
            t.join()
        self._close_fds()
        self._pool, self._raw = [], []
        if self._close_reader:
            self.reader.close()

    def _close_fds(self) -> None:
        for name in ("_fd", "_fd_direct"):
            fd = getattr(self, name, -1)
            if fd >= 0:
                setattr(self, name, -1)
                os.close(fd)

    def __enter__(self) -> FileSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _pread_full(fd: int, view: memoryview, offset: int, need: int) -> int:
    """Reads into ``view`` from ``offset`` until ``need`` bytes are in or the file ends."""
    got = 0
    while got < need:
        n = os.preadv(fd, [view[got:]], offset + got)
        if n == 0:
            break
        got += n
    return got


def _preadv_full(fd: int, iov: list, offset: int) -> int:
    """Scatter read of ``iov`` from ``offset``, continuing after short reads; the bytes
    read (less than the total only at the end of the file)."""
    total = sum(len(v) for v in iov)
    got = 0
    while got < total:
        n = os.preadv(fd, iov, offset + got)
        if n == 0:
            break
        got += n
        if got < total:  # drop the filled buffers, trim the partly filled one
            while n and n >= len(iov[0]):
                n -= len(iov[0])
                iov = iov[1:]
            if n:
                iov = [memoryview(iov[0])[n:]] + iov[1:]
    return got


def open_file_source(
    path: str | os.PathLike,
    block_samples: int | None = None,
    readers: int = 4,
    depth: int = 4,
    alloc: Callable[[int], np.ndarray] | None = None,
    chan_bw_mhz: float | None = None,
    freq_mhz: float | None = None,
    **opts: Any,
) -> FileSource:
    """Opens a DADA or VDIF file (by content, as ``voltstream fold`` does) as a
    :class:`FileSource`. ``chan_bw_mhz`` and ``freq_mhz`` are for VDIF, which does not
    record them (a sidecar may); ``opts`` go to :class:`FileSource` (``direct``,
    ``stripe_bytes``, ``stall_timeout_s``)."""
    reader = open_baseband(path, chan_bw_mhz, freq_mhz)
    try:
        return FileSource(reader, block_samples, readers, depth, alloc, close_reader=True, **opts)
    except BaseException:
        reader.close()
        raise

"""The GPU fold engine: coherent dedispersion, detection and folding on one GPU.

Per chunk of time-major baseband (nsamp, nchan, npol[, re/im]):

1. H2D copy of the raw samples from pinned memory on a copy stream, double
   buffered against the compute stream (events order the two);
2. ``unpack_frame``: unpack + transpose to (chan, pol, time) + overlap-save
   framing in one pass, reading the previous chunk's tail from a carry buffer
   kept on the GPU;
3. forward cuFFT (batched C2C, plans cached per batch size);
4. ``chirp_multiply`` (chirp per DM and channel computed once, on the GPU, with
   the inverse FFT's 1/nfft folded in);
5. inverse cuFFT;
6. ``detect_fold``: overlap discard + detection + phase/sub-integration binning
   into float64 accumulators that stay on the GPU until :meth:`finish`.

Semantics are those of the NumPy reference (dsp/dedisperse.py, dsp/detect.py,
fold/reference.py, pipeline/fold.py): the same framing, the same validity rule for
lost samples, the same sub-integrations and weights; :meth:`finish` hands the
GPU sums to a reference :class:`Folder` so the archive is built by the same
code. ``NaiveGpuFolder`` does the same steps in plain CuPy (the benchmark's
baseline). CuPy is imported lazily: this module imports without it.
"""

from __future__ import annotations

import math
import time
from collections import deque
from typing import Any, NamedTuple, Self

import numpy as np

from voltstream.device import gpu_available
from voltstream.dsp.cuda import cupy_module
from voltstream.dsp.dedisperse import Dedisperser
from voltstream.dsp.packed import PackedLayout
from voltstream.errors import ConfigError
from voltstream.fold.kernels import (
    ChirpTemplate,
    FoldTemplate,
    PackedUnpackTemplate,
    UnpackTemplate,
)
from voltstream.fold.reference import Folder, FoldSettings
from voltstream.observation import FoldedArchive, Observation

__all__ = ["GpuFolder", "gpu_available", "output_valid"]

STAGES = ("h2d", "unpack", "fft", "chirp", "ifft", "fold")


class _ValidCarry:
    """The reference's lost-sample rule, on the host: output k is valid only when
    inputs k .. k+overlap were all present (StreamingOverlapSave)."""

    def __init__(self, overlap: int) -> None:
        self.overlap = overlap
        self.carry = np.ones(0, dtype=bool)

    def step(self, valid: np.ndarray | None, n: int, nout: int) -> np.ndarray | None:
        v = np.ones(n, dtype=bool) if valid is None else np.asarray(valid, dtype=bool)
        vbuf = np.concatenate([self.carry, v])
        out = None
        if nout and not vbuf[: nout + self.overlap].all():
            out = output_valid(vbuf, nout, self.overlap)
        self.carry = vbuf[nout:].copy()
        return out


def _lost_mask(valid: np.ndarray | None, n: int) -> np.ndarray | None:
    """Boolean mask of lost samples, or None when every sample is valid."""
    if valid is None:
        return None
    lost = ~np.asarray(valid, dtype=bool).reshape(n)
    return lost if lost.any() else None


def output_valid(vbuf: np.ndarray, nout: int, overlap: int) -> np.ndarray:
    """Validity of ``nout`` outputs from the input validity ``vbuf`` (carry + block)."""
    bad = np.concatenate([[0], np.cumsum(~vbuf[: nout + overlap])])
    return (bad[overlap + 1 : overlap + 1 + nout] - bad[:nout]) == 0


class _FoldJob(NamedTuple):
    """What the fold of one chunk needs, fixed before its kernels are queued: its phase
    knots on the GPU, its first output sample, the outputs' validity, its slot."""

    knots_d: Any
    first: int
    out_valid: np.ndarray | None
    kslot: int


class _Plan:
    """Overlap-save arithmetic shared by both engines (host side, no GPU)."""

    def __init__(
        self,
        obs: Observation,
        dm: float,
        nfft: int | None,
        chunk_samples: int | None,
        band_freqs_mhz: Any = None,
    ) -> None:
        self.dd = Dedisperser(dm, obs.chan_freqs_mhz, obs.chan_bw_mhz, nfft, band_freqs_mhz)
        self.nfft, self.step = self.dd.nfft, self.dd.step
        self.head, self.overlap = self.dd.discard_head, self.dd.overlap
        if chunk_samples is None:
            # ~64 MB of 8-bit raw data for 32 ch x 2 pol, a whole number of steps.
            chunk_samples = max(1, (1 << 19) // self.step) * self.step
        self.chunk = int(chunk_samples)
        if self.chunk < 1:
            raise ConfigError(f"chunk must hold at least one sample, got {chunk_samples}")
        self.max_blocks = (self.nfft - 1 + self.chunk - self.overlap) // self.step + 1

    def blocks(self, carry_len: int, n: int) -> int:
        return max(0, (carry_len + n - self.overlap) // self.step)


class _FolderBase:
    """Shared bookkeeping: carry lengths, validity, sub-integration capacity, result."""

    @classmethod
    def from_settings(cls, obs: Observation, settings: FoldSettings, **kw: Any) -> Self:
        """The engine for ``settings`` (the drivers' one way to make it); ``kw`` are the
        engine's own options, and ``chunk_samples``/``nfft`` where a driver fixes them."""
        kw.setdefault("chunk_samples", settings.block_samples)
        kw.setdefault("nfft", settings.nfft)
        s = settings
        return cls(obs, s.dm, s.predictor, s.nbin, s.tsub_s, pol_mode=s.pol_mode,
                   basis=s.basis, **kw)  # fmt: skip

    def __init__(
        self,
        obs: Observation,
        dm: float,
        predictor: Any,
        nbin: int,
        tsub_s: float | None,
        pol_mode: str = "AA+BB",
        basis: str = "linear",
        nfft: int | None = None,
        chunk_samples: int | None = None,
        band_freqs_mhz: Any = None,
        f_ref_mhz: float | None = None,
    ) -> None:
        """``band_freqs_mhz`` and ``f_ref_mhz``: these channels are part of a whole band
        (a cluster node's subband): the dedispersion is cut as the band's and the
        delays are referred to its centre (cluster/node.py)."""
        self.cp = cupy_module()
        self.obs, self.dm, self.predictor = obs, float(dm), predictor
        self.nbin, self.tsub_s, self.pol_mode, self.basis = int(nbin), tsub_s, pol_mode, basis
        # The reference's folder, composed: its phase rule and delays are the GPU's.
        self.folder = Folder.for_observation(obs, nbin, pol_mode, dm, predictor, tsub_s)
        if f_ref_mhz is not None:
            self.folder = Folder(nbin, obs.nchan, self.folder.npol_out, obs.tsamp_s,
                                 obs.chan_freqs_mhz, f_ref_mhz, dm, predictor, tsub_s,
                                 obs.start_mjd, obs.start_sec)  # fmt: skip
        self.npol_out = self.folder.npol_out
        self.plan = _Plan(obs, dm, nfft, chunk_samples, band_freqs_mhz)
        self.ncp = obs.nchan * obs.npol
        self.carry_len = 0
        self.samples_in = 0
        self.samples_out = 0
        self.lost = 0
        self.valid_carry = _ValidCarry(self.plan.overlap)
        # Absolute input sample of the stream's sample 0 minus the outputs made
        # before it: output k of this engine is absolute output out_base + k.
        self.out_base = 0
        self.nsub_cap = 0
        self.nsub_used = 0  # sub-integrations some output has reached
        self.rows_taken = 0  # sub-integrations handed out by take_rows
        self.knot = 1 << FoldTemplate.KNOT_LOG2

    def start_segment(self, in_start: int) -> None:
        """Start a new, independent input stream at absolute input sample ``in_start``.

        The overlap carried from the previous segment is dropped; the next
        output is absolute output ``in_start`` (input sample ``in_start + head``).
        With ``in_start`` a multiple of the FFT step the frames are those of one
        stream fed from sample 0, so the sums match it to float32 precision.
        The accumulators are kept: a worker folds all its segments into them.
        """
        if int(in_start) < 0:
            raise ConfigError(f"segment start must be >= 0, got {in_start}")
        self.out_base = int(in_start) - self.samples_out
        self.valid_carry = _ValidCarry(self.plan.overlap)
        self._drop_carry()

    def _drop_carry(self) -> None:
        self.carry_len = 0

    # -- host-side helpers

    def _max_sub(self, first: int, nout: int) -> int:
        if not self.tsub_s:
            return 0
        t_last = (first + nout - 1) * self.obs.tsamp_s - float(self.folder.delay_s.min())
        return max(0, math.floor(t_last / self.tsub_s))

    def _knots(self, first: int, nknot: int, out: np.ndarray) -> None:
        o = np.arange(nknot, dtype=np.float64) * self.knot
        t = (int(first) + o) * self.obs.tsamp_s
        tc = t[None, :] - self.folder.delay_s[:, None]
        ph = np.asarray(
            self.predictor.phase(self.obs.start_mjd, self.obs.start_sec + tc), dtype=np.float64
        )
        # Whole turns off per channel: the GPU then interpolates small numbers.
        out[...] = ph - np.floor(ph[:, :1])

    def _finish_archive(
        self, acc: np.ndarray, hits: np.ndarray, offered: np.ndarray, variant: str
    ) -> FoldedArchive:
        if self.samples_out == 0:
            raise ConfigError(
                f"input of {self.samples_in} samples is shorter than one dedispersion FFT "
                f"({self.plan.nfft} samples at DM {self.dm}); give a longer input"
            )
        used = np.nonzero(offered.sum(axis=1) > 0)[0]
        nsub = int(used[-1]) + 1 if used.size else 0
        f = self.folder
        f._sums = np.ascontiguousarray(acc[:nsub], dtype=np.float64)
        f._hits = hits[:nsub].astype(np.int64)
        f._offered = offered[:nsub].astype(np.int64)
        arch = f.result(self.obs, pol_type=self.pol_mode)
        arch.excluded_samples = self.lost
        kind = "polyco" if getattr(self.predictor, "text", None) else type(self.predictor).__name__
        p = self.plan
        arch.history.append(
            f"voltstream fold (gpu, {variant}): coherent dedispersion DM={self.dm} "
            f"nfft={p.nfft} overlap={p.overlap} (head {p.head}, tail {p.overlap - p.head}); "
            f"detection {self.pol_mode}; nbin={self.nbin} tsub={self.tsub_s}; predictor {kind}; "
            f"{self.samples_in} samples read, {self.samples_out} dedispersed, {self.lost} lost"
        )
        return arch


class GpuFolder(_FolderBase):
    """The fused, streamed GPU fold engine; see the module docstring.

    Feed chunks with :meth:`feed` (host arrays; ``pinned=True`` when the array
    is already in pinned memory and stays untouched until :meth:`finish`, or
    the next-but-one feed) or :meth:`feed_device` (already on the GPU), then
    call :meth:`finish` for the archive. ``profile=True`` records events
    around every stage (and synchronises per chunk) for :attr:`stage_ms`.
    """

    variant = "fused"

    def __init__(
        self,
        *args: Any,
        dtype: Any = np.int8,
        ndim: int = 2,
        packed: PackedLayout | None = None,
        profile: bool = False,
        raw_bytes: int | None = None,
        **kw: Any,
    ) -> None:
        super().__init__(*args, **kw)
        cp, p, obs = self.cp, self.plan, self.obs
        self.packed = packed
        if packed is not None:
            if (packed.nchan, packed.npol) != (obs.nchan, obs.npol):
                raise ConfigError(
                    f"packed layout has {packed.nchan} x {packed.npol} channels x pols, the "
                    f"observation {obs.nchan} x {obs.npol}"
                )
            dtype, ndim = np.uint8, packed.ndim
            self.unpack_packed = PackedUnpackTemplate(packed).instantiate(p.nfft, p.step, p.nfft)
            # Decoded carries (ncp, nfft): chunks need not start on a byte boundary.
            self.carry_f = [cp.zeros(self.ncp * p.nfft, dtype=np.complex64) for _ in range(2)]
            self.pin_inmask = [self._pinned((p.chunk,), np.uint8) for _ in range(2)]
            self.dev_inmask = [cp.empty(p.chunk, dtype=np.uint8) for _ in range(2)]
            self.inmask: list[Any] = [None, None]
        self.dtype, self.ndim = np.dtype(dtype), int(ndim)
        if packed is None:
            self.unpack = UnpackTemplate(self.dtype, self.ndim).instantiate(
                self.ncp, p.nfft, p.step
            )
        self.chirp_op = ChirpTemplate().instantiate(obs.nchan, obs.npol, p.nfft)
        self.fold_t = FoldTemplate(obs.npol, self.pol_mode, self.basis)
        self.fold_op = self.fold_t.instantiate(obs.nchan, self.nbin, p.nfft, p.head, p.step)
        self.chirp = cp.asarray((p.dd.response / p.nfft).astype(np.complex64))
        self.delay = cp.asarray(self.folder.delay_s)
        # Flat: the first ncp * nblock * nfft bins of it are the (ncp, nblock, nfft)
        # frames of the current chunk, contiguous whatever nblock is.
        self.frames = cp.empty(self.ncp * p.max_blocks * p.nfft, dtype=np.complex64)
        per_sample = self.ncp * self.ndim
        raw_len = p.chunk * per_sample if packed is None else packed.nbytes(p.chunk)
        # A source's block may be bigger than its samples' bytes (a capture chunk
        # with its head cut, a file block with headers): feed_block copies it whole.
        raw_len = max(raw_len, int(raw_bytes or 0))
        self.dev_raw = [cp.empty(raw_len, dtype=self.dtype) for _ in range(2)]
        carry_len = p.nfft * per_sample if packed is None else 1
        self.carry = [cp.empty(carry_len, dtype=self.dtype) for _ in range(2)]
        self.cur = 0
        self.nknot_max = self.fold_t.nknot(p.max_blocks * p.step)
        self.pin_raw: list[Any] = [None, None]
        self.pin_knots = [self._pinned((obs.nchan * self.nknot_max,), np.float64) for _ in range(2)]
        self.pin_valid = [self._pinned((p.max_blocks * p.step,), np.uint8) for _ in range(2)]
        self.dev_knots = [cp.empty(obs.nchan * self.nknot_max) for _ in range(2)]
        self.dev_valid = [cp.empty(p.max_blocks * p.step, dtype=np.uint8) for _ in range(2)]
        self.copy_stream = cp.cuda.Stream(non_blocking=True)
        self.compute_stream = cp.cuda.Stream(non_blocking=True)
        self.copied = [cp.cuda.Event(disable_timing=True) for _ in range(2)]
        self.consumed = [None, None]
        self.consumed_ev = [cp.cuda.Event(disable_timing=True) for _ in range(2)]
        self.slot = 0
        self.plans: dict[int, object] = {}
        self.acc: Any = None  # CuPy arrays (CuPy has no type information)
        self.hits: Any = None
        self.offered: Any = None
        self._grow(1)
        self.profile = profile
        self.stage_ms = dict.fromkeys(STAGES, 0.0)
        # GPU busy time for the live status line: a timed event pair around each
        # chunk's compute, from a fixed ring (no allocation per chunk).
        self._busy_ring = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(16)]
        self._busy_q: deque = deque()
        self._busy_total_ms = 0.0
        self._busy_next = 0
        # Host cost of feed_block: waiting for a free slot, and the Python work per
        # block (launches, knots, masks), which must stay far below a block's duration.
        self.host_wait_s = self.host_busy_s = 0.0
        self.blocks_fed = 0
        self._copy_done = [cp.cuda.Event(disable_timing=True) for _ in range(64)]

    def _pinned(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        import cupyx

        return cupyx.empty_pinned(shape, dtype=dtype)

    def _grow(self, need: int) -> None:
        if need <= self.nsub_cap:
            return
        cp = self.cp
        cap = max(need, 2 * self.nsub_cap)
        nchan = self.obs.nchan
        with self.compute_stream:
            acc = cp.zeros((cap, self.npol_out, nchan, self.nbin), dtype=np.float64)
            hits = cp.zeros((cap, nchan, self.nbin), dtype=np.uint32)
            offered = cp.zeros((cap, nchan), dtype=np.uint64)
            if self.nsub_cap:
                acc[: self.nsub_cap] = self.acc
                hits[: self.nsub_cap] = self.hits
                offered[: self.nsub_cap] = self.offered
        self.acc, self.hits, self.offered, self.nsub_cap = acc, hits, offered, cap

    def take_rows(self, upto: int) -> list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
        """Sub-integrations ``rows_taken .. upto - 1``, as the reference's
        `Folder.take_rows` gives them (k, sums, hits, offered), once the GPU has folded
        everything queued. The accumulators stay on the GPU (a row of 32 channels x
        1024 bins x 4 products is 1 MB: an observation's rows fit): nothing is moved."""
        upto = min(int(upto), self.nsub_used)
        a = self.rows_taken
        if upto <= a:
            return []
        self.synchronize()
        acc = self.acc[a:upto].get()
        hits = self.hits[a:upto].get().astype(np.int64)
        offered = self.offered[a:upto].get().astype(np.int64)
        self.rows_taken = upto
        return [(a + i, acc[i], hits[i], offered[i]) for i in range(upto - a)]

    def warm_up(self, n: int, duration_s: float | None = None) -> None:
        """Makes now what the first chunks of ``n`` samples would make while data
        waits: the FFT plans of every frame count they can have, and accumulators for
        ``duration_s`` seconds of sub-integrations (a live run must not stall on them)."""
        p = self.plan
        # After the first chunk the carry holds overlap .. overlap + step - 1 samples.
        for nb in {p.blocks(0, n), *(p.blocks(c, n) for c in (p.overlap, p.overlap + p.step - 1))}:
            if nb:
                self._fft_plan(nb)
        if duration_s and self.tsub_s:
            self._grow(int(duration_s / self.tsub_s) + 2)
        self.synchronize()

    def _fft_plan(self, nblock: int) -> Any:
        plan = self.plans.get(nblock)
        if plan is None:
            from cupy.cuda import cufft

            plan = cufft.Plan1d(self.plan.nfft, cufft.CUFFT_C2C, self.ncp * nblock)
            self.plans[nblock] = plan
        return plan

    def _raw_view(self, block: np.ndarray) -> tuple[int, Any]:
        n = block.shape[0]
        if n > self.plan.chunk:
            raise ConfigError(f"chunk of {n} samples exceeds the engine's {self.plan.chunk}")
        want = (n, self.obs.nchan, self.obs.npol) + ((self.ndim,) if self.ndim == 2 else ())
        if self.dtype == np.float32 and block.dtype == np.complex64:
            want = (n, self.obs.nchan, self.obs.npol)
        elif block.dtype != self.dtype:
            raise ConfigError(f"engine reads {self.dtype} samples, got {block.dtype}")
        if tuple(block.shape[: len(want)]) != want:
            raise ConfigError(f"chunk shaped {block.shape}, expected {want}")
        return n, block

    def feed(
        self, block: np.ndarray, valid: np.ndarray | None = None, pinned: bool = False
    ) -> None:
        """Queue one host chunk (time-major raw samples).

        Samples marked lost in `valid` are zeroed before the FFT, as the reference
        does: the chirp's zeroed DC bin spreads any value over the whole FFT, so
        garbage left there would leak (at ~1/nfft) into valid outputs. With
        `pinned=True` they are zeroed in the caller's buffer, which is copied from
        asynchronously (see :meth:`_host_source`).
        """
        slot = self.slot
        n, block = self._raw_view(block)
        per_sample = self.ncp * self.ndim
        lost = _lost_mask(valid, n)
        flat = (block if pinned else np.ascontiguousarray(block)).reshape(-1).view(self.dtype)
        src = self._host_source(slot, flat, n * per_sample, pinned)
        if lost is not None:
            src.reshape(n, per_sample)[lost] = 0
        self._upload(slot, src)
        self._process(slot, n, valid)

    def _host_source(self, slot: int, flat: np.ndarray, count: int, pinned: bool) -> np.ndarray:
        """The page-locked array the slot's copy reads: the caller's own (``pinned``; it
        must stay unchanged until two more feeds or :meth:`synchronize`), or the first
        ``count`` elements of ``flat`` copied into the slot's staging buffer."""
        # The copy from this slot two chunks ago must be done before reuse.
        self.copied[slot].synchronize()
        if pinned:
            return flat[:count]
        if self.pin_raw[slot] is None:
            self.pin_raw[slot] = self._pinned((self.dev_raw[slot].size,), self.dtype)
        src = self.pin_raw[slot][:count]
        np.copyto(src, flat[:count])
        return src

    def _upload(self, slot: int, src: np.ndarray) -> None:
        """Queue the copy of ``src`` into the slot on the copy stream, once the chunk
        that last used it is folded. Asynchronous: ``ndarray.set`` would block the host
        until the copy is done."""
        t0 = self._mark(self.copy_stream)
        if self.consumed[slot] is not None:
            self.copy_stream.wait_event(self.consumed[slot])
        self.dev_raw[slot].data.copy_from_host_async(src.ctypes.data, src.nbytes, self.copy_stream)
        self._stage("h2d", t0, self.copy_stream)

    def feed_device(self, raw_dev: Any, valid: np.ndarray | None = None) -> None:
        """Queue one chunk already on the GPU (flat or shaped, the engine's dtype)."""
        n = raw_dev.size // (self.ncp * self.ndim)
        if n > self.plan.chunk:
            raise ConfigError(f"chunk of {n} samples exceeds the engine's {self.plan.chunk}")
        lost = _lost_mask(valid, n)
        if lost is not None:  # zeroed in place, see feed()
            raw_dev.reshape(n, -1)[self.cp.asarray(lost)] = 0
        self._process(None, n, valid, raw=raw_dev.reshape(-1))

    def feed_packed(
        self, data: np.ndarray, n: int, valid: np.ndarray | None = None, pinned: bool = False
    ) -> None:
        """Queue ``n`` samples as packed bytes in the engine's :class:`PackedLayout`.

        Lost samples (``valid`` False) are zeroed by the unpack kernel from a mask
        copied with the data (no 2-bit code means zero, so the bytes are left
        alone). ``pinned=True``: ``data`` is page-locked and is copied from as is,
        asynchronously (see :meth:`_host_source`).
        """
        if self.packed is None:
            raise ConfigError("feed_packed needs an engine built with packed=PackedLayout(...)")
        n = int(n)
        if not 0 <= n <= self.plan.chunk:
            raise ConfigError(f"chunk of {n} samples exceeds the engine's {self.plan.chunk}")
        need = self.packed.nbytes(n)
        data = np.asarray(data).reshape(-1)
        if data.dtype != np.uint8 or data.size < need:
            raise ConfigError(f"{n} packed samples need {need} uint8 bytes, got {data.dtype} "
                              f"x {data.size}")  # fmt: skip
        slot = self.slot
        lost = _lost_mask(valid, n)
        src = self._host_source(slot, data, need, pinned)
        self._upload(slot, src)
        self._upload_mask(slot, lost, n)
        self._process(slot, n, valid)

    def feed_block(self, parts: Any, n: int, skip: int = 0, valid: np.ndarray | None = None) -> Any:
        """Queue ``n`` packed samples straight from page-locked host memory.

        ``parts`` are (host address, nbytes, offset) runs copied to those byte offsets
        of the slot's device buffer (a capture chunk's streams, a file block); the
        samples start ``skip`` bytes into it, in the engine's :class:`PackedLayout`.
        Nothing is staged on the host. Returns the CUDA event that completes when
        every part has been copied: the caller may reuse the host memory after it.
        """
        if self.packed is None:
            raise ConfigError("feed_block needs an engine built with packed=PackedLayout(...)")
        n = int(n)
        if not 0 <= n <= self.plan.chunk:
            raise ConfigError(f"block of {n} samples exceeds the engine's {self.plan.chunk}")
        slot = self.slot
        dev = self.dev_raw[slot]
        if skip + self.packed.nbytes(n) > dev.size or any(
            off < 0 or off + nb > dev.size for _, nb, off in parts
        ):
            raise ConfigError(f"block parts do not fit the engine's {dev.size}-byte buffer")
        t_in = time.perf_counter()
        self.copied[slot].synchronize()  # the slot's previous copy is done
        t_go = time.perf_counter()
        self.host_wait_s += t_go - t_in
        lost = _lost_mask(valid, n)
        t0 = self._mark(self.copy_stream)
        if self.consumed[slot] is not None:
            self.copy_stream.wait_event(self.consumed[slot])
        for addr, nbytes, off in parts:
            dev[off : off + nbytes].data.copy_from_host_async(addr, nbytes, self.copy_stream)
        self._upload_mask(slot, lost, n)
        self._stage("h2d", t0, self.copy_stream)
        self._process(slot, n, valid, raw=dev[skip:])
        # An event of this block's own (copied[slot] is re-recorded two feeds later,
        # before a caller may have seen it complete): from a ring, re-recorded only
        # 64 blocks later, when it has long completed.
        done = self._copy_done[self.blocks_fed % len(self._copy_done)]
        done.record(self.copy_stream)
        self.host_busy_s += time.perf_counter() - t_go
        self.blocks_fed += 1
        return done

    def feed_gap(self, n: int) -> None:
        """Queue ``n`` lost samples (no packet arrived): nothing is copied but the mask;
        they are zero to the FFT and keep the outputs they touch out of the profiles."""
        if self.packed is None:
            raise ConfigError("feed_gap needs an engine built with packed=PackedLayout(...)")
        for a in range(0, int(n), self.plan.chunk):
            m = min(self.plan.chunk, int(n) - a)
            slot = self.slot
            self.copied[slot].synchronize()
            if self.consumed[slot] is not None:
                self.copy_stream.wait_event(self.consumed[slot])
            self._upload_mask(slot, np.ones(m, dtype=bool), m)
            self._process(slot, m, np.zeros(m, dtype=bool))

    def _upload_mask(self, slot: int, lost: np.ndarray | None, n: int) -> None:
        """The packed kernels' per-sample mask of the slot (None when nothing was lost)."""
        self.inmask[slot] = None
        if lost is not None:
            self.pin_inmask[slot][:n] = ~lost
            self.inmask[slot] = self.dev_inmask[slot][:n]
            self.inmask[slot].data.copy_from_host_async(
                self.pin_inmask[slot].ctypes.data, n, self.copy_stream
            )

    def _mark(self, stream: Any) -> Any:
        if not self.profile:
            return None
        ev = self.cp.cuda.Event()
        ev.record(stream)
        return ev

    def _stage(self, name: Any, start: Any, stream: Any) -> None:
        if start is None:
            return
        end = self.cp.cuda.Event()
        end.record(stream)
        end.synchronize()
        self.stage_ms[name] += self.cp.cuda.get_elapsed_time(start, end)

    def _process(self, slot: int | None, n: int, valid: np.ndarray | None, raw: Any = None) -> None:
        p = self.plan
        nblock = p.blocks(self.carry_len, n)
        nout = nblock * p.step
        first = self.out_base + self.samples_out + p.head
        if valid is not None:
            self.lost += int(np.count_nonzero(~np.asarray(valid, dtype=bool)))
        out_valid = self.valid_carry.step(valid, n, nout)
        kslot = self.slot
        # The pinned tables of this slot were last copied two chunks ago.
        self.copied[kslot].synchronize()
        nknot = self.fold_t.nknot(nout)
        nk = self.obs.nchan * nknot
        knots_h = self.pin_knots[kslot][:nk].reshape(self.obs.nchan, nknot)
        knots_d = self.dev_knots[kslot][:nk].reshape(self.obs.nchan, nknot)
        if self.consumed[kslot] is not None:
            self.copy_stream.wait_event(self.consumed[kslot])
        if nout:
            self.nsub_used = max(self.nsub_used, self._max_sub(first, nout) + 1)
            self._grow(self.nsub_used)
            self._knots(first, nknot, knots_h)
            if out_valid is not None:
                self.pin_valid[kslot][:nout] = out_valid
            # Small per-chunk tables ride the copy stream with the data.
            knots_d.set(knots_h, stream=self.copy_stream)
            if out_valid is not None:
                self.dev_valid[kslot][:nout].set(
                    self.pin_valid[kslot][:nout], stream=self.copy_stream
                )
        self.copied[kslot].record(self.copy_stream)
        cs = self.compute_stream
        cs.wait_event(self.copied[kslot])
        if len(self._busy_q) == len(self._busy_ring):
            self._busy_collect(wait=True)
        pair = self._busy_ring[self._busy_next]
        self._busy_next = (self._busy_next + 1) % len(self._busy_ring)
        pair[0].record(cs)
        self._busy_q.append(pair)
        job = _FoldJob(knots_d, first, out_valid, kslot)
        per_sample = self.ncp * self.ndim
        if raw is None:
            assert slot is not None  # without ``raw`` the data sit in a slot
            raw = self.dev_raw[slot]
        if self.packed is not None:
            with cs:
                self._process_packed(raw, n, slot, nblock, job)
            return self._advance(n, nout)
        raw = raw[: n * per_sample]
        frames = self.frames[: self.ncp * nblock * p.nfft].reshape(self.ncp * nblock, p.nfft)
        carry = self.carry[self.cur]
        with cs:
            if nblock:
                t0 = self._mark(cs)
                self.unpack(raw, carry, self.carry_len, frames, nblock)
                self._stage("unpack", t0, cs)
                self._spectra(frames, nblock)
            # New carry: everything of carry + raw from the first unused sample on.
            cut = nblock * p.step
            nxt = self.carry[1 - self.cur]
            if cut >= self.carry_len:
                a = (cut - self.carry_len) * per_sample
                new_len = n - (cut - self.carry_len)
                nxt[: new_len * per_sample] = raw[a : n * per_sample]
            else:
                keep = self.carry_len - cut
                nxt[: keep * per_sample] = carry[cut * per_sample : self.carry_len * per_sample]
                nxt[keep * per_sample : (keep + n) * per_sample] = raw[: n * per_sample]
                new_len = keep + n
            self._fold(frames, nblock, job)
        self.carry_len = new_len
        self._advance(n, nout)

    def _fold(self, frames: Any, nblock: int, job: _FoldJob) -> None:
        """detect + fold of the frames (on the compute stream), then mark the slot free."""
        cs = self.compute_stream
        kslot = job.kslot
        if nblock:
            t0 = self._mark(cs)
            self.fold_op(
                frames,
                nblock,
                job.knots_d,
                self.delay,
                self.acc,
                self.hits,
                self.offered,
                job.first,
                self.obs.tsamp_s,
                self.tsub_s,
                valid=None
                if job.out_valid is None
                else self.dev_valid[kslot][: nblock * self.plan.step],
            )
            self._stage("fold", t0, cs)
        # Raw samples, knots and masks of this slot are free once the fold ran.
        self._busy_q[-1][1].record(cs)
        ev = self.consumed_ev[kslot]  # re-recorded: waits taken before see the old record
        ev.record(cs)
        self.consumed[kslot] = ev

    def _spectra(self, frames: Any, nblock: int) -> None:
        """FFT, chirp multiply, inverse FFT of the unpacked frames, in place."""
        cs = self.compute_stream
        plan = self._fft_plan(nblock)
        t0 = self._mark(cs)
        plan.fft(frames, frames, -1)
        self._stage("fft", t0, cs)
        t0 = self._mark(cs)
        self.chirp_op(frames, self.chirp, nblock)
        self._stage("chirp", t0, cs)
        t0 = self._mark(cs)
        plan.fft(frames, frames, 1)
        self._stage("ifft", t0, cs)

    def _process_packed(
        self, raw: Any, n: int, slot: int | None, nblock: int, job: _FoldJob
    ) -> None:
        """The packed twin of the framing part of :meth:`_process` (compute stream current)."""
        p, cs = self.plan, self.compute_stream
        frames = self.frames[: self.ncp * nblock * p.nfft].reshape(self.ncp * nblock, p.nfft)
        carry, nxt = self.carry_f[self.cur], self.carry_f[1 - self.cur]
        mask = self.inmask[slot] if slot is not None else None
        if nblock:
            t0 = self._mark(cs)
            self.unpack_packed(raw, n, carry, self.carry_len, mask, frames, nblock)
            self._stage("unpack", t0, cs)
            self._spectra(frames, nblock)
        cut = nblock * p.step
        new_len = self.carry_len + n - cut
        self.unpack_packed.carry_tail(raw, n, carry, self.carry_len, mask, nxt, cut, new_len)
        self._fold(frames, nblock, job)
        self.carry_len = new_len

    def _advance(self, n: int, nout: int) -> None:
        self.cur = 1 - self.cur
        self.samples_in += n
        self.samples_out += nout
        self.slot = 1 - self.slot

    def _busy_collect(self, wait: bool = False) -> None:
        while self._busy_q and (wait or self._busy_q[0][1].done):
            start, end = self._busy_q.popleft()
            end.synchronize()
            self._busy_total_ms += self.cp.cuda.get_elapsed_time(start, end)
            wait = False

    def busy_ms(self) -> float:
        """GPU milliseconds spent on chunks whose compute has finished so far."""
        self._busy_collect()
        return self._busy_total_ms

    def synchronize(self) -> None:
        self.compute_stream.synchronize()
        self.copy_stream.synchronize()

    def finish(self) -> FoldedArchive:
        """Wait for the GPU and build the archive (reference finalisation)."""
        self.synchronize()
        return self._finish_archive(
            self.acc.get(), self.hits.get(), self.offered.get(), self.variant
        )

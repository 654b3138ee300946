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

Real-sampled channels (a packed layout of ``ndim`` 1) are first converted to complex
baseband on the GPU (fold/gpu_real.py: ``dsp/real.py`` ``RealToComplex``'s twin), then
take steps 2-6 as float32 complex samples.

Semantics are those of the NumPy reference (dsp/dedisperse.py, dsp/detect.py,
fold/reference.py, pipeline/fold.py): the same framing, the same validity rule for
lost samples, the same sub-integrations and weights; :meth:`finish` hands the
GPU sums to a reference :class:`Folder` so the archive is built by the same
code. ``NaiveGpuFolder`` does the same steps in plain CuPy (the benchmark's
baseline). CuPy is imported lazily: this module imports without it.

The engine is split by job: ingest (fold/gpu_ingest.py: step 1, chunks into the
device buffers), the chain of operations (here: steps 2-6), and output
(fold/gpu_output.py: the accumulators, read out as rows or an archive). Each engine
composes the fold's plan (fold/plan.py: FFT length, overlap, chirps, the reference
folder) and recomputes none of it.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any, NamedTuple, Self

import numpy as np

from voltstream.device import gpu_available
from voltstream.dsp.cuda import cupy_module
from voltstream.dsp.packed import PackedLayout
from voltstream.errors import ConfigError
from voltstream.fold.gpu_ingest import GpuIngest, ValidCarry, gpu_chunk_samples, output_valid
from voltstream.fold.gpu_output import FoldOutput, GpuOutput
from voltstream.fold.gpu_real import RealFront
from voltstream.fold.kernels import (
    ChirpTemplate,
    FoldTemplate,
    PackedUnpackTemplate,
    UnpackTemplate,
)
from voltstream.fold.plan import FoldPlan
from voltstream.fold.reference import FoldSettings
from voltstream.observation import Observation

__all__ = ["GpuFolder", "gpu_available", "output_valid"]

STAGES = ("h2d", "unpack", "fft", "chirp", "ifft", "fold")


class _FoldJob(NamedTuple):
    """What the fold of one chunk needs, fixed before its kernels are queued: its phase
    knots on the GPU, its first output sample, the outputs' validity, its slot."""

    knots_d: Any
    first: int
    out_valid: np.ndarray | None
    kslot: int


class _FolderBase(FoldOutput):
    """Shared bookkeeping: carry lengths, validity, sub-integration capacity, result."""

    @classmethod
    def from_settings(
        cls,
        obs: Observation,
        settings: FoldSettings,
        *,
        band_freqs_mhz: Any = None,
        f_ref_mhz: float | None = None,
        **kw: Any,
    ) -> Self:
        """The engine for ``settings`` (the drivers' one way to make it from settings): of
        the fold's plan (fold/plan.py; ``band_freqs_mhz`` and ``f_ref_mhz`` as there);
        ``kw`` are the engine's own options, and ``chunk_samples`` where a driver fixes it."""
        kw.setdefault("chunk_samples", settings.block_samples)
        plan = FoldPlan(obs, settings, band_freqs_mhz=band_freqs_mhz, f_ref_mhz=f_ref_mhz)
        return cls(plan, **kw)

    def __init__(self, plan: FoldPlan, chunk_samples: int | None = None) -> None:
        """``plan``: the fold, whose dedispersion and reference folder the engine
        composes; ``chunk_samples``: the most samples one chunk holds (None: about
        64 MB of 8-bit samples, fold/gpu_ingest.py)."""
        self.cp = cupy_module()
        s, obs = plan.settings, plan.obs
        self.obs, self.dm, self.predictor = obs, float(s.dm), s.predictor
        self.nbin, self.tsub_s, self.pol_mode, self.basis = (
            int(s.nbin),
            s.tsub_s,
            s.pol_mode,
            s.basis,
        )
        # The reference's folder, composed: its phase rule and delays are the GPU's.
        self.folder = plan.new_folder()
        self.npol_out = self.folder.npol_out
        self.plan = plan
        self.chunk = gpu_chunk_samples(plan, chunk_samples)
        self.max_blocks = plan.max_blocks(self.chunk)
        self.ncp = obs.nchan * obs.npol
        self.carry_len = 0
        self.samples_in = 0
        self.samples_out = 0
        self.lost = 0
        self.valid_carry = ValidCarry(self.plan.overlap)
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
        if getattr(self, "real", None) is not None:
            raise ConfigError("segments of real samples are not folded apart: fold one stream")
        self.out_base = int(in_start) - self.samples_out
        self.valid_carry = ValidCarry(self.plan.overlap)
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


class GpuFolder(GpuIngest, GpuOutput, _FolderBase):
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
        self.real: RealFront | None = None
        if packed is not None:
            if (packed.nchan, packed.npol) != (obs.nchan, obs.npol):
                raise ConfigError(
                    f"packed layout has {packed.nchan} x {packed.npol} channels x pols, the "
                    f"observation {obs.nchan} x {obs.npol}"
                )
            if packed.ndim == 1:
                # Real samples: converted to complex (float32) on the GPU first; the
                # chunk counts real inputs, the fold's frames complex outputs.
                if obs.ndim != 2:
                    raise ConfigError("a GPU fold of real samples is built with the complex "
                                      "observation (dsp.real.complex_observation)")  # fmt: skip
                self.real = RealFront(cp, packed, self.chunk)
                self.max_blocks = p.max_blocks(self.real.max_out)
                dtype, ndim = np.float32, 2
            else:
                dtype, ndim = np.uint8, packed.ndim
                self.unpack_packed = PackedUnpackTemplate(packed).instantiate(
                    p.nfft, p.step, p.nfft
                )
                # Decoded carries (ncp, nfft): chunks need not start on a byte boundary.
                self.carry_f = [cp.zeros(self.ncp * p.nfft, dtype=np.complex64) for _ in range(2)]
            self.pin_inmask = [self._pinned((self.chunk,), np.uint8) for _ in range(2)]
            self.dev_inmask = [cp.empty(self.chunk, dtype=np.uint8) for _ in range(2)]
            self.inmask: list[Any] = [None, None]
        self.dtype, self.ndim = np.dtype(dtype), int(ndim)
        if packed is None or self.real is not None:
            self.unpack = UnpackTemplate(self.dtype, self.ndim).instantiate(
                self.ncp, p.nfft, p.step
            )
        self.chirp_op = ChirpTemplate().instantiate(obs.nchan, obs.npol, p.nfft)
        self.fold_t = FoldTemplate(obs.npol, self.pol_mode, self.basis)
        self.fold_op = self.fold_t.instantiate(obs.nchan, self.nbin, p.nfft, p.head, p.step)
        self.chirp = cp.asarray((p.dedisperser.response / p.nfft).astype(np.complex64))
        self.delay = cp.asarray(self.folder.delay_s)
        # Flat: the first ncp * nblock * nfft bins of it are the (ncp, nblock, nfft)
        # frames of the current chunk, contiguous whatever nblock is.
        self.frames = cp.empty(self.ncp * self.max_blocks * p.nfft, dtype=np.complex64)
        per_sample = self.ncp * self.ndim
        raw_len = self.chunk * per_sample if packed is None else packed.nbytes(self.chunk)
        # A source's block may be bigger than its samples' bytes (a capture chunk
        # with its head cut, a file block with headers): feed_block copies it whole.
        raw_len = max(raw_len, int(raw_bytes or 0))
        raw_dtype = self.dtype if packed is None else np.uint8
        self.dev_raw = [cp.empty(raw_len, dtype=raw_dtype) for _ in range(2)]
        carry_len = p.nfft * per_sample if packed is None or self.real is not None else 1
        self.carry = [cp.empty(carry_len, dtype=self.dtype) for _ in range(2)]
        self.cur = 0
        self.nknot_max = self.fold_t.nknot(self.max_blocks * p.step)
        self.pin_raw: list[Any] = [None, None]
        self.pin_knots = [self._pinned((obs.nchan * self.nknot_max,), np.float64) for _ in range(2)]
        self.pin_valid = [self._pinned((self.max_blocks * p.step,), np.uint8) for _ in range(2)]
        self.dev_knots = [cp.empty(obs.nchan * self.nknot_max) for _ in range(2)]
        self.dev_valid = [cp.empty(self.max_blocks * p.step, dtype=np.uint8) for _ in range(2)]
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

    def warm_up(self, n: int, duration_s: float | None = None) -> None:
        """Makes now what the first chunks of ``n`` samples would make while data
        waits: the FFT plans of every frame count they can have, and accumulators for
        ``duration_s`` seconds of sub-integrations (a live run must not stall on them)."""
        p = self.plan
        sizes = {n}
        if self.real is not None:  # n real inputs: the complex outputs they make
            taps = self.real.carry.taps
            sizes = {max(0, (c + n - taps + 2) // 2) for c in (0, taps - 2, taps - 1)}
        # After the first chunk the carry holds overlap .. overlap + step - 1 samples.
        for m in sizes:
            for c in (0, p.overlap, p.overlap + p.step - 1):
                if nb := p.blocks(c, m):
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
        real, n, valid = self._real_step(n, valid)
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
        real_valid = self._end_copies(kslot, real)
        cs = self.compute_stream
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
        if real is not None and self.real is not None:
            mask = self.inmask[slot] if slot is not None else None
            t0 = self._mark(cs)
            raw = self.real.convert(raw, mask, real, real_valid, cs)
            self._stage("unpack", t0, cs)  # the real unpack: part of the unpack
        elif self.packed is not None:
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

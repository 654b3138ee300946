"""The search filterbank on one GPU (CuPy): the plan's filterbank, equal to
``FilterbankReference`` to float32 precision, fed host blocks or capture chunks.

Per chunk (the fold's ingest, fold/gpu_ingest.py: a copy stream and a compute stream,
two slots, lost samples zeroed by the unpack from a mask):

1. unpack into frames (chan, pol, block, nfft) complex64 with the fold's kernels:
   packed bytes straight from a capture chunk (``unpack_packed.cu``), or host complex
   samples (``unpack.cu``; real-sampled chunks are converted to complex first, as the
   fold does, fold/gpu_real.py). Without dedispersion the chunk is one frame of its own
   length: nothing is carried, every sample goes on at once;
2. with ``dm``: the overlap-save of the fold's engine: cuFFT, the plan's chirps
   (``fine_channel_chirps``, times the inverse FFT's 1/nfft; ``chirp.cu``), inverse
   cuFFT; the frames' valid middles are the filtered samples;
3. ``gather_stream`` (filterbank.cu): the filtered samples carried from the last chunk
   (less than one output sample) and the new ones, whole output samples contiguous
   per (chan, pol), the rest carried on;
4. batched M-point cuFFT in place (none for M = 1);
5. ``detect_integrate``: detection, fftshift, the 1/M of the orthonormal FFT and the
   sum of ``nint`` spectra, written time-major (k, npol_out, nchan * M);
6. the output samples copied to the host (page-locked, asynchronously), taken one
   chunk later: a chunk's work overlaps the next one's copy.

Which outputs are lost, and the counters, are the host's (search/gpu_steps.py): the
reference's rules, so the report is the CPU's. ``feed(block, valid)`` returns the
samples finished so far (the chunk before this one's), ``finish()`` the rest;
``on_output`` instead hands every finished batch to a callback (the live path, where
``feed_block`` must return at once). CuPy is imported lazily: this module imports
without it.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from voltstream.dsp.cuda import cupy_module
from voltstream.dsp.packed import PackedLayout
from voltstream.errors import ConfigError
from voltstream.fold.gpu_ingest import GpuIngest
from voltstream.fold.gpu_real import RealFront
from voltstream.fold.kernels import ChirpTemplate, PackedUnpackTemplate, UnpackTemplate
from voltstream.search.filterbank import FilterbankPlan
from voltstream.search.gpu_steps import ChunkStep, FilterbankSteps
from voltstream.search.kernels import FilterbankTemplate

__all__ = ["GpuFilterbank"]

#: Input samples per chunk by default: a file block's (search/filterbank.py), at least 64 Ki.
MIN_CHUNK = 1 << 16


class GpuFilterbank(GpuIngest):
    """``plan``'s filterbank on the GPU; see the module docstring.

    ``packed``: the chunks' layout when fed packed bytes (``feed_block``, ``feed_gap``:
    a capture's chunks); None: host complex blocks (``feed``). ``chunk_samples``: the
    most input samples one chunk holds; ``raw_bytes``: a chunk's bytes where they
    exceed its samples' (a capture chunk with its head cut)."""

    def __init__(
        self,
        plan: FilterbankPlan,
        packed: PackedLayout | None = None,
        chunk_samples: int | None = None,
        raw_bytes: int | None = None,
        on_output: Any = None,
    ) -> None:
        cp = self.cp = cupy_module()
        obs = self.obs = plan.obs
        self.plan, self.on_output = plan, on_output
        self.steps = FilterbankSteps(plan)
        self.chunk = int(chunk_samples or max(plan.block_samples(), MIN_CHUNK))
        self.ncp = obs.nchan * obs.npol
        self.packed, self.real = packed, None
        self.fine, self.span, self.npol_out = plan.fine, plan.span, plan.npol_out
        ncomplex = self.chunk  # complex samples one chunk makes
        if packed is not None:
            if (packed.nchan, packed.npol) != (obs.nchan, obs.npol):
                raise ConfigError(f"packed layout has {packed.nchan} x {packed.npol} channels x "
                                  f"pols, the observation {obs.nchan} x {obs.npol}")  # fmt: skip
            if packed.ndim == 1:  # real samples: to complex on the GPU first, as the fold
                if obs.ndim != 2:
                    raise ConfigError("a GPU filterbank of real samples is built with the complex "
                                      "observation (dsp.real.complex_observation)")  # fmt: skip
                self.real = RealFront(cp, packed, self.chunk)
                ncomplex = max(1, self.real.max_out)
            self.pin_inmask = [self._pinned((self.chunk,), np.uint8) for _ in range(2)]
            self.dev_inmask = [cp.empty(self.chunk, dtype=np.uint8) for _ in range(2)]
            self.inmask: list[Any] = [None, None]
        # Host blocks and converted real chunks are float32 complex, time-major.
        self.host_path = packed is None or self.real is not None
        self.dtype, self.ndim = np.dtype(np.float32), 2
        if packed is not None and self.real is None:  # packed complex bytes as they lie
            self.dtype, self.ndim = np.dtype(np.uint8), packed.ndim
        raw_len = self.chunk * self.ncp * 2 if packed is None else packed.nbytes(self.chunk)
        raw_dtype = np.float32 if packed is None else np.uint8
        raw_len = max(raw_len, int(raw_bytes or 0))
        self.dev_raw = [cp.empty(raw_len, dtype=raw_dtype) for _ in range(2)]
        self.pin_raw: list[Any] = [None, None]
        self._frames_for(ncomplex)
        self._outputs_for(ncomplex)
        fb = FilterbankTemplate(obs.npol, plan.mode)
        self.gather = fb.gather(self.ncp, self.span)
        self.detect = fb.detect(obs.nchan, self.fine, plan.nint)
        self.copy_stream = cp.cuda.Stream(non_blocking=True)
        self.compute_stream = cp.cuda.Stream(non_blocking=True)
        self.copied = [cp.cuda.Event(disable_timing=True) for _ in range(2)]
        self.consumed: list[Any] = [None, None]
        self.consumed_ev = [cp.cuda.Event(disable_timing=True) for _ in range(2)]
        self._copy_done = [cp.cuda.Event(disable_timing=True) for _ in range(64)]
        self.slot = 0
        self.host_wait_s = self.host_busy_s = 0.0
        self.blocks_fed = 0
        self._ops: dict[int, Any] = {}  # unpack ops by frame length (no dm: the chunk's)
        self._plans: dict[tuple[int, int], Any] = {}  # cuFFT plans by (length, batch)
        self._pending: deque = deque()  # (event, host rows, valid) copied or in flight
        self._taken: list[tuple[np.ndarray, np.ndarray]] = []
        self._busy: deque = deque()
        self._busy_ms = 0.0
        self.samples_written = 0  # output samples handed out

    # -- buffers

    def _frames_for(self, ncomplex: int) -> None:
        """Frames, the dedispersion's operations and carries, for chunks of ``ncomplex``."""
        cp, st, plan = self.cp, self.steps, self.plan
        self.max_src = st.max_src(ncomplex)
        if st.dm:
            nblock_max = st.blocks(st.nfft - 1, ncomplex) + 1
            self.frames = cp.empty(self.ncp * nblock_max * st.nfft, dtype=np.complex64)
            assert plan.ols is not None
            response = plan.ols[0]
            self.chirp = cp.asarray((response / st.nfft).astype(np.complex64))
            self.chirp_op = ChirpTemplate().instantiate(self.obs.nchan, self.obs.npol, st.nfft)
            self.unpack: Any  # the fold's UnpackOp or PackedUnpackOp
            if self.host_path:  # the fold's raw carry: time-major float32 complex
                self.unpack = UnpackTemplate(np.float32, 2).instantiate(self.ncp, st.nfft,
                                                                        st.step_len)  # fmt: skip
                self.carry = [cp.empty(st.nfft * self.ncp * 2, np.float32) for _ in range(2)]
            else:  # the fold's decoded carry (chan, pol, nfft)
                assert self.packed is not None
                self.unpack = PackedUnpackTemplate(self.packed).instantiate(
                    st.nfft, st.step_len, st.nfft
                )
                self.carry = [cp.zeros(self.ncp * st.nfft, np.complex64) for _ in range(2)]
        else:
            self.frames = cp.empty(self.ncp * max(1, ncomplex), dtype=np.complex64)
            # Never read (nothing is carried): each unpack wants a carry of its type.
            if self.host_path:
                self.unpack_t: Any = UnpackTemplate(np.float32, 2)
                self.carry = [cp.zeros(2 * self.ncp, np.float32)]
            else:
                assert self.packed is not None
                self.unpack_t = PackedUnpackTemplate(self.packed)
                self.carry = [cp.zeros(self.ncp, np.complex64)]
        self.carry_len = 0  # overlap-save inputs carried (dm)
        self.cur = 0

    def _outputs_for(self, ncomplex: int) -> None:
        """The output samples' buffers: the gathered stream, its carry, the rows."""
        cp, span = self.cp, self.span
        self.max_k = (span - 1 + self.max_src) // span
        self.stream_buf = cp.empty(self.ncp * max(1, self.max_k * span), dtype=np.complex64)
        self.carry_b = [cp.zeros(self.ncp * span, dtype=np.complex64) for _ in range(2)]
        self.cur_b = 0
        row = self.npol_out * self.plan.nchan_out
        self.rows_dev = cp.empty(max(1, self.max_k) * row, dtype=np.float32)
        self.rows_pin = [self._pinned((max(1, self.max_k) * row,), np.float32) for _ in range(2)]
        self.rows_done = [cp.cuda.Event(disable_timing=True) for _ in range(2)]
        self.rows_par = 0

    def _fft(self, n: int, batch: int) -> Any:
        plan = self._plans.get((n, batch))
        if plan is None:
            from cupy.cuda import cufft

            plan = self._plans[n, batch] = cufft.Plan1d(n, cufft.CUFFT_C2C, batch)
        return plan

    def _unpack_op(self, n: int) -> Any:
        """Without dm: the unpack that frames a chunk of ``n`` samples as one frame."""
        op = self._ops.get(n)
        if op is None:
            t = self.unpack_t
            op = self._ops[n] = (t.instantiate(self.ncp, n, n) if self.host_path
                                 else t.instantiate(n, n, 1))  # fmt: skip
        return op

    def warm_up(self, n: int) -> None:
        """Makes now what chunks of ``n`` inputs need (FFT plans, unpack ops), before a
        live capture's first chunk waits on it."""
        st = self.steps
        if self.real is not None:
            n = (n + 1) // 2
        if st.dm:
            nsrcs = {
                st.blocks(c, n) * st.step_len for c in (0, st.overlap, st.overlap + st.step_len - 1)
            }
            for nsrc in nsrcs:
                if nsrc:
                    self._fft(st.nfft, self.ncp * (nsrc // st.step_len))
        else:
            nsrcs = {n}
            self._unpack_op(n)
        if self.fine > 1:
            for nsrc in nsrcs:
                for k in {nsrc // self.span, (nsrc + self.span - 1) // self.span}:
                    if k:
                        self._fft(self.fine, self.ncp * k * self.plan.nint)
        self.synchronize()

    # -- GpuIngest's hooks

    def _mark(self, stream: Any) -> None:
        return None

    def _stage(self, name: Any, start: Any, stream: Any) -> None:
        return None

    # -- feeding

    # The engines' feed (FilterbankReference's): it returns the samples made, where the
    # fold's ingest returns nothing (its sums stay on the GPU).
    def feed(  # type: ignore[override]
        self, block: np.ndarray, valid: np.ndarray | None = None, pinned: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """``block`` (n, nchan, npol) complex, ``valid`` (n,) bool or None, in chunks; returns
        the output samples finished so far (float32 (k, npol_out, nchan_out), valid (k,))."""
        if self.packed is not None:
            raise ConfigError("an engine of packed chunks is fed with feed_block")
        x = np.asarray(block)
        if x.dtype != np.complex64:
            x = x.astype(np.complex64)
        for a in range(0, x.shape[0], self.chunk):
            v = None if valid is None else np.asarray(valid, dtype=bool)[a : a + self.chunk]
            GpuIngest.feed(self, x[a : a + self.chunk], v)
        return self.take()

    def _process(self, slot: int, n: int, valid: np.ndarray | None, raw: Any = None) -> None:
        real, n, valid = self._real_step(n, valid)
        step = self.steps.step(n, valid)
        kslot = self.slot
        self.copied[kslot].synchronize()
        real_valid = self._end_copies(kslot, real)
        cs = self.compute_stream
        pair = (self.cp.cuda.Event(), self.cp.cuda.Event())
        pair[0].record(cs)
        if raw is None:
            raw = self.dev_raw[slot]
        mask = self.inmask[slot] if self.packed is not None else None
        with cs:
            if real is not None and self.real is not None:
                raw = self.real.convert(raw, mask, real, real_valid, cs)
            frames = self._filter(raw, mask, step)
            ev = self.consumed_ev[kslot]  # the slot's raw bytes and mask are read
            ev.record(cs)
            self.consumed[kslot] = ev
            self._outputs(frames, step)
        pair[1].record(cs)
        self._busy.append(pair)
        self.slot = 1 - self.slot
        self._collect(keep=1)

    def _filter(self, raw: Any, mask: Any, step: ChunkStep) -> Any:
        """Steps 1-2 (compute stream current): the chunk's frames, or None for a gap."""
        st, n = self.steps, step.n
        if not st.dm:
            if step.gap or n == 0:
                return None
            frames = self.frames[: self.ncp * n]
            if self.host_path:
                self._unpack_op(n)(raw[: n * self.ncp * 2], self.carry[0], 0, frames, 1)
            else:
                self._unpack_op(n)(raw, n, self.carry[0], 0, mask, frames, 1)
            return frames
        nblock, nfft = step.nblock, st.nfft
        frames = self.frames[: self.ncp * nblock * nfft]
        carry, nxt = self.carry[self.cur], self.carry[1 - self.cur]
        cut = nblock * st.step_len
        if self.host_path:
            per = self.ncp * 2
            raw = raw[: n * per]
            if nblock:
                self.unpack(raw, carry, self.carry_len, frames, nblock)
            if cut >= self.carry_len:  # the fold's raw carry (fold/gpu.py)
                a = (cut - self.carry_len) * per
                new_len = n - (cut - self.carry_len)
                nxt[: new_len * per] = raw[a:]
            else:
                keep = self.carry_len - cut
                nxt[: keep * per] = carry[cut * per : self.carry_len * per]
                nxt[keep * per : (keep + n) * per] = raw
                new_len = keep + n
        else:
            if nblock:
                self.unpack(raw, n, carry, self.carry_len, mask, frames, nblock)
            new_len = self.carry_len + n - cut
            self.unpack.carry_tail(raw, n, carry, self.carry_len, mask, nxt, cut, new_len)
        self.carry_len, self.cur = new_len, 1 - self.cur
        if nblock:
            plan = self._fft(nfft, self.ncp * nblock)
            f2 = frames.reshape(self.ncp * nblock, nfft)
            plan.fft(f2, f2, -1)
            self.chirp_op(frames, self.chirp, nblock)
            plan.fft(f2, f2, 1)
        return frames

    def _outputs(self, frames: Any, step: ChunkStep) -> None:
        """Steps 3-6 (compute stream current): whole output samples, to the host."""
        st, k = self.steps, step.k
        nout = step.nout
        out = self.stream_buf[: self.ncp * nout]
        carry, nxt = self.carry_b[self.cur_b], self.carry_b[1 - self.cur_b]
        if st.dm:
            nfft, head, slen = st.nfft, st.head, st.step_len
        else:
            nfft, head, slen = max(step.n, 1), 0, max(step.n, 1)
        self.gather(frames, nfft, head, slen, step.nblock, step.nsrc, carry, step.carry_len,
                    nxt, out, nout)  # fmt: skip
        self.cur_b = 1 - self.cur_b
        if not k:
            return
        if self.fine > 1:
            spec = out.reshape(self.ncp * k * self.plan.nint, self.fine)
            self._fft(self.fine, spec.shape[0]).fft(spec, spec, -1)
        row = self.npol_out * self.plan.nchan_out
        rows = self.rows_dev[: k * row]
        self.detect(out, k, rows)
        par = self.rows_par
        self.rows_par = 1 - par
        host = self.rows_pin[par][: k * row]
        rows.data.copy_to_host_async(host.ctypes.data, host.nbytes, self.compute_stream)
        self.rows_done[par].record(self.compute_stream)
        self._pending.append((self.rows_done[par], host, k, step.out_valid))

    # -- output

    def _collect(self, keep: int = 0) -> None:
        """Takes the finished rows of all but the ``keep`` newest chunks (waiting for them)."""
        while len(self._pending) > keep:
            ev, host, k, ok = self._pending.popleft()
            ev.synchronize()
            rows = host.reshape(k, self.npol_out, self.plan.nchan_out).copy()
            self.samples_written += k
            if self.on_output is not None:
                self.on_output(rows, ok)
            else:
                self._taken.append((rows, ok))
        while self._busy and self._busy[0][1].done:
            a, b = self._busy.popleft()
            self._busy_ms += self.cp.cuda.get_elapsed_time(a, b)

    def take(self) -> tuple[np.ndarray, np.ndarray]:
        """The output samples finished and not yet taken (with ``on_output``: none)."""
        got, self._taken = self._taken, []
        if not got:
            shape = (0, self.npol_out, self.plan.nchan_out)
            return np.zeros(shape, np.float32), np.zeros(0, bool)
        return np.concatenate([x for x, _ in got]), np.concatenate([v for _, v in got])

    def synchronize(self) -> None:
        """Waits for every chunk fed and takes its rows (to ``on_output`` or ``take``)."""
        self.compute_stream.synchronize()
        self.copy_stream.synchronize()
        self._collect(keep=0)

    def finish(self) -> tuple[np.ndarray, np.ndarray]:
        """The output samples not yet returned; the engine may be fed on after it."""
        self.synchronize()
        return self.take()

    def busy_ms(self) -> float:
        """GPU milliseconds spent on chunks whose work has finished so far."""
        self._collect(keep=len(self._pending))
        return self._busy_ms

    # -- the reference's counters (FilterbankReference's names)

    @property
    def samples_in(self) -> int:
        return self.steps.samples_in

    @property
    def lost_in(self) -> int:
        return self.steps.lost_in

    @property
    def samples_out(self) -> int:
        return self.steps.samples_out

    @property
    def lost_out(self) -> int:
        return self.steps.lost_out

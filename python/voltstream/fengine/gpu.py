"""The F-engine on the GPU: the same heaps as ``FEngineReference``, from packed samples.

Per call, for every heap time slot the input now completes (docs/fengine.md):

1. the host works out each spectrum's window start (coarse delay), residual delay
   and phase, and which spectra are flagged (lost samples, delay out of range,
   history already dropped), exactly as the reference does;
2. ``pfb_fir`` (fengine.cu) reads the *packed* 8/10/12/16-bit samples straight from
   the device copy of the input and writes the FIR output in float32;
3. cuFFT (through CuPy, plans cached) turns each row into ``nchan + 1`` bins;
4. ``postprocess`` (fengine.cu) applies fine delay, phase, gain and dither,
   quantises, counts clipped values and transposes into the heap layout, for
   the slots that will be sent only.

Three CUDA streams overlap the work of consecutive calls: host-to-device copies,
compute, device-to-host copies (``process_packed_async``). The device keeps the
packed history (``taps * 2 * nchan + max_delay_samples`` samples) between calls, so
the input is copied to the GPU once. Lost samples are kept as intervals on the host,
so an all-valid stream costs the GPU nothing for them.

The engine is split by job, as the GPU fold is: ingest (fengine/gpu_ingest.py: blocks
into the device buffers, step 2's input), the chain of operations (here: the host plan,
the parameters' upload and steps 2-4's kernels), and output (fengine/gpu_output.py: the
copy out, heaps or packets). The naive CuPy baseline the benchmark times is
fengine/gpu_naive.py (``naive_channelize``, re-exported here).

CuPy is imported inside functions only: this module imports without a GPU.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from voltstream.dsp.cuda import GpuError, cupy_module
from voltstream.dsp.quantize import splitmix64
from voltstream.errors import ConfigError
from voltstream.fengine.gpu_ingest import GpuIngest, row_bytes
from voltstream.fengine.gpu_naive import naive_channelize
from voltstream.fengine.gpu_output import GpuOutput, Pending
from voltstream.fengine.kernels import FEngineTemplate
from voltstream.fengine.packets import PacketFormat, PacketPool, release_batches
from voltstream.fengine.plan import NPOL
from voltstream.fengine.reference import FEngineCounters, FEngineState
from voltstream.fengine.slots import SlotPlanner

__all__ = ["GpuFEngine", "naive_channelize"]


class GpuFEngine(GpuIngest, GpuOutput, FEngineState):
    """The F-engine on the GPU: the run-time state of every F-engine (``FEngineState``),
    the plan it is given or makes as the reference does (``plan``, an
    ``FEnginePlan``), its host time line (``slots``, a ``SlotPlanner``) and kernels;
    the same heaps as ``FEngineReference``, which the GPU tests hold it to.

    ``sample_bits`` is the width of the digitiser samples (8, 10, 12, 16) as they are
    given to ``process_packed``; ``process`` takes integer samples and packs them.
    For 10- and 12-bit input, blocks and gaps must be whole multiples of 8 samples
    (a byte boundary); digitiser heaps of 4096 samples are.
    """

    #: Calls in flight on the async path: the copy in of one call, the kernels of the
    #: one before and the copy out of the one before that all overlap.
    ASYNC_DEPTH = 3

    def __init__(self, *args: Any, sample_bits: int = 16, **settings: Any) -> None:
        super().__init__(*args, **settings)
        cp = cupy_module()
        try:
            cp.cuda.runtime.getDeviceCount()
        except Exception as exc:  # CUDARuntimeError without a driver or device
            raise GpuError(f"no usable CUDA device: {exc}") from exc
        self.sample_bits = int(sample_bits)
        self.kernels = FEngineTemplate(
            self.sample_bits, self.plan.taps, self.layout.bits
        ).instantiate(self.nchan)
        self._w = cp.asarray(self.plan.weights, dtype=cp.float32)
        # The kernel's dither hash starts from splitmix64(seed): once, not per call.
        self._dither_key = None
        if self.dither_seed is not None:
            self._dither_key = int(splitmix64(np.array(int(self.dither_seed), np.uint64)))
        # copy in, compute, copy out, parameters
        self._streams = [cp.cuda.Stream(non_blocking=True) for _ in range(4)]
        # CuPy objects are typed Any: CuPy ships no type information.
        self._raw: Any = None  # device (2, bytes): packed samples from self._base to slots.end
        self._base = 0
        self.slots = SlotPlanner(self.plan)
        self._pending: list[Pending] = []
        self._pinned_ring: list[tuple[np.ndarray, np.ndarray]] = []  # ASYNC_DEPTH + 1 deep
        self._pinned_next = 0
        # Three device input buffers, each free again once the next call took its history.
        self._bufs: list[Any] = [None, None, None]
        self._buf_free: list[Any] = [None, None, None]
        self._buf_next = 0
        # Pinned parameter buffers, reused once the call that filled them is collected.
        self._param_ring = [np.zeros(0, np.uint8) for _ in range(self.ASYNC_DEPTH + 2)]
        self._param_next = 0
        self.last_copy: Any = None  # event of the last host-to-device copy of an input block
        # Packet mode (``emit_packets``): heaps come back as PacketBatches.
        self.packet_format: PacketFormat | None = None
        self.packet_pool: PacketPool | None = None
        # Where the time goes (the live status line and the report): kernels on the
        # GPU, the host's own work per call, the host waiting for earlier calls.
        self.timing = {"gpu_busy_s": 0.0, "host_s": 0.0, "host_wait_s": 0.0, "calls": 0}

    def warm_up(self, block_samples: int, blocks: int = 4) -> None:
        """Runs ``blocks`` blocks of zeros of ``block_samples`` through the engine and
        forgets them: kernels built, FFT plans and device and pinned buffers made
        before live data waits on them (a 32768-channel engine's first call takes
        long enough for the capture pool to overflow at 20 Gb/s). Gains, delays and
        the packet format stay; counters and the time line start afresh."""
        cp = cupy_module()
        nbytes = self._bytes(int(block_samples))
        zeros = np.frombuffer(cp.cuda.alloc_pinned_memory(2 * nbytes), np.uint8, 2 * nbytes)
        zeros = zeros.reshape(NPOL, nbytes)
        zeros[:] = 0
        # Start half a block past a heap slot so calls complete as many slots as live
        # blocks may (their alignment to slots varies).
        sph = self.layout.samples_per_heap
        t = (self.plan.max_delay_samples // sph + 2) * sph
        t += int(block_samples) // 16 * 8
        for k in range(int(blocks)):
            release_batches(self.process_packed_async(zeros, t + k * int(block_samples)))
        release_batches(self.flush(copy=False))
        # This engine's own streams, not the device: other antennas' engines may be
        # running on the same GPU (fengine/antennas.py), and their work is not ours.
        for s in (*self._streams, cp.cuda.Stream.null):
            s.synchronize()
        self.restart()
        self.counters = FEngineCounters()
        self.timing = dict.fromkeys(self.timing, 0.0) | {"calls": 0}

    def restart(self) -> None:
        """Starts a new time line (a digitiser re-sync, or a gap too long to fill):
        the next block may have any timestamp. Device buffers, FFT plans, pinned
        pools, gains, delays and counters stay. Collect what is pending first
        (``flush``): heaps still in flight are forgotten."""
        for p in self._pending:  # their packet buffers go back to the pool
            p.done.synchronize()
            if p.give_back is not None:
                p.give_back()
        self._pending.clear()
        self._raw, self._base = None, 0
        self.slots.reset()
        self.last_copy = None

    # --- one call

    def _submit(
        self, raw: Any, n: int, timestamp: int, valid: npt.ArrayLike | None, step: int = 1
    ) -> None:
        cp = cupy_module()
        if step < 1 or n % step:
            raise ConfigError(f"valid_step={step} does not divide the block's {n} samples")
        ok = self._valid_mask(valid, n // step)
        gap = self.slots.gap_before(timestamp)
        if self.sample_bits not in (8, 16) and (gap % 8 or n % 8):
            raise ConfigError(
                f"{self.sample_bits}-bit input must come in whole bytes: blocks and gaps must be "
                f"multiples of 8 samples (got {n} samples after a gap of {gap})"
            )
        if self.slots.fresh:
            self._base = timestamp
        old_end = timestamp - gap
        self.slots.add(timestamp, n, ok, step)
        # The small parameter copy goes ahead of the block's big copy in: behind
        # it, the kernels of this call would wait for the whole block to land.
        prepared = self._prepare_slots()
        self._append(cp, raw, old_end, gap, n)
        if prepared is not None:
            self._launch_slots(cp, *prepared)
        self._trim()

    def _prepare_slots(self) -> tuple[list[int], list[Any]] | None:
        """Plans the slots the input now completes, counts them, uploads their parameters.

        Returns what ``_launch_slots`` needs, or None when no heap is to be computed.
        """
        planned = self.slots.plan_slots(self.delay_models)
        if planned is None:
            return None
        slots, starts, flagged = planned.slots, planned.starts, planned.flagged
        layout = self.layout
        nspec = layout.spectra_per_heap
        bad = flagged.any(axis=0).reshape(len(slots), nspec)  # per slot, per spectrum
        send = [i for i in range(len(slots)) if not bad[i].any()]
        nflag = int(bad.sum())
        self.counters.spectra += len(slots) * nspec
        self.counters.flagged_spectra += nflag
        self.counters.heaps_skipped += (len(slots) - len(send)) * layout.n_substreams
        self.counters.heaps_made += len(send) * layout.n_substreams
        if not send:
            return None
        avail = self.slots.end - self._base
        rel = np.clip(
            starts - self._base, 0, avail - self.plan.window_len
        )  # flagged ones only move
        sent = [slots[i] for i in send]
        params = self._upload(
            rel,
            self.kernels.rotation(
                planned.residual_s, planned.phase_rad, self.plan.sample_rate_hz / self.plan.step
            ),
            self.gains.astype(np.complex64),
            np.array(send, dtype=np.int32),
            np.array(sent, dtype=np.int64),
        )
        return sent, params

    def _launch_slots(self, cp: Any, sent: Any, params: Any) -> None:
        """Kernels for the planned slots, then their copy out (gpu_output.py)."""
        comp_s = self._streams[1]
        n, nspec, layout = self.plan.step, self.layout.spectra_per_heap, self.layout
        _, d_rel, d_rot, d_gains, d_send, d_sent = params
        total = d_rel.shape[1]
        payload_shape = (len(sent), self.nchan, nspec) + ((2, 2) if layout.bits == 8 else (2,))
        host = self._host_buffers(payload_shape)
        with comp_s:
            started = comp_s.record()
            fir = cp.empty((NPOL, total, n), dtype=cp.float32)
            self.kernels.fir(self._raw, d_rel, self._w, fir, comp_s)
            spec = cp.fft.rfft(fir, axis=-1)
            del fir
            out = cp.empty(payload_shape, dtype=cp.int8 if layout.bits == 8 else cp.uint8)
            sat = cp.zeros((len(sent), NPOL), dtype=cp.uint64)
            self.kernels.post(
                spec, d_rot, d_gains, d_send, d_sent, out, sat, self._dither_key, comp_s
            )
            computed = comp_s.record()
        self._copy_out(cp, out, sat, host, sent, tuple(params), (started, computed))

    def _upload(self, *arrays: Any) -> list[Any]:
        """Small per-call arrays to the GPU in one copy from pinned memory.

        On its own stream and from pinned memory, so the host never waits for it
        (a copy from pageable memory may wait for the copy engine to drain).
        """
        cp = cupy_module()
        param_s, comp_s = self._streams[3], self._streams[1]
        contiguous = [np.ascontiguousarray(a) for a in arrays]
        offsets, total = [], 0
        for a in contiguous:
            offsets.append(total)
            total += (a.nbytes + 255) // 256 * 256
        i = self._param_next
        self._param_next = (i + 1) % len(self._param_ring)
        host = self._param_ring[i]
        if host.nbytes < total:
            host = self._param_ring[i] = np.frombuffer(
                cp.cuda.alloc_pinned_memory(2 * total), dtype=np.uint8
            )
        for a, off in zip(contiguous, offsets, strict=True):
            host[off : off + a.nbytes] = a.reshape(-1).view(np.uint8)
        with param_s:
            dev = cp.empty(total, dtype=cp.uint8)
        dev.data.copy_from_host_async(host.ctypes.data, total, param_s)
        comp_s.wait_event(param_s.record())
        views = [
            dev[off : off + a.nbytes].view(a.dtype).reshape(a.shape)
            for a, off in zip(contiguous, offsets, strict=True)
        ]
        return [dev, *views]

    # --- for tests and benchmarks

    def channelize(self, samples: npt.ArrayLike) -> np.ndarray:
        """FIR + FFT of one pol pair with no delay: complex128 ``(2, nspec, nchan)``."""
        cp = cupy_module()
        x = np.asarray(samples)
        step = self.plan.step
        nspec = max(0, (x.shape[1] - self.plan.window_len) // step + 1)
        raw = self._pack(x)
        dev = cp.zeros((NPOL, row_bytes(raw.shape[1])), dtype=cp.uint8)
        dev[:, : raw.shape[1]] = cp.asarray(raw)
        starts = cp.asarray(np.tile(np.arange(nspec, dtype=np.int64) * step, (NPOL, 1)))
        fir = cp.full((NPOL, nspec, step), cp.nan, dtype=cp.float32)
        self.kernels.fir(dev, starts, self._w, fir)
        return cp.asnumpy(cp.fft.rfft(fir, axis=-1)[..., : self.nchan]).astype(np.complex128)

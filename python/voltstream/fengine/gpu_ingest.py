"""The GPU F-engine's ingest: blocks of digitiser samples into the engine's device buffers.

Step 1 of the chain in fengine/gpu.py: a block comes as integer samples (``process``:
packed here into ``sample_bits`` big-endian bytes) or already packed, from the host or
the GPU (``process_packed``; ``process_packed_async``, whose heaps come back calls
later). The device buffer of a call is the retained history, a zeroed gap of lost
samples and the new block (``_append``: a pitched copy straight from the caller's
host memory on the copy stream, into one of three engine-owned buffers); ``_trim``
drops the history no later slot needs. The block is then handed to ``_submit``
(fengine/gpu.py), which plans its slots and queues their kernels.

CuPy is imported inside functions only (through the ``cp`` the caller passes).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import numpy.typing as npt

from voltstream.digitiser import pack_samples
from voltstream.errors import ConfigError
from voltstream.fengine.heaps import OutputHeap
from voltstream.fengine.plan import NPOL
from voltstream.fengine.slots import SlotPlanner

__all__ = ["GpuIngest", "row_bytes"]


def row_bytes(nbytes: int) -> int:
    """Device row length for ``nbytes`` of packed samples: padded, a multiple of 16."""
    return (nbytes + 8 + 15) // 16 * 16


class GpuIngest:
    """The ingest methods of :class:`~voltstream.fengine.gpu.GpuFEngine` (a mixin): its
    ``__init__`` makes the buffers and streams named below."""

    # Made by GpuFEngine.__init__ (CuPy objects are Any: CuPy has no type information).
    sample_bits: int
    slots: SlotPlanner
    timing: dict[str, Any]
    last_copy: Any
    _streams: list[Any]
    _raw: Any
    _base: int
    _bufs: list[Any]
    _buf_free: list[Any]
    _buf_next: int
    _pending: list[Any]
    ASYNC_DEPTH: int
    # The operations and the output these hand the block to (gpu.py, gpu_output.py).
    _submit: Any
    _collect: Any
    flush: Any

    def process(
        self, samples: npt.ArrayLike, timestamp: int, valid: npt.ArrayLike | None = None
    ) -> list[OutputHeap]:
        """As ``FEngineReference.process``: integer samples ``(2, n)``; heaps now complete."""
        x = np.asarray(samples)
        if x.ndim != 2 or x.shape[0] != NPOL or np.iscomplexobj(x):
            raise ConfigError(f"samples of shape {x.shape}: give real (2 polarisations, n)")
        self._submit(self._pack(x), x.shape[1], int(timestamp), valid)
        return self.flush()

    def _pack(self, x: np.ndarray) -> np.ndarray:
        """Integer samples ``(2, n)`` -> packed ``sample_bits`` big-endian bytes ``(2, nbytes)``."""
        if x.dtype.kind == "f":
            if not np.all(np.isfinite(x)) or np.any(x != np.rint(x)):
                raise ConfigError("the GPU F-engine takes integer digitiser samples")
            x = x.astype(np.int64)
        bits = self.sample_bits
        lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        if x.size and (x.min() < lo or x.max() > hi):
            raise ConfigError(f"samples must lie in {lo}..{hi} for sample_bits={bits}")
        if bits == 8:
            raw = x.astype(np.int8).view(np.uint8)
        elif bits == 16:
            raw = x.astype(">i2").view(np.uint8)
        else:
            raw = np.stack([pack_samples(x[p], bits) for p in range(NPOL)])
        return np.ascontiguousarray(raw)

    def process_packed(
        self, raw: Any, timestamp: int, valid: npt.ArrayLike | None = None
    ) -> list[OutputHeap]:
        """Packed big-endian samples ``(2, nbytes)`` uint8 (host or device); heaps now complete."""
        self._submit(raw, self._samples_in(raw), int(timestamp), valid)
        return self.flush()

    def process_packed_async(
        self, raw: Any, timestamp: int, valid: npt.ArrayLike | None = None, valid_step: int = 1
    ) -> list:
        """Like ``process_packed`` but returns the heaps of an earlier call.

        The copy in, the kernels and the copy out of this call overlap with the
        caller's next steps; heaps come back ``ASYNC_DEPTH - 1`` calls later. ``raw``
        must stay unchanged until its heaps come back (pinned host memory makes the
        copy asynchronous). Payloads are views into pinned buffers that are reused
        by the next call: copy what you keep. Call ``flush`` at the end for the rest.
        ``valid_step``: ``valid`` has one flag per that many samples (a flag per heap:
        a partial chunk costs the host nothing per sample).
        """
        t0 = time.perf_counter()
        wait0 = self.timing["host_wait_s"]
        try:
            self._submit(raw, self._samples_in(raw), int(timestamp), valid, valid_step)
            if len(self._pending) < self.ASYNC_DEPTH:
                return []
            return self._collect(self._pending.pop(0), copy=False)
        finally:
            waited = self.timing["host_wait_s"] - wait0
            self.timing["host_s"] += time.perf_counter() - t0 - waited
            self.timing["calls"] += 1

    def _samples_in(self, raw: Any) -> int:
        if raw.ndim != 2 or raw.shape[0] != NPOL or raw.dtype != np.uint8:
            raise ConfigError(
                f"packed input must be uint8 (2 polarisations, nbytes), got {raw.dtype} {raw.shape}"
            )
        nbits = raw.shape[1] * 8
        if nbits % self.sample_bits:
            raise ConfigError(
                f"{raw.shape[1]} bytes are not a whole number of {self.sample_bits}-bit samples"
            )
        return nbits // self.sample_bits

    def _valid_mask(self, valid: npt.ArrayLike | None, n: int) -> np.ndarray | None:
        if valid is None:
            return None
        v = np.asarray(valid, dtype=bool)
        try:
            return np.array(np.broadcast_to(v, (NPOL, n)))
        except ValueError:
            raise ConfigError(
                f"valid mask of shape {v.shape} does not match {n} samples: give (n,) or (2, n)"
            ) from None

    def _bytes(self, samples: int) -> int:
        return samples * self.sample_bits // 8

    def _append(self, cp: Any, raw: npt.ArrayLike, old_end: int, gap: int, n: int) -> None:
        """Device buffer = retained history + zeroed gap + the new block (+ padding).

        Three engine-owned buffers in turn: the block is copied straight from the
        host into its place (a pitched copy on the copy stream), the history (at
        most ``window_len + max_delay_samples`` samples) is copied on the GPU from
        the previous buffer. A buffer is written again only after the call that
        used it has run its kernels and the next one has taken its history.
        """
        copy_s, comp_s = self._streams[:2]
        hist = self._bytes(old_end - self._base)
        new = self._bytes(gap + n)
        need = row_bytes(hist + new)
        i, prev = self._buf_next, (self._buf_next + 2) % 3
        self._buf_next = (i + 1) % 3
        buf = self._bufs[i]
        if buf is None or buf.shape[1] < need:
            if self._buf_free[i] is not None:
                self._buf_free[i].synchronize()
            with comp_s:
                # Room for the history to grow a little without reallocating.
                buf = self._bufs[i] = cp.empty((NPOL, row_bytes(need + (need >> 4))), cp.uint8)
        buf = buf[:, :need]
        with comp_s:
            if hist:
                buf[:, :hist] = self._raw[:, :hist]
            self._buf_free[prev] = comp_s.record()  # the previous buffer is done with
            buf[:, hist : hist + self._bytes(gap)] = 0
            buf[:, hist + new :] = 0
        col = hist + self._bytes(gap)
        if isinstance(raw, np.ndarray):
            if raw.strides[1] != 1:  # rows may be apart (a capture chunk's streams)
                raw = np.ascontiguousarray(raw)
            if self._buf_free[i] is not None:
                copy_s.wait_event(self._buf_free[i])
            cp.cuda.runtime.memcpy2DAsync(
                buf.data.ptr + col, buf.strides[0], raw.ctypes.data, raw.strides[0],
                raw.shape[1], NPOL, cp.cuda.runtime.memcpyHostToDevice, copy_s.ptr,
            )  # fmt: skip
            # The caller's host memory is free again once this completes.
            self.last_copy = copy_s.record()
            comp_s.wait_event(self.last_copy)
        else:
            with comp_s:
                buf[:, col : hist + new] = raw
        self._raw = buf

    def _trim(self) -> None:
        """Drops history no later slot needs, as the reference does (kept 8-aligned)."""
        self.slots.trim()
        new_base = self._base + (self.slots.start - self._base) // 8 * 8
        if new_base > self._base:
            self._raw = self._raw[:, self._bytes(new_base - self._base) :]
            self._base = new_base

"""The GPU fold engine's ingest: chunks of samples into the engine's device buffers.

Step 1 of the chain in fold/gpu.py: a chunk comes from the host (``feed``: raw samples,
staged through a page-locked buffer unless the caller's is one; ``feed_packed``: packed
2/4/8-bit bytes; ``feed_block``: runs of page-locked memory copied as they lie, a
capture chunk or a file block), from the GPU (``feed_device``), or is a gap of lost
samples (``feed_gap``). The copy is queued on the copy stream into one of two slots,
once the chunk that last used the slot has been folded; lost samples are zeroed or
masked as the reference does. Then the chunk is handed to ``_process`` (fold/gpu.py).

Also here, host side and without CuPy: the chunk size (:func:`gpu_chunk_samples`) and
the reference's lost-sample rule (:class:`ValidCarry`, :func:`output_valid`).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from voltstream.errors import ConfigError
from voltstream.fold.plan import FoldPlan

__all__ = ["GpuIngest", "ValidCarry", "gpu_chunk_samples", "lost_mask", "output_valid"]


def gpu_chunk_samples(plan: FoldPlan, chunk_samples: int | None) -> int:
    """The most samples one chunk of a GPU engine holds: ``chunk_samples``, or ~64 MB of
    8-bit raw data for 32 ch x 2 pol, a whole number of the plan's FFT steps."""
    if chunk_samples is None:
        chunk_samples = max(1, (1 << 19) // plan.step) * plan.step
    chunk = int(chunk_samples)
    if chunk < 1:
        raise ConfigError(f"chunk must hold at least one sample, got {chunk_samples}")
    return chunk


class ValidCarry:
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


def lost_mask(valid: np.ndarray | None, n: int) -> np.ndarray | None:
    """Boolean mask of lost samples, or None when every sample is valid."""
    if valid is None:
        return None
    lost = ~np.asarray(valid, dtype=bool).reshape(n)
    return lost if lost.any() else None


def output_valid(vbuf: np.ndarray, nout: int, overlap: int) -> np.ndarray:
    """Validity of ``nout`` outputs from the input validity ``vbuf`` (carry + block)."""
    bad = np.concatenate([[0], np.cumsum(~vbuf[: nout + overlap])])
    return (bad[overlap + 1 : overlap + 1 + nout] - bad[:nout]) == 0


class GpuIngest:
    """The ingest methods of :class:`~voltstream.fold.gpu.GpuFolder` (a mixin): its
    ``__init__`` makes the buffers, streams and events named below."""

    # Made by GpuFolder.__init__ (CuPy objects are Any: CuPy has no type information).
    cp: Any
    obs: Any
    chunk: int
    ncp: int
    ndim: int
    dtype: Any
    packed: Any
    real: Any  # fold/gpu_real.py RealFront, or None
    slot: int
    dev_raw: list[Any]
    pin_raw: list[Any]
    pin_inmask: list[Any]
    dev_inmask: list[Any]
    inmask: list[Any]
    copy_stream: Any
    compute_stream: Any
    copied: list[Any]
    consumed: list[Any]
    _copy_done: list[Any]
    host_wait_s: float
    host_busy_s: float
    blocks_fed: int
    # The operations these hand the chunk to (fold/gpu.py).
    _process: Any
    _mark: Any
    _stage: Any

    def _real_step(self, n: int, valid: np.ndarray | None) -> tuple[Any, int, Any]:
        """A chunk of ``n`` inputs of a real stream: its conversion step (fold/gpu_real.py
        RealStep), and the complex outputs' count and validity, which go on from here;
        (None, n, valid) for a complex stream."""
        if self.real is None:
            return None, n, valid
        real = self.real.carry.step(valid, n)
        return real, real.nout, real.out_valid

    def _end_copies(self, kslot: int, real: Any) -> Any:
        """Ends slot ``kslot``'s copies (with a real stream's step ``real``, its outputs'
        validity too) and has the compute stream wait for them; that validity on the GPU
        (None: all valid, or not a real stream)."""
        real_valid = None
        if real is not None:
            real_valid = self.real.upload_valid(kslot, real, self.copy_stream)
        self.copied[kslot].record(self.copy_stream)
        self.compute_stream.wait_event(self.copied[kslot])
        return real_valid

    def _pinned(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        import cupyx

        return cupyx.empty_pinned(shape, dtype=dtype)

    def _not_real(self, verb: str) -> None:
        if self.real is not None:
            raise ConfigError(
                f"{verb} takes samples the engine folds as they are; an engine of real "
                "samples takes packed chunks (feed_packed, feed_block)"
            )

    def _raw_view(self, block: np.ndarray) -> tuple[int, Any]:
        self._not_real("feed")
        n = block.shape[0]
        if n > self.chunk:
            raise ConfigError(f"chunk of {n} samples exceeds the engine's {self.chunk}")
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
        lost = lost_mask(valid, n)
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
            self.pin_raw[slot] = self._pinned((self.dev_raw[slot].size,), self.dev_raw[slot].dtype)
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
        self._not_real("feed_device")
        n = raw_dev.size // (self.ncp * self.ndim)
        if n > self.chunk:
            raise ConfigError(f"chunk of {n} samples exceeds the engine's {self.chunk}")
        lost = lost_mask(valid, n)
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
        if not 0 <= n <= self.chunk:
            raise ConfigError(f"chunk of {n} samples exceeds the engine's {self.chunk}")
        need = self.packed.nbytes(n)
        data = np.asarray(data).reshape(-1)
        if data.dtype != np.uint8 or data.size < need:
            raise ConfigError(f"{n} packed samples need {need} uint8 bytes, got {data.dtype} "
                              f"x {data.size}")  # fmt: skip
        slot = self.slot
        lost = lost_mask(valid, n)
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
        if not 0 <= n <= self.chunk:
            raise ConfigError(f"block of {n} samples exceeds the engine's {self.chunk}")
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
        lost = lost_mask(valid, n)
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
        for a in range(0, int(n), self.chunk):
            m = min(self.chunk, int(n) - a)
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

"""The straightforward CuPy F-engine: the benchmark's baseline (bench/fengine_gpu.py).

Whole-array CuPy steps, each reading and writing the whole array, where the engine
(fengine/gpu.py) fuses the unpack into the FIR and the rest into one post-process
kernel. ``voltstream.fengine.gpu`` re-exports it. CuPy is passed in: this module
imports without it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["naive_channelize"]


def naive_channelize(
    cp: Any,
    raw_dev: Any,
    bits: int,
    weights_dev: Any,
    nchan: int,
    gains_dev: Any,
    spectra_per_heap: int,
) -> Any:
    """The straightforward CuPy F-engine (benchmark baseline): whole-array CuPy steps.

    Unpack (bit arithmetic on the whole array), FIR as a sum of ``taps`` shifted
    products, ``cupy.fft.rfft``, gain, rounding and clipping, then the transpose to
    heap order; each step reads and writes the whole array. No delay or dither.
    ``raw_dev``: (2, nbytes) uint8; returns the 8-bit payloads of the whole heap
    slots it covers, int8 ``(nslots, nchan, spectra_per_heap, 2, 2)``.
    """
    n_samp = raw_dev.shape[1] * 8 // bits
    if bits == 8:
        x = raw_dev.view(cp.int8).astype(cp.float32)
    elif bits == 16:
        b = raw_dev.astype(cp.int32)
        x = (((b[:, 0::2] << 24) >> 16) | b[:, 1::2]).astype(cp.float32)
    else:
        bit = cp.arange(n_samp, dtype=cp.int64) * bits
        byte = bit >> 3
        b = raw_dev.astype(cp.uint32)
        pad = cp.concatenate([b, cp.zeros((2, 3), dtype=cp.uint32)], axis=1)
        word = (pad[:, byte] << 24) | (pad[:, byte + 1] << 16) | (pad[:, byte + 2] << 8)
        x = (((word << (bit & 7).astype(cp.uint32)).astype(cp.int32)) >> (32 - bits)).astype(
            cp.float32
        )
    step = 2 * nchan
    taps = weights_dev.size // step
    nspec = (n_samp - weights_dev.size) // step + 1
    rows = x[:, : (nspec + taps - 1) * step].reshape(2, nspec + taps - 1, step)
    w = weights_dev.reshape(taps, step)
    fir = rows[:, 0:nspec] * w[0]
    for j in range(1, taps):
        fir += rows[:, j : j + nspec] * w[j]
    spec = cp.fft.rfft(fir, axis=-1)[..., :nchan]
    spec = spec * gains_dev[:, None, :]
    re = cp.clip(cp.rint(spec.real), -127, 127).astype(cp.int8)
    im = cp.clip(cp.rint(spec.imag), -127, 127).astype(cp.int8)
    nslots = nspec // spectra_per_heap
    q = cp.stack([re, im], axis=-1)[:, : nslots * spectra_per_heap]  # (pol, spec, chan, 2)
    q = q.reshape(2, nslots, spectra_per_heap, nchan, 2)
    return cp.ascontiguousarray(q.transpose(1, 3, 2, 0, 4))

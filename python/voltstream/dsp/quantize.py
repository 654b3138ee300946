"""Gains, dither and quantisation to Gaussian integers: the NumPy float64 reference.

Conventions (the GPU F-engine matches these exactly; docs/fengine.md):

- Gains are complex, one per channel per polarisation: ``out[p, ..., k] = x[p, ..., k]
  * gains[p, k]``.
- Dither (optional) is uniform on ``[-0.5, 0.5)`` output steps, independent for the
  real and imaginary parts, added before rounding. It is passed as an array
  ``(..., 2)`` (re, im) so that a GPU run can be checked with the dither it drew, or
  drawn here from a seed with NumPy's PCG64 (``uniform_dither``). The F-engine draws
  it per heap time slot with ``slot_dither``: a counter-based hash (splitmix64) of
  (seed, slot, element), which the GPU kernel computes bit for bit, so the CPU and
  GPU engines give the same output for the same seed.
- Rounding is to the nearest integer, ties to even (``rint``; CUDA's ``__float2int_rn``
  and PTX ``cvt.rni`` do the same).
- Saturation is symmetric: 8-bit parts clip to -127..127 and 4-bit parts to -7..7,
  so -128 (-8) never occurs and negation stays exact. ``saturated`` counts complex
  values with at least one clipped part (the MeerKAT-style "clip count").
- 8-bit output is int8 ``(..., 2)``: real then imaginary.
- 4-bit output is one uint8 per complex value: the real part in the high nibble
  (bits 7..4), the imaginary part in the low nibble (bits 3..0), each 4-bit two's
  complement. ``(re=1, im=-2)`` is ``0x1E``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from voltstream.errors import ConfigError

__all__ = [
    "apply_gains",
    "pack4",
    "quantize",
    "quantize4",
    "quantize8",
    "slot_dither",
    "splitmix64",
    "uniform_dither",
    "unpack4",
]


def apply_gains(spectra: npt.ArrayLike, gains: npt.ArrayLike) -> np.ndarray:
    """``spectra (npol, ..., nchan) * gains (npol, nchan)``, complex128."""
    x = np.asarray(spectra)
    g = np.asarray(gains, dtype=np.complex128)
    if x.ndim < 2 or g.shape != (x.shape[0], x.shape[-1]):
        raise ConfigError(
            f"gains of shape {g.shape} do not match spectra of shape {x.shape}: give one "
            "complex gain per polarisation per channel, shape (npol, nchan)"
        )
    return x * g.reshape((g.shape[0],) + (1,) * (x.ndim - 2) + (g.shape[1],))


def uniform_dither(shape: tuple[int, ...], seed: Any) -> np.ndarray:
    """Uniform dither on [-0.5, 0.5), float64 ``(*shape, 2)``, from ``seed`` (PCG64)."""
    rng = np.random.default_rng(seed)
    return rng.random((*tuple(shape), 2)) - 0.5


def splitmix64(z: np.ndarray) -> np.ndarray:
    """Steele et al.'s SplitMix64 finaliser on uint64 (wrapping), as fengine.cu does it."""
    with np.errstate(over="ignore"):
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def slot_dither(seed: int, slot: int, shape: tuple[int, ...]) -> np.ndarray:
    """Uniform dither on [-0.5, 0.5) for one heap slot, float64 ``(*shape, 2)``.

    Element ``e`` (row-major index into ``(*shape, 2)``) gets ``u = (h >> 40) / 2**24
    - 0.5`` with ``h = splitmix64(splitmix64(splitmix64(seed) + slot) + e)`` in
    wrapping uint64 arithmetic: 24 random bits, exact in float32, independent of how
    the work is split, and the same on the GPU (``fengine.cu``).
    """
    if int(seed) < 0:
        raise ConfigError(f"dither seed {seed} must be a non-negative integer")
    key = splitmix64(
        splitmix64(np.array(int(seed), dtype=np.uint64)) + np.uint64(int(slot) & 0xFFFFFFFFFFFFFFFF)
    )
    n = int(np.prod(tuple(shape), dtype=np.int64)) * 2
    with np.errstate(over="ignore"):
        h = splitmix64(key + np.arange(n, dtype=np.uint64))
    u = (h >> np.uint64(40)).astype(np.float64) * 2.0**-24 - 0.5
    return u.reshape(*tuple(shape), 2)


def _parts(values: npt.ArrayLike, dither: npt.ArrayLike | None) -> np.ndarray:
    v = np.asarray(values)
    parts = np.stack([v.real, v.imag], axis=-1).astype(np.float64)
    if dither is None:
        return parts
    if isinstance(dither, (int, np.integer)):
        dither = uniform_dither(v.shape, int(dither))
    d = np.asarray(dither, dtype=np.float64)
    if d.shape != parts.shape:
        raise ConfigError(
            f"dither of shape {d.shape} does not match {parts.shape}: give (re, im) "
            "dither for every value, or a seed, or None"
        )
    return parts + d


def _quantize(values: np.ndarray, dither: np.ndarray | None, limit: int) -> tuple[np.ndarray, int]:
    rounded = np.rint(_parts(values, dither))
    if not np.all(np.isfinite(rounded)):
        raise ConfigError("values to quantise contain NaN or infinity: check gains and input")
    over = np.abs(rounded) > limit
    saturated = int(np.count_nonzero(np.any(over, axis=-1)))
    return np.clip(rounded, -limit, limit).astype(np.int8), saturated


def quantize8(values: np.ndarray, dither: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """Complex ``values`` -> (int8 ``(..., 2)`` re/im in -127..127, saturated count)."""
    return _quantize(values, dither, 127)


def quantize4(values: np.ndarray, dither: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """Complex ``values`` -> (uint8 ``(...)`` packed 4+4 bits in -7..7, saturated count)."""
    q, saturated = _quantize(values, dither, 7)
    return pack4(q), saturated


def quantize(
    values: np.ndarray, bits: int, dither: np.ndarray | None = None
) -> tuple[np.ndarray, int]:
    """``quantize8`` or ``quantize4`` by ``bits``."""
    if bits == 8:
        return quantize8(values, dither)
    if bits == 4:
        return quantize4(values, dither)
    raise ConfigError(f"output sample width {bits} bits is not supported: use 8 or 4")


def pack4(parts: npt.ArrayLike) -> np.ndarray:
    """int ``(..., 2)`` re/im in -8..7 -> uint8 ``(...)``, real in the high nibble."""
    p = np.asarray(parts)
    if p.shape[-1:] != (2,) or np.any(p < -8) or np.any(p > 7):
        raise ConfigError("pack4 takes integer (re, im) pairs in -8..7, shape (..., 2)")
    u = p.astype(np.int64) & 0xF
    return ((u[..., 0] << 4) | u[..., 1]).astype(np.uint8)


def unpack4(packed: npt.ArrayLike) -> np.ndarray:
    """uint8 ``(...)`` -> int8 ``(..., 2)`` re/im, undoing ``pack4``."""
    b = np.asarray(packed, dtype=np.uint8).astype(np.int16)
    parts = np.stack([b >> 4, b & 0xF], axis=-1)
    return np.where(parts >= 8, parts - 16, parts).astype(np.int8)

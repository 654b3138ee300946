"""Digitiser samples as they travel: signed integers of 8, 10, 12 or 16 bits packed
into one big-endian bit stream (MeerKAT digitiser heaps; docs/formats.md, SPEAD).

The first sample fills the most significant bits of byte 0 (10 bits: four samples
in five bytes). The simulator packs with ``pack_samples``; the F-engine's CPU path
unpacks whole heaps with ``unpack_heaps`` (vectorised by groups of bytes), and its
GPU kernel reads the same bit stream (``fengine.cu``); ``unpack_samples`` is the
bit-by-bit reference the tests hold the others to.
"""

from __future__ import annotations

import math
from typing import Final

import numpy as np
import numpy.typing as npt

from voltstream.errors import ConfigError, FormatError

__all__ = [
    "DIG_IDS",
    "SAMPLES_PER_HEAP",
    "SAMPLE_BITS",
    "SAMPLE_RATE_HZ",
    "SAMPLE_WIDTH",
    "check_bits",
    "heap_bytes",
    "pack_samples",
    "unpack_heaps",
    "unpack_samples",
]

#: Digitiser sample widths.
SAMPLE_BITS = (8, 10, 12, 16)

# A MeerKAT L-band digitiser's stream, the defaults of every verb that sends or takes
# one (simulate --format spead-dig, fengine) and of the F-engine's settings.
#: Bits per sample.
SAMPLE_WIDTH: Final = 10
#: Samples per heap (one packet each).
SAMPLES_PER_HEAP = 4096
#: Samples per second.
SAMPLE_RATE_HZ = 1712e6
#: Digitiser ids (item 0x3101) of polarisation 0 and polarisation 1.
DIG_IDS = (0, 1)


def check_bits(bits: int, name: str = "digitiser sample width") -> None:
    """A ConfigError unless ``bits`` is a digitiser sample width; ``name`` is what
    the message calls it (a command-line option names itself, ``--sample-bits``)."""
    if bits not in SAMPLE_BITS:
        raise ConfigError(f"{name} {bits} is not supported; use 8, 10, 12 or 16")


def heap_bytes(samples_per_heap: int, bits: int, name: str = "samples per heap") -> int:
    """Bytes of one heap of ``samples_per_heap`` packed ``bits``-bit samples.

    A ConfigError unless the width is a digitiser's and the heap a positive whole
    number of samples filling whole bytes (the packing has no padding).
    """
    check_bits(bits)
    if int(samples_per_heap) != samples_per_heap or samples_per_heap < 1:
        raise ConfigError(f"{name} {samples_per_heap}: give a positive whole number")
    if samples_per_heap * bits % 8:
        raise ConfigError(
            f"{name} {samples_per_heap} x {bits} bits is not a whole number of bytes: "
            "give a multiple of 4 samples (MeerKAT uses 4096)"
        )
    return int(samples_per_heap) * bits // 8


def pack_samples(samples: npt.ArrayLike, bits: int) -> np.ndarray:
    """Packs signed integers into a big-endian bit stream of ``bits`` per sample.

    ``samples`` must be integers within the signed ``bits``-bit range and their
    total bit count a whole number of bytes; returns a 1-D uint8 array.
    """
    check_bits(bits)
    s = np.asarray(samples)
    if s.dtype.kind not in "iu":
        raise ConfigError(f"samples must be integers to pack, got dtype {s.dtype}")
    s = s.reshape(-1).astype(np.int64)
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if s.size and (s.min() < lo or s.max() > hi):
        raise ConfigError(f"samples must lie in {lo}..{hi} for {bits}-bit packing")
    if s.size * bits % 8:
        raise ConfigError(f"{s.size} samples of {bits} bits are not a whole number of bytes")
    codes = (s & ((1 << bits) - 1)).astype(">u2")
    bitplane = np.unpackbits(codes.view(np.uint8).reshape(-1, 2), axis=1)[:, 16 - bits :]
    return np.packbits(bitplane.reshape(-1))


def unpack_samples(data: npt.ArrayLike, bits: int, n: int | None = None) -> np.ndarray:
    """Unpacks ``n`` (default: all whole) signed samples; returns int16."""
    check_bits(bits)
    d = np.frombuffer(np.ascontiguousarray(data, dtype=np.uint8), dtype=np.uint8)
    avail = d.size * 8 // bits
    n = avail if n is None else n
    if n > avail:
        raise FormatError(f"{d.size} bytes hold {avail} samples of {bits} bits, not {n}")
    stream = np.unpackbits(d)[: n * bits].reshape(n, bits)
    padded = np.zeros((n, 16), dtype=np.uint8)
    padded[:, :bits] = stream
    # The code sits in the top bits of a big-endian int16: the arithmetic
    # shift back down sign-extends it.
    top = np.packbits(padded, axis=1).reshape(-1).view(">i2").astype(np.int16)
    return top >> (16 - bits)


def unpack_heaps(raw: npt.ArrayLike, bits: int) -> np.ndarray:
    """Signed samples (int16) from packed big-endian ``bits``-bit data along the last axis.

    ``raw`` is uint8 ``(..., nbytes)``; the result is ``(..., nbytes * 8 // bits)``.
    The first sample sits in the most significant bits of byte 0 (10 bits: four
    samples in five bytes), as ``voltstream.sim.spead.unpack_samples`` reads it,
    but vectorised by groups of bytes.
    """
    check_bits(bits)
    r = np.ascontiguousarray(raw, dtype=np.uint8)
    lead, nbytes = r.shape[:-1], r.shape[-1]
    if bits == 8:
        return r.view(np.int8).astype(np.int16)
    if bits == 16:
        return r.reshape(*lead, nbytes // 2, 2).view(">i2")[..., 0].astype(np.int16)
    per_group = 8 // math.gcd(bits, 8)  # samples per group: 4 (10 bits), 2 (12 bits)
    group = per_group * bits // 8  # bytes per group: 5, 3
    if nbytes % group:
        raise ConfigError(f"{nbytes} bytes are not whole groups of {per_group} {bits}-bit samples")
    g = r.reshape(*lead, nbytes // group, group)
    out = np.empty((*lead, nbytes // group, per_group), dtype=np.int16)
    mask, sign = (1 << bits) - 1, 1 << (bits - 1)
    for j in range(per_group):
        # Sample j of a group starts at bit j*bits: it lies within the three bytes
        # from byte (j*bits)//8, read as one 24-bit big-endian number.
        a, o = divmod(j * bits, 8)
        v = g[..., a].astype(np.int32) << 16
        if a + 1 < group:
            v |= g[..., a + 1].astype(np.int32) << 8
        if a + 2 < group:
            v |= g[..., a + 2]
        code = (v >> (24 - o - bits)) & mask
        out[..., j] = (code ^ sign) - sign
    return out.reshape(*lead, -1)

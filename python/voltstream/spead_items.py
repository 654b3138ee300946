"""SPEAD-64-XX packet headers and item pointers, vectorised: the one Python encoder
of them, for the digitiser heaps the simulator sends (``sim/spead.py``, SPEAD-64-40
or -48) and the channelised heaps the F-engine sends (``fengine/heaps.py``, -48).

A packet starts with 8 bytes (magic 0x53, version 4, item-pointer width, heap-address
width, two zero bytes, the number of item pointers, big-endian), then the pointers,
8 bytes each, big-endian: bit 63 set = immediate, then the item id in the bits above
the address width and the value (or heap address) in the bits below it. The Rust
capture parses the same bytes (``wire::spead``); decoding in Python stays with the
tests and tools that need it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from voltstream.errors import ConfigError

__all__ = ["MAGIC", "VERSION", "header", "headers", "pointer", "pointers"]

MAGIC = 0x53
VERSION = 4


def pointers(
    item_id: int, values: npt.ArrayLike, immediate: bool = True, addr_bits: int = 48
) -> np.ndarray:
    """Item pointers (uint64, the shape of ``values``) of ``item_id`` with ``values``;
    a value that does not fit ``addr_bits`` bits is a ConfigError."""
    v = np.asarray(values, dtype=np.uint64)
    if v.size and int(v.max()) >= 1 << addr_bits:
        raise ConfigError(f"item {item_id:#x} value does not fit {addr_bits} bits")
    if not 0 <= item_id < 1 << (63 - addr_bits):
        raise ConfigError(f"item id {item_id:#x} does not fit {63 - addr_bits} bits")
    return v | np.uint64((int(immediate) << 63) | (item_id << addr_bits))


def pointer(item_id: int, value: int, immediate: bool = True, addr_bits: int = 48) -> int:
    """One item pointer as an int."""
    return int(pointers(item_id, value, immediate, addr_bits))


def header(n_items: int, addr_bits: int = 48) -> np.ndarray:
    """The 8 header bytes of a packet with ``n_items`` item pointers (uint8)."""
    if addr_bits % 8 or not 8 <= addr_bits <= 56:
        raise ConfigError(f"heap address width {addr_bits} bits: use a multiple of 8")
    count = np.array(n_items, dtype=">u2").tobytes()
    return np.frombuffer(bytes([MAGIC, VERSION, 8 - addr_bits // 8, addr_bits // 8, 0, 0])
                         + count, dtype=np.uint8).copy()  # fmt: skip


def headers(columns: Sequence[np.ndarray], addr_bits: int = 48) -> np.ndarray:
    """Header and item pointers of many packets at once: ``columns`` are the item
    pointers in packet order (uint64 arrays, broadcast against each other); returns
    uint8 ``(*shape, 8 + 8 * len(columns))``."""
    cols = np.broadcast_arrays(*[np.asarray(c, dtype=np.uint64) for c in columns])
    shape = cols[0].shape
    out = np.empty(shape + (8 + 8 * len(cols),), dtype=np.uint8)
    out[..., :8] = header(len(cols), addr_bits)
    words = np.stack(cols, axis=-1).astype(">u8")
    out[..., 8:] = words.view(np.uint8).reshape(shape + (-1,))
    return out

"""SPEAD-64-XX packet headers and item pointers, vectorised: the one Python encoder
of them, for the digitiser heaps the simulator sends (``sim/spead.py``, SPEAD-64-40
or -48) and the channelised heaps the F-engine sends (``fengine/heaps.py``, -48).

A packet starts with 8 bytes (magic 0x53, version 4, item-pointer width, heap-address
width, two zero bytes, the number of item pointers, big-endian), then the pointers,
8 bytes each, big-endian: bit 63 set = immediate, then the item id in the bits above
the address width and the value (or heap address) in the bits below it, then
``payload length`` (item 0x4) bytes of payload. The standard items (heap counter,
size, offset, payload length) have their ids here, once.

``parse_packet`` is the one Python decoder of the same bytes, for the tests and
tools that read packets back (the simulator's digitiser heaps, the F-engine's
output heaps and its packet files); the Rust capture has its own
(``wire::spead``), fuzzed, for the hot path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from voltstream.errors import ConfigError, FormatError

__all__ = [
    "HEADER_LEN",
    "HEAP_CNT",
    "HEAP_OFFSET",
    "HEAP_SIZE",
    "MAGIC",
    "PAYLOAD_LENGTH",
    "VERSION",
    "Packet",
    "header",
    "headers",
    "parse_packet",
    "pointer",
    "pointers",
]

MAGIC = 0x53
VERSION = 4
#: Bytes of the packet header, before the item pointers.
HEADER_LEN = 8
#: The items that place a packet's payload in its heap (SPEAD protocol, 2012).
HEAP_CNT, HEAP_SIZE, HEAP_OFFSET, PAYLOAD_LENGTH = 0x1, 0x2, 0x3, 0x4


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


@dataclass(frozen=True)
class Packet:
    """One SPEAD-64-XX packet as read by ``parse_packet``."""

    #: The flavour's heap-address width (48 for SPEAD-64-48).
    addr_bits: int
    #: ``(immediate, item id, value or heap address)`` per item pointer, in packet order.
    items: tuple[tuple[bool, int, int], ...]
    #: The ``payload length`` bytes after the item pointers.
    payload: bytes
    #: Bytes the packet takes: header, item pointers and payload.
    size: int

    def immediates(self) -> dict[int, int]:
        """Immediate items by id (of an id given twice, the last)."""
        return {i: v for imm, i, v in self.items if imm}

    def addresses(self) -> dict[int, int]:
        """Addressed items by id: their heap addresses (of an id given twice, the last)."""
        return {i: v for imm, i, v in self.items if not imm}

    def require(self, *item_ids: int) -> dict[int, int]:
        """``immediates()``, or a FormatError naming those of ``item_ids`` it lacks."""
        got = self.immediates()
        missing = [hex(i) for i in item_ids if i not in got]
        if missing:
            raise FormatError(f"SPEAD packet lacks the immediate items {', '.join(missing)}")
        return got


def parse_packet(data: Any, addr_bits: int | None = None) -> Packet:
    """The SPEAD packet at the start of ``data`` (bytes-like).

    Bytes after the packet are left alone (``Packet.size`` says where the next of a
    buffer of packets back to back starts). ``addr_bits`` pins the flavour (48:
    SPEAD-64-48); None takes any SPEAD-64-XX. A FormatError for a bad header, too
    few bytes for the item pointers or the payload, or no immediate payload length.
    """
    if isinstance(data, np.ndarray):  # a row of a packet array, say
        data = np.ascontiguousarray(data, dtype=np.uint8)
    b = memoryview(data).cast("B")
    if len(b) < HEADER_LEN:
        raise FormatError(f"SPEAD packet of {len(b)} B is shorter than its 8-byte header")
    head = bytes(b[:4])
    if addr_bits is not None:
        expected = bytes([MAGIC, VERSION, 8 - addr_bits // 8, addr_bits // 8])
        if head != expected:
            raise FormatError(
                f"not a SPEAD-64-{addr_bits} packet (header {head.hex()}, expected "
                f"{expected.hex()}): check the sender's flavour"
            )
    elif head[0] != MAGIC or head[1] != VERSION or head[2] + head[3] != 8 or not 1 <= head[3] <= 7:
        raise FormatError(
            f"no SPEAD packet header (got {head.hex()}, a SPEAD-64-XX header expected)"
        )
    addr = 8 * head[3]
    n_items = int.from_bytes(b[6:8], "big")
    start = HEADER_LEN + 8 * n_items
    if len(b) < start:
        raise FormatError(f"SPEAD packet of {len(b)} B is too short for its {n_items} items")
    id_mask, value_mask = (1 << (63 - addr)) - 1, (1 << addr) - 1
    items = tuple(
        (bool(w >> 63), (w >> addr) & id_mask, w & value_mask)
        for w in np.frombuffer(b[HEADER_LEN:start], dtype=">u8").tolist()
    )
    packet = Packet(addr, items, b"", start)
    length = packet.require(PAYLOAD_LENGTH)[PAYLOAD_LENGTH]
    if len(b) - start < length:
        raise FormatError(
            f"SPEAD packet promises {length} payload bytes but carries {len(b) - start}"
        )
    return Packet(addr, items, bytes(b[start : start + length]), start + length)

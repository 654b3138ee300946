"""F-engine output heaps and their SPEAD-64-48 packets, in NumPy (reference and tests).

Heap layout (MeerKAT's channelised-voltage format; Merry 2023, sec. 2.2):

- One heap per (heap time slot, substream). A substream carries a contiguous range of
  ``channels_per_heap = nchan // n_substreams`` channels and goes to one destination.
- Payload: ``(channels_per_heap, spectra_per_heap, npol=2, 2)`` int8 for 8-bit output
  (real before imaginary, polarisation 0 before 1), or ``(channels_per_heap,
  spectra_per_heap, 2)`` uint8 for 4-bit output (one byte per complex value,
  ``voltstream.dsp.quantize.pack4``). Row-major, no padding.
- ``timestamp``: the timestamp (digitiser samples, output time line) of the heap's
  first spectrum, i.e. the first input sample of its window when the coarse delay
  is zero. Heaps are aligned: timestamps are multiples of ``samples_per_heap =
  spectra_per_heap * 2 * nchan``.
- ``frequency``: the index of the heap's first channel (not Hz), constant per heap.

SPEAD-64-48 packet (all big-endian; SPEAD protocol rev. 1, 2012):

- 8-byte header: magic 0x53, version 4, item-pointer width 2 bytes, heap-address
  width 6 bytes, 2 reserved zero bytes, number of item pointers (u16).
- Item pointers, 8 bytes each: bit 63 set = immediate value, clear = address into
  the heap payload; bits 62..48 = item id; bits 47..0 = value or address. Every
  packet carries the same eight, in this order: heap cnt 0x1, heap size 0x2, heap
  offset 0x3, payload length 0x4 (the SPEAD packet items), timestamp 0x1600,
  feng_id 0x4101, frequency 0x4103 (immediate), feng_raw 0x4300 (address 0: the
  whole payload). Repeating the immediates in every packet lets packet-level
  consumers use any packet alone (spead2's ``repeat_pointers``).
- Then ``payload length`` bytes of the heap payload from ``heap offset``. All packets
  of a heap have the same payload size, which must divide the heap payload (so
  the packets of a heap are one ``(n, packet_len)`` array for ``Sender.send``).
- Heap cnt: ``(timestamp // samples_per_heap) * n_fengs + feng_id`` (``heap_counter``),
  unique per F-engine and time slot, modulo 2^48. The ids 0x1600, 0x4101, 0x4103 and
  0x4300 follow MeerKAT's CBF data subscribers ICD as documented by katgpucbf.

Item descriptors (``encode_descriptor_heap``): a heap whose item 0x5 pointers each
address one descriptor, itself a complete SPEAD-64-48 packet with the item's id
(0x14, immediate), name (0x10), description (0x11), format (0x13: ``(code, bits)``
pairs, one ASCII byte and a 16-bit big-endian bit count each), shape (0x12: one flag
byte and a 48-bit big-endian size per dimension) and, for array items, a NumPy
header (0x15: the ``repr`` of ``{'descr', 'fortran_order', 'shape'}``, as in
``.npy`` files). The F-engine's descriptors (``fengine_descriptors``): timestamp,
feng_id and frequency as immediate unsigned 48-bit integers, feng_raw as an int8
array ``(channels, spectra, 2, 2)`` (8-bit) or uint8 ``(channels, spectra, 2)``
(4-bit). A receiver such as spead2's ``ItemGroup`` then decodes the data heaps with
no prior knowledge. ``encode_stop_heap`` ends a stream (item 0x6 = 2).

(Over 500 lines: the heap layout, the SPEAD-64-48 packing and its reader are one
format, written and read back in NumPy; the tests read them as one.)
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from voltstream.errors import ConfigError, FormatError
from voltstream.spead_items import (
    HEADER_LEN,
    HEAP_CNT,
    HEAP_OFFSET,
    HEAP_SIZE,
    PAYLOAD_LENGTH,
    header,
    headers,
    parse_packet,
    pointer,
    pointers,
)

__all__ = [
    "DESCRIPTOR_HEAP_CNT",
    "ITEM_DESCRIPTOR",
    "ITEM_FENG_ID",
    "ITEM_FENG_RAW",
    "ITEM_FREQUENCY",
    "ITEM_STREAM_CTRL",
    "ITEM_TIMESTAMP",
    "PACKET_HEADER_LEN",
    "STOP_HEAP_CNT",
    "DecodedHeap",
    "HeapLayout",
    "ItemDescriptor",
    "OutputHeap",
    "decode_descriptor",
    "decode_descriptor_heap",
    "decode_output_heap",
    "decode_packets",
    "encode_descriptor",
    "encode_descriptor_heap",
    "encode_heap",
    "encode_stop_heap",
    "fengine_descriptors",
    "heap_counter",
    "packet_headers",
    "split_packets",
]

ITEM_TIMESTAMP = 0x1600
ITEM_FENG_ID = 0x4101
ITEM_FREQUENCY = 0x4103
ITEM_FENG_RAW = 0x4300
ITEM_DESCRIPTOR = 0x5
ITEM_STREAM_CTRL = 0x6
STREAM_CTRL_STOP = 2
DESC_NAME, DESC_DESCRIPTION, DESC_SHAPE, DESC_FORMAT, DESC_ID, DESC_DTYPE = range(0x10, 0x16)
#: Heap cnts of the descriptor and stop heaps: the top of the 48-bit range, which
#: data heap cnts (slot * n_fengs + feng_id) do not reach in practice.
DESCRIPTOR_HEAP_CNT = (1 << 48) - 2
STOP_HEAP_CNT = (1 << 48) - 1

#: The F-engine's flavour: SPEAD-64-48 (48-bit heap addresses and immediates).
ADDR_BITS = 48
_VALUE_MASK = (1 << ADDR_BITS) - 1
_ID_MASK = (1 << (63 - ADDR_BITS)) - 1
_PACKET_ITEMS = (HEAP_CNT, HEAP_SIZE, HEAP_OFFSET, PAYLOAD_LENGTH)
_N_ITEMS = 8
#: Bytes before the payload in every data packet: the header and eight item pointers.
PACKET_HEADER_LEN = HEADER_LEN + 8 * _N_ITEMS


@dataclass(frozen=True)
class HeapLayout:
    """Shape of one F-engine output stream's heaps."""

    nchan: int
    spectra_per_heap: int
    n_substreams: int = 1
    bits: int = 8
    npol: int = 2

    def __post_init__(self) -> None:
        if self.bits not in (4, 8):
            raise ConfigError(f"output sample width {self.bits} bits: use 8 or 4")
        if self.npol != 2:
            raise ConfigError("F-engine heaps carry exactly 2 polarisations")
        if self.spectra_per_heap < 1:
            raise ConfigError(
                f"spectra_per_heap={self.spectra_per_heap}: give at least 1 (MeerKAT uses 256)"
            )
        if self.n_substreams < 1 or self.nchan % self.n_substreams:
            raise ConfigError(
                f"{self.n_substreams} substreams do not split {self.nchan} channels evenly: "
                "give a divisor of the channel count"
            )

    @property
    def channels_per_heap(self) -> int:
        return self.nchan // self.n_substreams

    @property
    def samples_per_heap(self) -> int:
        """Digitiser samples per heap time slot: ``spectra_per_heap * 2 * nchan``."""
        return self.spectra_per_heap * 2 * self.nchan

    @property
    def payload_shape(self) -> tuple[int, ...]:
        base = (self.channels_per_heap, self.spectra_per_heap, self.npol)
        return base + (2,) if self.bits == 8 else base

    @property
    def payload_dtype(self) -> np.dtype:
        return np.dtype(np.int8 if self.bits == 8 else np.uint8)

    @property
    def payload_bytes(self) -> int:
        return int(np.prod(self.payload_shape))

    def channel_offset(self, substream: int) -> int:
        """First channel (the ``frequency`` item) of a substream."""
        if not 0 <= substream < self.n_substreams:
            raise ConfigError(f"substream {substream} is not in 0..{self.n_substreams - 1}")
        return substream * self.channels_per_heap


@dataclass
class OutputHeap:
    """One output heap: the values of its items and its payload."""

    timestamp: int
    frequency: int
    feng_id: int
    payload: np.ndarray
    substream: int = 0


@dataclass
class DecodedHeap:
    """A heap reassembled from packets: immediate items, addressed items, payload."""

    heap_cnt: int
    immediates: dict[int, int] = field(default_factory=dict)
    addresses: dict[int, int] = field(default_factory=dict)
    payload: bytes = b""
    complete: bool = False


def heap_counter(timestamp: int, samples_per_heap: int, feng_id: int = 0, n_fengs: int = 1) -> int:
    """Heap cnt ``(timestamp // samples_per_heap) * n_fengs + feng_id`` modulo 2^48."""
    if not 0 <= feng_id < n_fengs:
        raise ConfigError(f"feng_id={feng_id} must be in 0..n_fengs-1 (n_fengs={n_fengs})")
    return ((int(timestamp) // int(samples_per_heap)) * n_fengs + feng_id) & _VALUE_MASK


def _pointer(item_id: int, value: int, immediate: bool = True) -> int:
    return pointer(item_id, int(value), immediate)


def encode_heap(heap: OutputHeap, heap_cnt: int, packet_payload: int = 8192) -> np.ndarray:
    """SPEAD-64-48 packets of one heap: uint8 ``(npackets, 72 + payload per packet)``.

    Each packet carries ``min(packet_payload, heap payload)`` payload bytes, which
    must divide the heap payload.
    """
    payload = np.ascontiguousarray(heap.payload).view(np.uint8).reshape(-1)
    size = payload.size
    if size == 0:
        raise ConfigError("an output heap needs a non-empty payload")
    per_packet = min(int(packet_payload), size)
    if per_packet < 1 or size % per_packet:
        raise ConfigError(
            f"packet payload {packet_payload} B does not divide the heap payload {size} B: "
            "give a divisor of it (a power of two usually is)"
        )
    for name in ("timestamp", "frequency", "feng_id"):
        value = int(getattr(heap, name))
        if not 0 <= value <= _VALUE_MASK:
            raise ConfigError(f"heap {name}={value} does not fit a 48-bit SPEAD immediate item")
    npackets = size // per_packet
    packets = np.empty((npackets, PACKET_HEADER_LEN + per_packet), dtype=np.uint8)
    packets[:, :PACKET_HEADER_LEN] = packet_headers(
        [heap_cnt], [heap.timestamp], [heap.frequency], heap.feng_id, size, per_packet
    )[0]
    packets[:, PACKET_HEADER_LEN:] = payload.reshape(npackets, per_packet)
    return packets


def packet_headers(
    heap_cnts: npt.ArrayLike,
    timestamps: npt.ArrayLike,
    frequencies: npt.ArrayLike,
    feng_id: int,
    size: int,
    per_packet: int,
) -> np.ndarray:
    """The 72-byte headers of the packets of ``H`` heaps: uint8 ``(H, size // per_packet, 72)``.

    Heap ``h`` has cnt ``heap_cnts[h]``, ``timestamps[h]`` and ``frequencies[h]``;
    all have ``size`` payload bytes cut into packets of ``per_packet``. Vectorised:
    the F-engine fills the headers of a whole block of heaps at once.
    """
    cnt = np.asarray(heap_cnts, dtype=np.uint64).reshape(-1, 1)
    offsets = np.arange(size // per_packet, dtype=np.uint64) * np.uint64(per_packet)
    per_heap = lambda values: np.asarray(values, dtype=np.uint64).reshape(-1, 1)  # noqa: E731
    return headers(
        [
            pointers(HEAP_CNT, cnt),
            pointers(HEAP_SIZE, size),
            pointers(HEAP_OFFSET, offsets[None, :]),
            pointers(PAYLOAD_LENGTH, per_packet),
            pointers(ITEM_TIMESTAMP, per_heap(timestamps)),
            pointers(ITEM_FENG_ID, feng_id),
            pointers(ITEM_FREQUENCY, per_heap(frequencies)),
            pointers(ITEM_FENG_RAW, 0, immediate=False),
        ]
    )


def _parse_packet(packet: bytes) -> tuple[dict[int, int], dict[int, int], bytes]:
    """Immediates, addresses and payload of one SPEAD-64-48 packet with the four
    standard items (``spead_items.parse_packet`` reads it)."""
    p = parse_packet(packet, ADDR_BITS)
    return p.require(*_PACKET_ITEMS), p.addresses(), p.payload


def decode_packets(packets: Iterable) -> list[DecodedHeap]:
    """Reassembles SPEAD-64-48 packets into heaps, in order of first packet.

    ``packets`` is any iterable of bytes-like packets (a 2-D uint8 array works).
    Heaps missing a byte range come back with ``complete=False``.
    """
    heaps: dict[int, DecodedHeap] = {}
    buffers: dict[int, tuple[bytearray, np.ndarray]] = {}
    for raw in packets:
        if isinstance(raw, (bytes, bytearray, memoryview)):
            packet = bytes(raw)
        else:
            packet = np.asarray(raw, dtype=np.uint8).tobytes()
        immediates, addresses, data = _parse_packet(packet)
        cnt = immediates[HEAP_CNT]
        size = immediates[HEAP_SIZE]
        offset = immediates[HEAP_OFFSET]
        if offset + len(data) > size:
            raise FormatError(
                f"heap {cnt}: packet bytes {offset}..{offset + len(data)} overrun heap size {size}"
            )
        if cnt not in heaps:
            items = {k: v for k, v in immediates.items() if k not in _PACKET_ITEMS}
            heaps[cnt] = DecodedHeap(heap_cnt=cnt, immediates=items, addresses=dict(addresses))
            buffers[cnt] = (bytearray(size), np.zeros(size, dtype=bool))
        buf, seen = buffers[cnt]
        if len(buf) != size:
            raise FormatError(f"heap {cnt}: packets disagree on the heap size")
        buf[offset : offset + len(data)] = data
        seen[offset : offset + len(data)] = True
    for cnt, heap in heaps.items():
        buf, seen = buffers[cnt]
        heap.payload = bytes(buf)
        heap.complete = bool(np.all(seen))
    return list(heaps.values())


def decode_output_heap(decoded: DecodedHeap, layout: HeapLayout) -> OutputHeap:
    """An ``OutputHeap`` from a complete decoded heap of the given layout."""
    if not decoded.complete:
        raise FormatError(f"heap {decoded.heap_cnt} is incomplete: some packets are missing")
    missing = [
        hex(i)
        for i in (ITEM_TIMESTAMP, ITEM_FENG_ID, ITEM_FREQUENCY)
        if i not in decoded.immediates
    ]
    if missing or decoded.addresses.get(ITEM_FENG_RAW) != 0:
        raise FormatError(
            f"heap {decoded.heap_cnt} is not an F-engine heap: it lacks items "
            f"{', '.join(missing) or hex(ITEM_FENG_RAW)}"
        )
    if len(decoded.payload) != layout.payload_bytes:
        raise FormatError(
            f"heap {decoded.heap_cnt} has {len(decoded.payload)} payload bytes, the layout "
            f"expects {layout.payload_bytes}: check nchan, substreams, spectra_per_heap, bits"
        )
    payload = np.frombuffer(decoded.payload, dtype=layout.payload_dtype)
    frequency = decoded.immediates[ITEM_FREQUENCY]
    return OutputHeap(
        timestamp=decoded.immediates[ITEM_TIMESTAMP],
        frequency=frequency,
        feng_id=decoded.immediates[ITEM_FENG_ID],
        payload=payload.reshape(layout.payload_shape).copy(),
        substream=frequency // layout.channels_per_heap,
    )


# Item descriptors, the stop heap, and files of back-to-back packets.

_ADDR_BYTES = ADDR_BITS // 8  # 48-bit sizes in shape entries
_FORMAT_LEN_BYTES = 8 - ADDR_BITS // 8  # 16-bit bit counts in format entries


@dataclass(frozen=True)
class ItemDescriptor:
    """What a receiver needs to decode one item: id, name, description, and either a
    SPEAD ``format`` (``(code, bits)`` pairs, e.g. ``(("u", 48),)``) with a shape, or
    a NumPy ``dtype`` descr string (e.g. ``"|i1"``) with a fixed shape."""

    id: int
    name: str
    description: str
    shape: tuple[int, ...] = ()
    format: tuple[tuple[str, int], ...] | None = None
    dtype: str | None = None

    def __post_init__(self) -> None:
        if (self.format is None) == (self.dtype is None):
            raise ConfigError(f"item {self.name!r}: give exactly one of format and dtype")
        if not 0 < self.id <= _ID_MASK:
            raise ConfigError(f"item id {self.id:#x} does not fit 15 bits")
        for text in (self.name, self.description):
            if not text.isascii():
                raise ConfigError(f"item {self.name!r}: names and descriptions must be ASCII")
        for dim in self.shape:
            if not 0 <= int(dim) <= _VALUE_MASK:
                raise ConfigError(f"item {self.name!r}: dimension {dim} does not fit 48 bits")
        for code, bits in self.format or ():
            if len(code) != 1 or not code.isascii() or not 0 < int(bits) < 1 << 16:
                raise ConfigError(f"item {self.name!r}: bad format field ({code!r}, {bits})")


def fengine_descriptors(layout: HeapLayout) -> list[ItemDescriptor]:
    """The descriptors of an F-engine output stream's items."""
    u48 = (("u", 48),)
    if layout.bits == 8:
        raw_text = "Channelised complex voltages, int8 (channel, spectrum, pol, re/im)"
    else:
        raw_text = (
            "Channelised complex voltages, 4-bit: one byte per (channel, spectrum, pol), "
            "real in the high nibble, imaginary in the low nibble, two's complement"
        )
    return [
        ItemDescriptor(
            ITEM_TIMESTAMP,
            "timestamp",
            "Digitiser sample count of the first spectrum of the heap",
            format=u48,
        ),
        ItemDescriptor(ITEM_FENG_ID, "feng_id", "F-engine (antenna) index", format=u48),
        ItemDescriptor(
            ITEM_FREQUENCY, "frequency", "Index of the heap's first channel", format=u48
        ),
        ItemDescriptor(
            ITEM_FENG_RAW,
            "feng_raw",
            raw_text,
            shape=tuple(int(d) for d in layout.payload_shape),
            dtype=str(np.lib.format.dtype_to_descr(layout.payload_dtype)),
        ),
    ]


def _packet(items: list[int], payload: bytes) -> bytes:
    words = np.array(items, dtype=">u8").tobytes()
    return header(len(items)).tobytes() + words + payload


def _heap_packet(heap_cnt: int, items: list[int], payload: bytes) -> bytes:
    """One packet holding a whole heap: the four packet items, then ``items``."""
    size = len(payload)
    pointers = [
        _pointer(HEAP_CNT, heap_cnt),
        _pointer(HEAP_SIZE, size),
        _pointer(HEAP_OFFSET, 0),
        _pointer(PAYLOAD_LENGTH, size),
        *items,
    ]
    return _packet(pointers, payload)


def encode_descriptor(desc: ItemDescriptor) -> bytes:
    """One descriptor as the SPEAD-64-48 packet that a descriptor heap addresses."""
    fields = [
        (DESC_NAME, desc.name.encode("ascii")),
        (DESC_DESCRIPTION, desc.description.encode("ascii")),
        (
            DESC_FORMAT,
            b"".join(
                code.encode("ascii") + int(bits).to_bytes(_FORMAT_LEN_BYTES, "big")
                for code, bits in (desc.format or ())
            ),
        ),
        (DESC_SHAPE, b"".join(b"\0" + int(d).to_bytes(_ADDR_BYTES, "big") for d in desc.shape)),
    ]
    if desc.dtype is not None:
        header = {"descr": desc.dtype, "fortran_order": False, "shape": tuple(desc.shape)}
        fields.append((DESC_DTYPE, repr(header).encode("ascii")))
    items = [_pointer(DESC_ID, desc.id)]
    payload = b""
    for item_id, data in fields:
        items.append(_pointer(item_id, len(payload), immediate=False))
        payload += data
    return _heap_packet(1, items, payload)


def _addressed_fields(packet: bytes) -> tuple[dict[int, int], list[tuple[int, bytes]]]:
    """Immediates and ``(id, bytes)`` of each addressed item (repeats kept) of a
    one-packet heap; an addressed item runs to the next address or the end."""
    p = parse_packet(packet, ADDR_BITS)
    immediates, payload = p.require(*_PACKET_ITEMS), p.payload
    if immediates[HEAP_OFFSET] != 0 or immediates[HEAP_SIZE] != len(payload):
        raise FormatError("descriptor heaps must fit in one packet")
    addressed = [(item_id, addr) for imm, item_id, addr in p.items if not imm]
    # Sorted by address (stably, so items sharing an address keep their order), each
    # item ends where the next begins: the first of two at one address is empty.
    order = sorted(range(len(addressed)), key=lambda i: addressed[i][1])
    ends = [addressed[j][1] for j in order[1:]] + [len(payload)]
    length = {i: max(0, e - addressed[i][1]) for i, e in zip(order, ends, strict=True)}
    return immediates, [
        (item_id, payload[addr : addr + length[i]]) for i, (item_id, addr) in enumerate(addressed)
    ]


def decode_descriptor(packet: bytes) -> ItemDescriptor:
    """The ``ItemDescriptor`` encoded in one descriptor packet."""
    immediates, fields = _addressed_fields(bytes(packet))
    if DESC_ID not in immediates:
        raise FormatError("descriptor packet lacks its item id (0x14)")
    got = dict(fields)
    fmt_bytes = got.get(DESC_FORMAT, b"")
    width = 1 + _FORMAT_LEN_BYTES
    fmt = tuple(
        (chr(fmt_bytes[i]), int.from_bytes(fmt_bytes[i + 1 : i + width], "big"))
        for i in range(0, len(fmt_bytes) - width + 1, width)
    )
    shape_bytes = got.get(DESC_SHAPE, b"")
    width = 1 + _ADDR_BYTES
    shape = tuple(
        int.from_bytes(shape_bytes[i + 1 : i + width], "big")
        for i in range(0, len(shape_bytes) - width + 1, width)
    )
    dtype = None
    if got.get(DESC_DTYPE):
        try:
            header = ast.literal_eval(got[DESC_DTYPE].decode("ascii"))
            dtype, shape = header["descr"], tuple(header["shape"])
        except (ValueError, SyntaxError, KeyError, TypeError, UnicodeDecodeError):
            raise FormatError("descriptor's NumPy header (0x15) is not readable") from None
    return ItemDescriptor(
        id=immediates[DESC_ID],
        name=got.get(DESC_NAME, b"").decode("ascii", "replace"),
        description=got.get(DESC_DESCRIPTION, b"").decode("ascii", "replace"),
        shape=shape,
        format=None if dtype is not None else fmt,
        dtype=dtype,
    )


def encode_descriptor_heap(
    descriptors: Iterable[ItemDescriptor], heap_cnt: int = DESCRIPTOR_HEAP_CNT
) -> np.ndarray:
    """A heap of item descriptors as one packet: uint8 ``(1, packet_len)``."""
    items, payload = [], b""
    for desc in descriptors:
        items.append(_pointer(ITEM_DESCRIPTOR, len(payload), immediate=False))
        payload += encode_descriptor(desc)
    if not items:
        raise ConfigError("a descriptor heap needs at least one descriptor")
    packet = _heap_packet(heap_cnt, items, payload)
    return np.frombuffer(packet, dtype=np.uint8).reshape(1, -1).copy()


def decode_descriptor_heap(packet: Any) -> list[ItemDescriptor]:
    """The descriptors of a one-packet descriptor heap (empty for any other heap)."""
    raw = packet if isinstance(packet, bytes) else np.asarray(packet, np.uint8).tobytes()
    _, fields = _addressed_fields(raw)
    return [decode_descriptor(data) for item_id, data in fields if item_id == ITEM_DESCRIPTOR]


def encode_stop_heap(heap_cnt: int = STOP_HEAP_CNT) -> np.ndarray:
    """The end-of-stream heap (stream control item 0x6 = 2): uint8 ``(1, packet_len)``."""
    packet = _heap_packet(heap_cnt, [_pointer(ITEM_STREAM_CTRL, STREAM_CTRL_STOP)], b"")
    return np.frombuffer(packet, dtype=np.uint8).reshape(1, -1).copy()


def split_packets(buffer: Any) -> Iterator[bytes]:
    """The SPEAD packets of a buffer of packets back to back (an F-engine output file).

    Each packet is self-delimiting: 8-byte header, ``n`` item pointers, then the
    ``payload length`` (item 0x4) bytes of payload.
    """
    data = memoryview(buffer).cast("B")
    pos = 0
    while pos < len(data):
        try:
            size = parse_packet(data[pos:]).size
        except FormatError as e:
            raise FormatError(
                f"at offset {pos}: {e} (a truncated file, or not a packet file?)"
            ) from None
        yield bytes(data[pos : pos + size])
        pos += size

"""MeerKAT-style digitiser heaps as SPEAD packets, in NumPy.

One packet per heap, flavour SPEAD-64-48 by default: the 8-byte header
(magic 0x53, version 4, id width 2 bytes, address width 6 bytes, item count),
eight big-endian item pointers, then the heap. Item order: heap counter
(0x1), heap size (0x2), heap offset (0x3, always 0), payload length (0x4),
time stamp (0x1600, the ADC sample count of the heap's first sample),
digitiser id (0x3101), digitiser status (0x3102), all immediate; then the
raw data item (0x3300) pointing at heap address 0. The heap counter is
``timestamp // samples_per_heap``. ``docs/formats.md`` has the details.

Samples are signed two's-complement integers of 8, 10, 12 or 16 bits, packed
as one big-endian bit stream: the first sample fills the most significant
bits of byte 0 (10 bits: four samples in five bytes).

``digitiser_samples`` and ``digitiser_packets`` make test input for the F-engine:
a tone plus Gaussian noise, quantised like a digitiser, as interleaved heap packets
of both polarisations (``voltstream simulate --format spead-dig`` uses them).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from voltstream.digitiser import check_bits, heap_bytes, pack_samples, unpack_samples
from voltstream.errors import ConfigError, FormatError
from voltstream.spead_items import (
    HEADER_LEN,
    HEAP_CNT,
    HEAP_OFFSET,
    HEAP_SIZE,
    PAYLOAD_LENGTH,
    headers,
    parse_packet,
    pointers,
)

__all__ = [
    "DIG_ID",
    "DIG_RAW_DATA",
    "DIG_STATUS",
    "DIG_TIMESTAMP",
    "depacketize_spead_dig",
    "digitiser_packets",
    "digitiser_samples",
    "pack_samples",
    "packetize_spead_dig",
    "spead_dig_packet_len",
    "unpack_samples",
]

DIG_TIMESTAMP = 0x1600
DIG_ID = 0x3101
DIG_STATUS = 0x3102
DIG_RAW_DATA = 0x3300
_N_ITEMS = 8
_HEADER_LEN = HEADER_LEN + 8 * _N_ITEMS


def spead_dig_packet_len(samples_per_heap: int = 4096, bits: int = 10) -> int:
    """UDP payload bytes of one digitiser heap packet."""
    return _HEADER_LEN + heap_bytes(samples_per_heap, bits)


def packetize_spead_dig(
    samples: npt.ArrayLike,
    *,
    bits: int = 10,
    samples_per_heap: int = 4096,
    timestamp: int = 0,
    digitiser_id: int = 0,
    status: int = 0,
    heap_address_bits: int = 48,
) -> np.ndarray:
    """Packs a 1-D integer sample stream into digitiser heap packets.

    ``timestamp`` is the sample count of the first sample (a multiple of
    ``samples_per_heap``); each next heap adds ``samples_per_heap``.
    ``status`` is one value or one per heap. Returns (n_heaps, packet_len)
    uint8, C-contiguous.
    """
    nbytes = heap_bytes(samples_per_heap, bits)
    if heap_address_bits % 8 or not 16 <= heap_address_bits <= 48:
        raise ConfigError("heap_address_bits must be 16, 24, 32, 40 or 48 (items up to 0x3300)")
    if timestamp < 0 or timestamp % samples_per_heap:
        raise ConfigError(f"timestamp {timestamp} must be a multiple of {samples_per_heap}")
    s = np.asarray(samples).reshape(-1)
    if s.size == 0 or s.size % samples_per_heap:
        raise ConfigError(f"{s.size} samples are not a whole number of {samples_per_heap}-heaps")
    n = s.size // samples_per_heap
    ts = timestamp + samples_per_heap * np.arange(n, dtype=np.uint64)
    a = heap_address_bits
    columns = [
        pointers(HEAP_CNT, ts // np.uint64(samples_per_heap), addr_bits=a),
        pointers(HEAP_SIZE, nbytes, addr_bits=a),
        pointers(HEAP_OFFSET, 0, addr_bits=a),
        pointers(PAYLOAD_LENGTH, nbytes, addr_bits=a),
        pointers(DIG_TIMESTAMP, ts, addr_bits=a),
        pointers(DIG_ID, digitiser_id, addr_bits=a),
        pointers(DIG_STATUS, np.broadcast_to(status, (n,)), addr_bits=a),
        pointers(DIG_RAW_DATA, 0, immediate=False, addr_bits=a),
    ]
    out = np.empty((n, _HEADER_LEN + nbytes), dtype=np.uint8)
    out[:, :_HEADER_LEN] = headers([np.broadcast_to(c, (n,)) for c in columns], a)
    out[:, _HEADER_LEN:] = pack_samples(s, bits).reshape(n, nbytes)
    return out


def depacketize_spead_dig(packets: npt.ArrayLike, *, bits: int = 10) -> dict:
    """Decodes digitiser heap packets (rows of ``packets``).

    Returns ``{"timestamp", "digitiser_id", "status"}`` (uint64, one per
    packet) and ``"samples"`` (int16, the heaps' samples concatenated).
    Raises FormatError for packets that are not whole single-packet heaps.
    """
    check_bits(bits)
    ts, ids, status, samples = [], [], [], []
    for row in np.atleast_2d(np.asarray(packets, dtype=np.uint8)):
        packet = parse_packet(row)
        imm = packet.require(HEAP_CNT, HEAP_SIZE, HEAP_OFFSET, DIG_TIMESTAMP, DIG_ID)
        size = len(packet.payload)
        if imm[HEAP_OFFSET] != 0 or imm[HEAP_SIZE] != size or size * 8 % bits:
            raise FormatError("not a single-packet digitiser heap of whole samples")
        ts.append(imm[DIG_TIMESTAMP])
        ids.append(imm[DIG_ID])
        status.append(imm.get(DIG_STATUS, 0))
        samples.append(unpack_samples(np.frombuffer(packet.payload, np.uint8), bits))
    return {
        "timestamp": np.array(ts, dtype=np.uint64),
        "digitiser_id": np.array(ids, dtype=np.uint64),
        "status": np.array(status, dtype=np.uint64),
        "samples": np.concatenate(samples) if samples else np.zeros(0, np.int16),
    }


def digitiser_samples(
    first_heap: int,
    n_heaps: int,
    *,
    samples_per_heap: int = 4096,
    bits: int = 10,
    tone_hz: float | None = None,
    tone_amplitude: float = 0.0,
    noise_rms: float = 0.0,
    sample_rate_hz: float = 1712e6,
    seed: int = 1,
) -> np.ndarray:
    """Digitiser samples, int16 ``(2, n_heaps * samples_per_heap)``, of heaps
    ``first_heap ..``: ``A cos(2 pi f t / fs)`` in both polarisations plus independent
    Gaussian noise, rounded and clipped to the signed ``bits``-bit range.

    ``t`` is the absolute sample count, and the noise of heap ``k`` is drawn from
    ``default_rng((seed, k))``, so any split into calls gives the same samples.
    """
    heap_bytes(samples_per_heap, bits)
    if n_heaps < 0 or first_heap < 0:
        raise ConfigError("heap numbers must be >= 0")
    n = n_heaps * samples_per_heap
    t0 = first_heap * samples_per_heap
    x = np.zeros((2, n), dtype=np.float64)
    if tone_amplitude and tone_hz is not None:
        t = np.arange(t0, t0 + n, dtype=np.float64)
        # The phase modulo one turn in exact integer arithmetic would need f/fs
        # rational; float64 keeps the phase error far below a quantisation step.
        x += tone_amplitude * np.cos(2 * np.pi * (tone_hz / sample_rate_hz) * t)
    if noise_rms:
        for k in range(n_heaps):
            rng = np.random.default_rng((int(seed), first_heap + k))
            sl = slice(k * samples_per_heap, (k + 1) * samples_per_heap)
            x[:, sl] += noise_rms * rng.standard_normal((2, samples_per_heap))
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return np.clip(np.rint(x), lo, hi).astype(np.int16)


def digitiser_packets(
    samples: npt.ArrayLike,
    first_heap: int,
    *,
    samples_per_heap: int = 4096,
    bits: int = 10,
    dig_ids: tuple[int, int] = (0, 1),
) -> np.ndarray:
    """Heap packets of both polarisations, interleaved (pol 0 heap k, pol 1 heap k, ...):
    uint8 ``(2 * n_heaps, packet_len)``."""
    x = np.asarray(samples)
    pols = [
        packetize_spead_dig(
            x[p],
            bits=bits,
            samples_per_heap=samples_per_heap,
            timestamp=first_heap * samples_per_heap,
            digitiser_id=int(dig_ids[p]),
        )
        for p in range(2)
    ]
    return np.ascontiguousarray(np.stack(pols, axis=1).reshape(-1, pols[0].shape[1]))

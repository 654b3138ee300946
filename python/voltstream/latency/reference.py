"""The low-latency hand-off's memory layout and its NumPy reference (issue 14).

The constants and dtypes restate docs/research/low-latency-contract.md, shared by the
Rust host side and ``dsp/kernels/latency.cu`` (tests/test_latency_reference.py checks
both against each other). ``frame_sums`` is what the kernels compute, exactly;
``pattern_payload`` is the ordering test's payload.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "ACCUM_BYTES",
    "ACCUM_DTYPE",
    "ACK_BYTES",
    "ACK_DTYPE",
    "CONTROL_BYTES",
    "CONTROL_DTYPE",
    "DEFAULT_SLOTS",
    "KIND_INCOMPLETE",
    "KIND_STOP",
    "KIND_WHOLE",
    "PATTERN_MULTIPLIER",
    "PAYLOAD_ALIGN",
    "SLOT_EXTRA",
    "STATUS_ABORTED",
    "STATUS_OK",
    "STATUS_SKIPPED",
    "STATUS_STOPPED",
    "TRAILER_BYTES",
    "TRAILER_DTYPE",
    "TRAILER_SEQ_OFFSET",
    "frame_sums",
    "frame_shape",
    "launch_shape",
    "pattern_payload",
    "payload_cap",
    "slot_stride",
]

#: The payload area of a slot is rounded up to this, and so is the slot stride.
PAYLOAD_ALIGN = 128
#: The trailer follows the payload area; its last 8 bytes are ``seq``.
TRAILER_BYTES = 64
TRAILER_SEQ_OFFSET = 56
#: Slot stride = payload_cap + SLOT_EXTRA (trailer plus padding to 128 bytes).
SLOT_EXTRA = 128
ACK_BYTES = 64
ACCUM_BYTES = 64
CONTROL_BYTES = 64
#: Slots per session (a power of two).
DEFAULT_SLOTS = 16

KIND_WHOLE = 1
KIND_INCOMPLETE = 2
KIND_STOP = 3

STATUS_OK = 1
STATUS_SKIPPED = 2
STATUS_STOPPED = 3
STATUS_ABORTED = 4

#: Pattern mode: 8-byte word j of frame f is ``f ^ (j * PATTERN_MULTIPLIER) mod 2**64``.
PATTERN_MULTIPLIER = 0x9E3779B97F4A7C15

TRAILER_DTYPE = np.dtype(
    {
        "names": ["frame", "bytes", "kind", "t_send_ns", "reserved", "seq"],
        "formats": ["<u8", "<u4", "<u4", "<u8", ("<u8", (4,)), "<u8"],
        "offsets": [0, 8, 12, 16, 24, TRAILER_SEQ_OFFSET],
        "itemsize": TRAILER_BYTES,
    }
)
ACK_DTYPE = np.dtype(
    {
        "names": ["seq", "sum", "sumsq", "status", "torn", "t_gpu_ns", "reserved"],
        "formats": ["<u8", "<u8", "<u8", "<u4", "<u4", "<u8", ("<u8", (3,))],
        "offsets": [0, 8, 16, 24, 28, 32, 40],
        "itemsize": ACK_BYTES,
    }
)
ACCUM_DTYPE = np.dtype(
    {
        "names": [
            "sum",
            "sumsq",
            "done_blocks",
            "torn",
            "reserved",
            "relay_seq",
            "relay_frame",
            "relay_bytes",
            "relay_kind",
            "relay_fields_seq",
        ],
        "formats": ["<u8", "<u8", "<u4", "<u4", "<u8", "<u8", "<u8", "<u4", "<u4", "<u8"],
        "offsets": [0, 8, 16, 20, 24, 32, 40, 48, 52, 56],
        "itemsize": ACCUM_BYTES,
    }
)
CONTROL_DTYPE = np.dtype(
    {"names": ["abort"], "formats": ["<u4"], "offsets": [0], "itemsize": CONTROL_BYTES}
)

# The kernels take payload_cap as u32 and sum frames of u32 bytes.
_MAX_FRAME_BYTES = 2**32 - 2 * PAYLOAD_ALIGN


def payload_cap(frame_bytes: int) -> int:
    """Bytes of a slot's payload area: ``frame_bytes`` rounded up to 128."""
    if not 0 < frame_bytes <= _MAX_FRAME_BYTES:
        raise ValueError(f"frame_bytes must be in 1..{_MAX_FRAME_BYTES}, got {frame_bytes}")
    return -(-frame_bytes // PAYLOAD_ALIGN) * PAYLOAD_ALIGN


def slot_stride(frame_bytes: int) -> int:
    """Bytes from one slot to the next: payload area + 64-byte trailer, 128-aligned."""
    return payload_cap(frame_bytes) + SLOT_EXTRA


def frame_sums(payload: np.ndarray) -> tuple[int, int]:
    """(sum, sum of squares) of the payload's bytes as u8: what an ack must carry."""
    b = np.ascontiguousarray(payload).view(np.uint8).ravel().astype(np.uint64)
    return int(b.sum(dtype=np.uint64)), int((b * b).sum(dtype=np.uint64))


def pattern_payload(frame: int, nbytes: int) -> np.ndarray:
    """The ordering test's payload of wire frame ``frame``: ``nbytes`` uint8, 8-byte
    word j little-endian ``frame ^ (j * PATTERN_MULTIPLIER)`` (wrapping), the last
    word cut short when ``nbytes`` is not a multiple of 8."""
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes}")
    j = np.arange(-(-nbytes // 8), dtype=np.uint64)
    words = (j * np.uint64(PATTERN_MULTIPLIER)) ^ np.uint64(frame % 2**64)  # arrays wrap
    return words.astype("<u8").view(np.uint8)[:nbytes].copy()


#: 16-byte units each thread of the persistent kernel loads before it knows the
#: frame's trailer (latency.cu's PREFETCH): one round trip covers threads x 4 x 16 B.
PREFETCH = 4


def frame_shape(frame_bytes: int) -> tuple[int, int]:
    """(blocks, threads) the product launches a frame with (`LatencySettings`): one
    block while the frame fits in PREFETCH loads per thread of 1024 (64 KiB), so every
    load goes out in one round trip and no block waits on another (measured best in
    every mode, docs/latency.md); up to 16 KiB one unit per thread; more blocks of
    1024 threads above 64 KiB."""
    units = max(1, -(-frame_bytes // 16))
    blocks = -(-units // (1024 * PREFETCH))
    per_block = -(-units // blocks)
    return blocks, min(1024, max(32, -(-per_block // 32) * 32))


def launch_shape(frame_bytes: int, threads: int = 128, max_blocks: int = 32) -> tuple[int, int]:
    """(blocks, threads) so that each thread issues about one 16-byte load per frame:
    1 KiB -> 1 block, 8 KiB -> 4, 64 KiB -> 32 (128 threads). In zerocopy each load is
    a PCIe round trip, so it is parallel loads, not bandwidth, that set the latency;
    ``max_blocks`` keeps a persistent kernel's blocks resident (<= SM count)."""
    units = -(-frame_bytes // 16)
    return max(1, min(max_blocks, -(-units // threads))), threads

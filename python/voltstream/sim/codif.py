"""CODIF frames from samples, and their headers back (docs/formats.md, "CODIF").

The header is eight little-endian 64-bit words, as CSIRO's reference code writes
them (the Rust parser, ``wire/codif.rs``, reads the same fields). The data array
holds each frame's samples as a VDIF frame holds them: time-major, then channel,
re/im interleaved, 8- and 4-bit parts offset binary, 2-bit parts the VDIF levels
(representation code 0). One thread per polarisation; frames go out time-major,
then thread. The frame number restarts every ``period_s`` seconds.
"""

from __future__ import annotations

import numpy as np

from voltstream.errors import ConfigError, FormatError
from voltstream.io import vdif as _vdif

HEADER_LEN = 64
SYNC = 0xABADDEED

#: (word, lowest bit, width) of every header field the simulator writes.
FIELDS = {
    "frame": (0, 0, 32), "seconds": (0, 32, 30), "complex": (0, 62, 1), "invalid": (0, 63, 1),
    "station": (1, 0, 16), "representation": (1, 22, 4), "epoch": (1, 26, 6),
    "data_len8": (1, 32, 24), "bits_per_sample": (1, 56, 5), "version": (1, 61, 3),
    "group": (2, 0, 16), "thread": (2, 16, 16), "nchan_m1": (2, 32, 16),
    "block_len": (2, 48, 16), "period": (3, 32, 16), "total_samples": (4, 0, 64),
    "sync": (5, 32, 32),
}  # fmt: skip


def decode_headers(frames: np.ndarray) -> dict[str, np.ndarray]:
    """The header fields of each row of ``frames`` ((n, >=64) uint8), as int64 arrays."""
    frames = np.atleast_2d(np.asarray(frames, dtype=np.uint8))
    if frames.shape[1] < HEADER_LEN:
        raise FormatError(f"CODIF headers are {HEADER_LEN} bytes, got rows of {frames.shape[1]}")
    words = np.ascontiguousarray(frames[:, :HEADER_LEN]).view("<u8")
    out = {}
    for name, (w, lo, width) in FIELDS.items():
        mask = np.uint64((1 << width) - 1)
        out[name] = ((words[:, w] >> np.uint64(lo)) & mask).astype(np.int64)
    return out


def packetize_codif(
    samples: np.ndarray,
    *,
    nbit: int,
    samples_per_frame: int,
    frames_per_period: int,
    period_s: int,
    start_frame: int,
    epoch: int,
    station: int = 0,
    group: int = 0,
    threads: list[int] | None = None,
) -> np.ndarray:
    """CODIF frames for complex ``samples`` (nsamp, nchan, npol) already scaled to the
    code range; ``start_frame`` counts frames since ``epoch`` (half-years since
    2000). Returns (nframes * npol, 64 + data bytes) uint8."""
    nsamp, nchan, npol = samples.shape
    threads = list(range(npol)) if threads is None else list(threads)
    if len(threads) != npol:
        raise ConfigError(f"{len(threads)} CODIF threads for {npol} polarisations")
    if nsamp % samples_per_frame:
        raise ConfigError(f"{nsamp} samples is not a multiple of {samples_per_frame} per frame")
    nframes = nsamp // samples_per_frame
    parts = np.stack([samples.real, samples.imag], axis=-1).astype(np.float32)
    parts = parts.reshape(nframes, samples_per_frame, nchan, npol, 2).transpose(0, 3, 1, 2, 4)
    data = _vdif.pack(parts.reshape(nframes * npol, -1), nbit)
    absf = start_frame + np.repeat(np.arange(nframes, dtype=np.int64), npol)
    seconds = (absf // frames_per_period) * period_s
    values = {
        "frame": absf % frames_per_period, "seconds": seconds, "complex": 1,
        "station": station, "epoch": epoch, "data_len8": data.shape[1] // 8,
        "bits_per_sample": nbit, "version": 1, "group": group,
        "thread": np.tile(threads, nframes), "nchan_m1": nchan - 1, "block_len": 1,
        "period": period_s, "total_samples": samples_per_frame * frames_per_period,
        "sync": SYNC,
    }  # fmt: skip
    words = np.zeros((nframes * npol, 8), dtype=np.uint64)
    for name, value in values.items():
        w, lo, width = FIELDS[name]
        v = np.broadcast_to(np.asarray(value, dtype=np.uint64), (nframes * npol,))
        words[:, w] |= (v & np.uint64((1 << width) - 1)) << np.uint64(lo)
    out = np.empty((nframes * npol, HEADER_LEN + data.shape[1]), dtype=np.uint8)
    out[:, :HEADER_LEN] = words.view(np.uint8)
    out[:, HEADER_LEN:] = data
    return out

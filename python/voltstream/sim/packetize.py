"""Sample arrays to packets and back, in NumPy.

Each packetizer returns one C-contiguous (n, packet_len) uint8 array: the
packets in send order, ready for ``voltstream._core.Sender.send`` or to be
written to a file as is. The depacketizers undo them (for tests and replay).

Quantization: 8-bit VDIF and YNAO round to the nearest integer and clip to
-128..127 (VDIF then stores ``code = value + 128``); 2-bit VDIF picks the
nearest of the levels -3.3359, -1, 1, 3.3359. Scale samples beforehand.
"""

from __future__ import annotations

import numpy as np

from voltstream.errors import ConfigError, FormatError
from voltstream.io import vdif as _vdif

__all__ = [
    "YNAO_DATA_LEN",
    "YNAO_FRAME_LEN",
    "YNAO_HEADER_LEN",
    "YNAO_NCHAN",
    "YNAO_NPOL",
    "YNAO_NSPEC",
    "depacketize_vdif",
    "depacketize_ynao",
    "packetize_vdif",
    "packetize_ynao",
    "vdif_samples_per_frame",
    "ynao_headers",
]

#: The YNAO/ROACH2 frame: a 24-byte header, then 64 spectra x 32 channels x 2 pols
#: x int8 (re, im). ``formats.py`` takes its sizes from here.
YNAO_NSPEC = 64
YNAO_NCHAN = 32
YNAO_NPOL = 2
YNAO_HEADER_LEN = 24
YNAO_DATA_LEN = YNAO_NSPEC * YNAO_NCHAN * YNAO_NPOL * 2
YNAO_FRAME_LEN = YNAO_HEADER_LEN + YNAO_DATA_LEN

_YNAO_HEADER = np.dtype(
    [
        ("sequence", ">u8"),
        ("mjd", ">u4"),
        ("second", ">u4"),
        ("nanosecond", ">u4"),
        ("version", "u1"),
        ("subband", "u1"),
        ("nchan", ">u2"),
    ]
)
assert _YNAO_HEADER.itemsize == YNAO_HEADER_LEN


def _parts(samples: np.ndarray, complex_data: bool) -> np.ndarray:
    """(..., ) samples -> (..., ndim) float64 real parts."""
    if complex_data:
        return np.stack([samples.real, samples.imag], axis=-1).astype(np.float64)
    if np.iscomplexobj(samples):
        raise ConfigError("real VDIF needs real samples; pass complex_data=True for complex ones")
    return np.asarray(samples, dtype=np.float64)[..., None]


def vdif_samples_per_frame(nchan: int, nbit: int, complex_data: bool, target: int = 8000) -> int:
    """Largest power-of-two samples per frame with a data array of <= ``target``
    bytes (at least one 8-byte unit)."""
    bits = nchan * (2 if complex_data else 1) * nbit
    spf = 1
    while (spf * 2 * bits) // 8 <= target:
        spf *= 2
    while (spf * bits) % 64:
        spf *= 2
    return spf


def packetize_vdif(
    samples: np.ndarray,
    *,
    frames_per_second: int,
    nbit: int = 8,
    complex_data: bool | None = None,
    samples_per_frame: int | None = None,
    start_seconds: int = 0,
    start_frame: int = 0,
    ref_epoch: int = 0,
    station: int = 0,
    threads: list[int] | None = None,
    legacy: bool = False,
) -> np.ndarray:
    """VDIF frames for ``samples`` (nsamp, nchan, npol), one thread per pol.

    Frames go out time-major, then thread (frame k of every thread before
    frame k+1). ``nsamp`` must be a multiple of ``samples_per_frame``.
    Returns (nframes * npol, frame_len) uint8.
    """
    samples = np.asarray(samples)
    if samples.ndim != 3:
        raise ConfigError(f"samples must be (nsamp, nchan, npol), got shape {samples.shape}")
    nsamp, nchan, npol = samples.shape
    if complex_data is None:
        complex_data = bool(np.iscomplexobj(samples))
    if nbit not in _vdif.NBITS:
        raise ConfigError(f"VDIF packetizer writes {_vdif.NBITS} bits, not {nbit}")
    threads = list(range(npol)) if threads is None else [int(t) for t in threads]
    if len(threads) != npol:
        raise ConfigError(f"{len(threads)} thread ids given for {npol} polarisations")
    ndim = 2 if complex_data else 1
    spf = samples_per_frame or vdif_samples_per_frame(nchan, nbit, complex_data)
    bits = spf * nchan * ndim * nbit
    if bits % 64:
        raise ConfigError(
            f"{spf} samples x {nchan} channels x {ndim} x {nbit} bits is not a whole number of "
            "8-byte words; choose another samples_per_frame"
        )
    if nsamp % spf:
        raise ConfigError(f"{nsamp} samples is not a multiple of {spf} samples per frame")
    nframes = nsamp // spf
    hlen = _vdif.LEGACY_HEADER_LEN if legacy else _vdif.HEADER_LEN
    frame_len = hlen + bits // 8
    # (frame, pol, spf, nchan, ndim): packet order, then stored sample order.
    parts = _parts(samples, complex_data).reshape(nframes, spf, nchan, npol, ndim)
    parts = parts.transpose(0, 3, 1, 2, 4).reshape(nframes * npol, -1)
    out = np.empty((nframes * npol, frame_len), dtype=np.uint8)
    out[:, hlen:] = _vdif.pack(parts, nbit)
    absf = start_seconds * frames_per_second + start_frame + np.arange(nframes)
    sec, frm = np.divmod(absf, frames_per_second)
    out[:, :hlen] = _vdif.encode_headers(
        seconds=np.repeat(sec, npol),
        frame=np.repeat(frm, npol),
        thread=np.tile(threads, nframes),
        frame_len=frame_len,
        nchan=nchan,
        bits_per_sample=nbit,
        complex_data=complex_data,
        ref_epoch=ref_epoch,
        station=station,
        legacy=legacy,
    )
    return out


def depacketize_vdif(packets: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Inverse of :func:`packetize_vdif` for packets in its order: returns
    (headers, samples (nsamp, nchan, npol) complex64 or float32)."""
    packets = np.atleast_2d(np.asarray(packets, dtype=np.uint8))
    h = _vdif.decode_headers(packets)
    threads = list(dict.fromkeys(h["thread"].tolist()))
    npol = len(threads)
    if len(packets) % npol or (h["thread"] != np.tile(threads, len(packets) // npol)).any():
        raise FormatError("VDIF packets are not in time-major, thread-minor order")
    hlen = _vdif.LEGACY_HEADER_LEN if h["legacy"][0] else _vdif.HEADER_LEN
    nchan, nbit = int(h["nchan"][0]), int(h["bits_per_sample"][0])
    ndim = 2 if h["complex"][0] else 1
    vals = _vdif.unpack(packets[:, hlen:], nbit)
    nframes = len(packets) // npol
    vals = vals.reshape(nframes, npol, -1, nchan, ndim).transpose(0, 2, 3, 1, 4)
    vals = np.ascontiguousarray(vals.reshape(-1, nchan, npol, ndim), dtype=np.float32)
    return h, (vals.view(np.complex64)[..., 0] if ndim == 2 else vals[..., 0])


def packetize_ynao(
    samples: np.ndarray,
    *,
    start_sequence: int = 0,
    mjd: int = 60000,
    second: int = 0,
    nanosecond: int = 0,
    tsamp_s: float = 0.25e-6,
    subband: int = 0,
) -> np.ndarray:
    """YNAO frames for complex ``samples`` (nsamp, 32, 2), or int8 (nsamp, 32, 2, 2)
    re/im taken as they are (a frame's own bytes: no rounding, no float copy of a
    long stream); nsamp a multiple of 64. Frame k has sequence ``start_sequence + k``
    and the time of its first sample (start + 64 k tsamp). Returns (nframes, 8216)
    uint8."""
    samples = np.asarray(samples)
    int8 = samples.dtype == np.int8 and samples.shape[1:] == (YNAO_NCHAN, YNAO_NPOL, 2)
    if not int8 and (samples.ndim != 3 or samples.shape[1:] != (YNAO_NCHAN, YNAO_NPOL)):
        raise ConfigError(f"YNAO frames carry (nsamp, 32, 2) samples, got shape {samples.shape}")
    if samples.shape[0] % YNAO_NSPEC:
        raise ConfigError(f"{samples.shape[0]} samples is not a multiple of 64 spectra per frame")
    if not (0 <= second < 86400 and 0 <= nanosecond < 1_000_000_000):
        raise ConfigError("YNAO start time needs 0 <= second < 86400, 0 <= nanosecond < 1e9")
    nframes = samples.shape[0] // YNAO_NSPEC
    out = np.empty((nframes, YNAO_FRAME_LEN), dtype=np.uint8)
    q = samples if int8 else np.clip(np.rint(_parts(samples, True)), -128, 127).astype(np.int8)
    out[:, YNAO_HEADER_LEN:] = q.reshape(nframes, YNAO_DATA_LEN).view(np.uint8)
    k = np.arange(nframes, dtype=np.int64)
    # Integer nanoseconds from the start keep the stamps exact for long runs.
    ns_total = (int(second) * 1_000_000_000 + int(nanosecond)) + np.rint(
        k * (YNAO_NSPEC * tsamp_s * 1e9)
    ).astype(np.int64)
    days, ns_of_day = np.divmod(ns_total, 86400 * 1_000_000_000)
    hdr = np.zeros(nframes, dtype=_YNAO_HEADER)
    hdr["sequence"] = start_sequence + k
    hdr["mjd"] = mjd + days
    hdr["second"] = ns_of_day // 1_000_000_000
    hdr["nanosecond"] = ns_of_day % 1_000_000_000
    hdr["version"] = 1
    hdr["subband"] = subband
    hdr["nchan"] = YNAO_NCHAN
    out[:, :YNAO_HEADER_LEN] = hdr.view(np.uint8).reshape(nframes, YNAO_HEADER_LEN)
    return out


def ynao_headers(packets: np.ndarray) -> dict[str, np.ndarray]:
    """Header fields of each YNAO packet, as arrays."""
    packets = np.atleast_2d(np.asarray(packets, dtype=np.uint8))
    if packets.shape[1] < YNAO_HEADER_LEN:
        raise FormatError("YNAO packets need at least 24 header bytes")
    hdr = np.ascontiguousarray(packets[:, :YNAO_HEADER_LEN]).view(_YNAO_HEADER)[:, 0]
    return {name: hdr[name].astype(np.int64) for name in _YNAO_HEADER.names or ()}


def depacketize_ynao(packets: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Inverse of :func:`packetize_ynao`: (headers, samples (nsamp, 32, 2) complex64)."""
    packets = np.atleast_2d(np.asarray(packets, dtype=np.uint8))
    if packets.shape[1] != YNAO_FRAME_LEN:
        raise FormatError(f"YNAO packets are {YNAO_FRAME_LEN} bytes, got {packets.shape[1]}")
    h = ynao_headers(packets)
    data = np.ascontiguousarray(packets[:, YNAO_HEADER_LEN:]).view(np.int8).astype(np.float32)
    data = data.reshape(-1, YNAO_NCHAN, YNAO_NPOL, 2)
    return h, np.ascontiguousarray(data).view(np.complex64)[..., 0]

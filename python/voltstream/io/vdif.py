"""VDIF files: concatenated VDIF frames (VDIF v1.0, EDV 0; legacy headers too).

(Over 500 lines for one format: the frame table, the sample widths and the reader
share the header view and the time arithmetic; a second reader kind should split it.)

``open_vdif(path)`` checks every frame header, maps threads to polarisations
(ascending thread id, unless ``threads=`` gives the order; ``select=`` reads some
threads only, in its order, the others' frames left out), and yields samples
in (time, channel, pol) blocks: complex64 for complex data, float32 for real.

VDIF records neither the sky frequency nor the sample rate, so the reader takes
them from keyword arguments or from a JSON sidecar next to the file
(``<file>.json``, written by :func:`write_sidecar`) with the keys ``freq_mhz``
(band centre), ``bw_mhz`` (signed bandwidth of one thread's channels),
``frames_per_second`` (per thread) and optionally ``source``, ``telescope``,
``threads`` and ``npol`` (the polarisations the threads carry, where they also
carry blocks of channels: io/vdif_threads.py; `fold` reads it). Keyword
arguments win over the sidecar. Without ``frames_per_second`` the rate is
derived from ``bw_mhz``, or else from the frame numbers when the file spans a
second boundary. Missing frames and frames flagged invalid read as zeros, are
counted (``missing_frames``, ``invalid_frames``) and are marked lost: a block of
``read_blocks`` that touches one is yielded as ``(block, valid)``, so a fold
leaves those samples out and lowers the weights (as for lost packets).

Sample mapping (see docs/formats.md; VDIF spec section 10: offset binary, all
zeros lowest): 16-, 8- and 4-bit parts are ``value = code - 2**(nbit - 1)``; 2-bit
parts use the standard VDIF levels (-3.3359, -1, +1, +3.3359) for codes 0..3;
1-bit parts are the sign, 0 -> -1 and 1 -> +1. Parts fill each 32-bit word from
the lowest bits up (so a 16-bit part is a little-endian uint16). Other widths the
spec allows (3, 5, 32, ...) are refused: no digitiser we know writes them.
``read_packed`` hands out the frames' bytes as stored (the GPU unpacks them).

Threads may start and end on different frames or seconds (as stations write
them): the file's span is from its earliest to its latest valid frame, and a
thread's frames outside its own run read as missing. The frame table costs 8
bytes a cell, so a span whose table would outgrow the file itself is refused,
naming the frame whose header puts it far from the rest (a corrupt header, not
data to allocate for).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from voltstream.config_files import read_json_object
from voltstream.dsp.packed import PackedLayout
from voltstream.errors import ConfigError, FormatError, TruncatedFileError
from voltstream.observation import Observation

__all__ = [
    "GPU_NBITS",
    "HEADER_LEN",
    "LEGACY_HEADER_LEN",
    "LEVELS_2BIT",
    "NBITS",
    "VdifFile",
    "decode_headers",
    "encode_headers",
    "open_vdif",
    "pack",
    "ref_epoch_mjd",
    "unpack",
    "write_sidecar",
]

HEADER_LEN = 32
LEGACY_HEADER_LEN = 16
LEVELS_2BIT = np.array([-3.3359, -1.0, 1.0, 3.3359], dtype=np.float32)
LEVELS_1BIT = np.array([-1.0, 1.0], dtype=np.float32)
#: Sample widths read and written: those digitisers use (the spec allows 1..32).
NBITS = (1, 2, 4, 8, 16)
#: The widths the GPU's packed unpack reads (dsp/packed.py): a capture chunk's or a
#: file's frames of these go to the GPU as they are; the CPU decodes every width.
GPU_NBITS = (2, 4, 8)
# Decision thresholds halfway between the 2-bit levels, so each level maps to itself.
_THRESH_2BIT = np.array([-(1 + 3.3359) / 2, 0.0, (1 + 3.3359) / 2])
_MJD_1858 = _dt.date(1858, 11, 17).toordinal()


def ref_epoch_mjd(epoch: int) -> int:
    """MJD of a VDIF reference epoch (half-years since 2000-01-01)."""
    d = _dt.date(2000 + epoch // 2, 1 + 6 * (epoch % 2), 1)
    return d.toordinal() - _MJD_1858


def _bits(words: np.ndarray, word: int, lo: int, width: int) -> np.ndarray:
    return (words[:, word] >> np.uint32(lo)) & np.uint32((1 << width) - 1)


def decode_headers(frames: np.ndarray) -> dict[str, np.ndarray]:
    """Header fields of each row of ``frames`` ((n, >=16) uint8), as arrays."""
    frames = np.asarray(frames, dtype=np.uint8)
    if frames.ndim != 2 or frames.shape[1] < LEGACY_HEADER_LEN:
        raise FormatError("VDIF headers need rows of at least 16 bytes")
    words = np.ascontiguousarray(frames[:, :16]).view("<u4").astype(np.uint32)
    h = {
        "invalid": _bits(words, 0, 31, 1).astype(bool),
        "legacy": _bits(words, 0, 30, 1).astype(bool),
        "seconds": _bits(words, 0, 0, 30).astype(np.int64),
        "ref_epoch": _bits(words, 1, 24, 6).astype(np.int64),
        "frame": _bits(words, 1, 0, 24).astype(np.int64),
        "version": _bits(words, 2, 29, 3).astype(np.int64),
        "nchan": (1 << _bits(words, 2, 24, 5).astype(np.int64)),
        "frame_len": _bits(words, 2, 0, 24).astype(np.int64) * 8,
        "complex": _bits(words, 3, 31, 1).astype(bool),
        "bits_per_sample": _bits(words, 3, 26, 5).astype(np.int64) + 1,
        "thread": _bits(words, 3, 16, 10).astype(np.int64),
        "station": _bits(words, 3, 0, 16).astype(np.int64),
    }
    edv = np.zeros(len(frames), dtype=np.int64)
    if frames.shape[1] >= HEADER_LEN:
        edv = np.where(h["legacy"], 0, frames[:, 19].astype(np.int64))
    h["edv"] = edv
    return h


def encode_headers(
    *,
    seconds: npt.ArrayLike,
    frame: npt.ArrayLike,
    thread: npt.ArrayLike,
    frame_len: int,
    nchan: int,
    bits_per_sample: int,
    complex_data: bool,
    ref_epoch: int = 0,
    station: int = 0,
    version: int = 1,
    legacy: bool = False,
    invalid: bool = False,
) -> np.ndarray:
    """Headers for n frames as an (n, 32) or, if legacy, (n, 16) uint8 array.

    ``seconds``, ``frame``, ``thread`` and ``invalid`` broadcast to n.
    """
    log2 = int(nchan).bit_length() - 1
    if nchan < 1 or 1 << log2 != nchan or log2 > 31:
        raise ConfigError(f"VDIF nchan must be a power of two, got {nchan}")
    if frame_len % 8 or frame_len <= (LEGACY_HEADER_LEN if legacy else HEADER_LEN):
        raise ConfigError(f"VDIF frame length {frame_len} must exceed the header, in 8-byte units")
    if not 1 <= bits_per_sample <= 32:
        raise ConfigError(f"VDIF bits per sample must be 1..32, got {bits_per_sample}")
    sec, frm, thr, inv = np.broadcast_arrays(
        np.asarray(seconds, np.int64),
        np.asarray(frame, np.int64),
        np.asarray(thread, np.int64),
        np.asarray(invalid, bool),
    )
    if sec.size and (sec.min() < 0 or sec.max() >= 1 << 30):
        raise ConfigError("VDIF seconds must fit 30 bits")
    if frm.size and (frm.min() < 0 or frm.max() >= 1 << 24):
        raise ConfigError("VDIF frame numbers must fit 24 bits")
    if thr.size and (thr.min() < 0 or thr.max() >= 1024):
        raise ConfigError("VDIF thread ids must be 0..1023")
    w = np.zeros((sec.size, 8), dtype="<u4")
    w[:, 0] = (inv.ravel().astype(np.uint32) << 31) | (np.uint32(legacy) << 30) | sec.ravel()
    w[:, 1] = (np.uint32(ref_epoch & 63) << 24) | frm.ravel().astype(np.uint32)
    w[:, 2] = (np.uint32(version & 7) << 29) | (np.uint32(log2) << 24) | np.uint32(frame_len // 8)
    w[:, 3] = (
        (np.uint32(bool(complex_data)) << 31)
        | (np.uint32(bits_per_sample - 1) << 26)
        | (thr.ravel().astype(np.uint32) << 16)
        | np.uint32(station & 0xFFFF)
    )
    out = w.view(np.uint8).reshape(sec.size, 32)
    return np.ascontiguousarray(out[:, :16]) if legacy else out


def unpack(payload: np.ndarray, nbit: int) -> np.ndarray:
    """Decodes (n, P) uint8 data arrays to (n, P * 8 // nbit) float32 parts."""
    payload = np.asarray(payload, dtype=np.uint8)
    if nbit == 16:
        codes16 = np.ascontiguousarray(payload).view("<u2")
        return codes16.astype(np.float32) - np.float32(32768)
    if nbit == 8:
        return payload.astype(np.float32) - np.float32(128)
    if nbit not in (1, 2, 4):
        raise FormatError(
            f"VDIF {nbit}-bit samples are not supported; voltstream reads {_widths()} bits"
        )
    shifts = np.arange(0, 8, nbit, dtype=np.uint8)  # first part in the lowest bits
    codes = (payload[..., None] >> shifts) & np.uint8((1 << nbit) - 1)
    codes = codes.reshape(*payload.shape[:-1], payload.shape[-1] * (8 // nbit))
    if nbit == 4:
        return codes.astype(np.float32) - np.float32(8)
    return (LEVELS_2BIT if nbit == 2 else LEVELS_1BIT)[codes]


def _widths() -> str:
    return ", ".join(map(str, NBITS))


def pack(parts: np.ndarray, nbit: int) -> np.ndarray:
    """Quantizes real parts (..., k) to VDIF codes, packed into (..., k*nbit//8) uint8.

    16-, 8- and 4-bit: round to nearest, clip to the signed range, add 2**(nbit-1).
    2-bit: nearest of the four levels (thresholds at 0 and +-2.16795). 1-bit: the
    sign (code 1 for values >= 0).
    """
    parts = np.asarray(parts)
    if nbit not in NBITS:
        raise ConfigError(f"VDIF packing supports {_widths()} bits, not {nbit}")
    per_byte = max(1, 8 // nbit)
    if parts.shape[-1] % per_byte:
        raise ConfigError(f"{nbit}-bit packing needs a multiple of {per_byte} values per row")
    if nbit == 16:
        c16 = (np.clip(np.rint(parts), -32768, 32767) + 32768).astype("<u2")
        return np.ascontiguousarray(c16).view(np.uint8)
    half = 1 << (nbit - 1)
    if nbit == 2:
        codes = np.digitize(parts, _THRESH_2BIT).astype(np.uint8)
    elif nbit == 1:
        codes = (parts >= 0).astype(np.uint8)
    else:
        codes = (np.clip(np.rint(parts), -half, half - 1) + half).astype(np.uint8)
    if nbit == 8:
        return codes
    c = codes.reshape(*codes.shape[:-1], -1, per_byte)
    shifts = np.arange(0, 8, nbit, dtype=np.uint8)
    return np.bitwise_or.reduce(c << shifts, axis=-1).astype(np.uint8)


def write_sidecar(
    path: str | os.PathLike, obs: Observation, frames_per_second: int, thread_blocks: int = 1
) -> Path:
    """Writes ``<path>.json`` with what VDIF headers cannot say about ``obs``, whose
    channels the threads carry in ``thread_blocks`` blocks (io/vdif_threads.py)."""
    side = Path(str(path) + ".json")
    meta: dict[str, Any] = {
        "freq_mhz": obs.freq_mhz,
        "bw_mhz": obs.bw_mhz / thread_blocks,
        "frames_per_second": int(frames_per_second),
        "source": obs.source,
        "telescope": obs.telescope,
    }
    if thread_blocks > 1:
        meta["npol"] = obs.npol
    side.write_text(json.dumps(meta, indent=1) + "\n")
    return side


class VdifFile:
    """An opened, fully validated VDIF file. Use :func:`open_vdif`."""

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        freq_mhz: float | None = None,
        bw_mhz: float | None = None,
        frames_per_second: int | None = None,
        threads: list[int] | None = None,
        select: list[int] | None = None,
        source: str | None = None,
        telescope: str | None = None,
        sidecar: bool = True,
    ) -> None:
        self.path = Path(path)
        side = Path(str(path) + ".json")
        meta = (
            read_json_object(side, "VDIF sidecar (fix or delete it)") if sidecar else None
        ) or {}
        freq_mhz = freq_mhz if freq_mhz is not None else meta.get("freq_mhz")
        bw_mhz = bw_mhz if bw_mhz is not None else meta.get("bw_mhz")
        fps = frames_per_second if frames_per_second is not None else meta.get("frames_per_second")
        threads = threads if threads is not None else meta.get("threads")
        #: What the sidecar says the threads carry (None: the default rule).
        self.sidecar_npol = meta.get("npol")

        try:
            size = self.path.stat().st_size
        except OSError as e:
            raise FormatError(f"{path}: cannot read VDIF file ({e.strerror})") from e
        if size < LEGACY_HEADER_LEN:
            raise TruncatedFileError(
                f"{path}: {size} bytes is shorter than one VDIF header; is this a VDIF file?"
            )
        raw = np.memmap(self.path, dtype=np.uint8, mode="r")
        first = decode_headers(raw[None, :LEGACY_HEADER_LEN])
        flen = int(first["frame_len"][0])
        hlen = LEGACY_HEADER_LEN if first["legacy"][0] else HEADER_LEN
        if flen <= hlen:
            raise FormatError(
                f"{path}: first VDIF header declares a {flen}-byte frame, no room for data; "
                "is this a VDIF file?"
            )
        if size % flen:
            raise TruncatedFileError(
                f"{path}: {size} bytes is not a whole number of {flen}-byte VDIF frames; "
                f"the last frame is cut after {size % flen} bytes (file truncated?)"
            )
        nframes = size // flen
        self._frames: np.ndarray | None = raw.reshape(nframes, flen)
        h = decode_headers(self._frames[:, : max(hlen, LEGACY_HEADER_LEN)])
        for key in ("frame_len", "legacy", "version", "nchan", "complex", "bits_per_sample"):
            bad = np.flatnonzero(h[key] != h[key][0])
            if bad.size:
                k = int(bad[0])
                raise FormatError(
                    f"{path}: frame {k} (byte {k * flen}) has {key}={h[key][k]}, "
                    f"frame 0 has {h[key][0]}; a VDIF file must keep one layout"
                )
        nbit = int(h["bits_per_sample"][0])
        if nbit not in NBITS:
            raise FormatError(
                f"{path}: {nbit}-bit VDIF is not supported; voltstream reads {_widths()}-bit "
                "samples (the widths digitisers write)"
            )
        nchan = int(h["nchan"][0])
        ndim = 2 if h["complex"][0] else 1
        bits_per_time = nchan * ndim * nbit
        if ((flen - hlen) * 8) % bits_per_time:
            raise FormatError(
                f"{path}: a {flen - hlen}-byte data array does not hold whole samples of "
                f"{nchan} channels x {ndim} parts x {nbit} bits"
            )
        spf = (flen - hlen) * 8 // bits_per_time

        found = sorted(set(h["thread"].tolist()))
        rows = np.arange(nframes)  # the frames read, by their place in the file
        if select is not None:  # these threads only (fold: one or two polarisations)
            if not set(select) <= set(found):
                raise ConfigError(f"{path}: no thread {sorted(set(select) - set(found))} "
                                  f"(it has threads {found})")  # fmt: skip
            rows = np.flatnonzero(np.isin(h["thread"], select))
            h = {k: v[rows] for k, v in h.items()}
            threads, found = list(select), sorted(select)
        if threads is None:
            threads = found
        threads = [int(t) for t in threads]
        extra = sorted(set(found) - set(threads))
        if extra:
            raise FormatError(
                f"{path}: holds threads {extra} not in threads={threads}; list every thread"
            )
        if len(set(threads)) != len(threads):
            raise ConfigError(f"threads={threads} lists a thread twice")
        npol = len(threads)

        if fps is None and bw_mhz is not None:
            tsamp = 1.0 / (abs(bw_mhz) / nchan * 1e6 * (1 if ndim == 2 else 2))
            fps_f = 1.0 / (tsamp * spf)
            fps = round(fps_f)
            if abs(fps - fps_f) > 1e-6 * fps_f or fps < 1:
                raise ConfigError(
                    f"bandwidth {bw_mhz} MHz gives {fps_f:.6g} frames per second, not a whole "
                    "number; pass frames_per_second="
                )
        if fps is None:
            if h["seconds"].max() > h["seconds"].min():
                fps = int(h["frame"].max()) + 1
            else:
                raise ConfigError(
                    f"{path}: cannot tell the VDIF frame rate (the file is within one second); "
                    "pass frames_per_second= or bw_mhz=, or add them to a sidecar "
                    f"{side.name} (see voltstream.io.vdif.write_sidecar)"
                )
        fps = int(fps)
        if fps < 1:
            raise ConfigError(f"frames_per_second must be positive, got {fps}")
        if h["frame"].max() >= fps:
            k = int(np.argmax(h["frame"]))
            raise FormatError(
                f"{path}: frame {k} has frame number {h['frame'][k]} >= {fps} frames per second; "
                "the frame rate given is wrong or the file is corrupt"
            )
        if freq_mhz is None:
            raise ConfigError(
                f"{path}: VDIF does not record the sky frequency; pass freq_mhz= (and bw_mhz=) "
                f"or write a sidecar {side.name} (voltstream.io.vdif.write_sidecar)"
            )
        tsamp_s = 1.0 / (fps * spf)
        if bw_mhz is None:
            bw_mhz = nchan / tsamp_s / 1e6 / (1 if ndim == 2 else 2)

        ref_epochs = np.unique(h["ref_epoch"])
        if ref_epochs.size != 1:
            raise FormatError(f"{path}: frames use several reference epochs {ref_epochs.tolist()}")
        absf = h["seconds"] * fps + h["frame"]
        valid = ~h["invalid"]
        # The span is that of the valid frames (an invalid frame's header may be
        # fill); invalid frames outside it are left out, as they would read as zeros.
        timed = absf[valid] if valid.any() else absf
        first_idx, last_idx = int(timed.min()), int(timed.max())
        ntime = last_idx - first_idx + 1
        npol_cells = ntime * npol
        if npol_cells * 8 > max(size, 8 * nframes):
            raise FormatError(_absurd_span(path, h, absf, valid, flen, ntime, nframes))
        inside = (absf >= first_idx) & (absf <= last_idx)
        tidx = absf - first_idx
        pol_of = {t: i for i, t in enumerate(threads)}
        pol = np.array([pol_of[t] for t in h["thread"].tolist()], dtype=np.int64)
        table = np.full((ntime, npol), -1, dtype=np.int64)
        order = tidx * npol + pol
        uniq, counts = np.unique(order[inside], return_counts=True)
        if (counts > 1).any():
            dup = int(uniq[np.argmax(counts > 1)])
            raise FormatError(
                f"{path}: frame {dup // npol} of thread {threads[dup % npol]} appears twice"
            )
        table.reshape(-1)[order[valid]] = rows[valid]
        self.invalid_frames = int((~valid).sum())
        self.missing_frames = int(npol_cells - inside.sum())
        self.threads = threads
        self.frames_per_second = fps
        self.samples_per_frame = spf
        self.station = int(h["station"][0])
        self.nsamp = ntime * spf
        self.frame_len = flen
        self.header_len = hlen
        self._table = table
        self._hlen = hlen
        self._nbit = nbit
        self._ndim = ndim

        sec0, frame0 = divmod(first_idx, fps)
        mjd0 = ref_epoch_mjd(int(ref_epochs[0]))
        day, sec = divmod(int(sec0), 86400)
        self.obs = Observation(
            nchan=nchan,
            npol=npol,
            freq_mhz=float(freq_mhz),
            bw_mhz=float(bw_mhz),
            tsamp_s=tsamp_s,
            start_mjd=mjd0 + day,
            start_sec=sec + frame0 / fps,
            source=source or meta.get("source") or "J0000+0000",
            telescope=telescope or meta.get("telescope") or "voltstream",
            nbit=nbit,
            ndim=ndim,
        )

    def _samples(self, f0: int, f1: int) -> np.ndarray:
        """Samples of frames f0..f1 (time frame indices): (n*spf, nchan, npol)."""
        nchan, ndim, npol = self.obs.nchan, self._ndim, self.obs.npol
        out: np.ndarray = np.zeros((f1 - f0, self.samples_per_frame, nchan, npol, ndim), np.float32)
        for p in range(npol):
            rows = self._table[f0:f1, p]
            have = np.flatnonzero(rows >= 0)
            if have.size:
                data = self._open()[rows[have], self._hlen :]
                vals = unpack(data, self._nbit)
                out[have, :, :, p, :] = vals.reshape(have.size, self.samples_per_frame, nchan, ndim)
        out = out.reshape(-1, nchan, npol, ndim)
        if ndim == 2:
            return out.view(np.complex64)[..., 0]
        return out[..., 0]

    def read_blocks(self, nsamp: int) -> Iterator[np.ndarray | tuple[np.ndarray, np.ndarray]]:
        """Yields (nsamp, nchan, npol) blocks in time order; the last may be shorter.

        A block touching a missing or invalid frame comes as ``(block, valid)``.
        """
        if nsamp < 1:
            raise ConfigError(f"block length must be at least one sample, got {nsamp}")
        spf = self.samples_per_frame
        for s0 in range(0, self.nsamp, nsamp):
            s1 = min(s0 + nsamp, self.nsamp)
            f0, f1 = s0 // spf, -(-s1 // spf)
            cut = slice(s0 - f0 * spf, s1 - f0 * spf)
            block = self._samples(f0, f1)[cut]
            valid = self.valid_samples(f0, f1)
            yield block if valid is None else (block, valid[cut])

    def valid_samples(self, f0: int, f1: int) -> np.ndarray | None:
        """Per sample of time frames f0..f1: False where a thread's frame is absent.

        None when every frame is there.
        """
        have = (self._table[f0:f1] >= 0).all(axis=1)
        if have.all():
            return None
        return np.repeat(have, self.samples_per_frame)

    @property
    def frame_data_len(self) -> int:
        return self.frame_len - self._hlen

    @property
    def frame_table(self) -> np.ndarray:
        """(time frames, npol) int64: the file's frame index (byte offset / frame_len) of
        each thread's frame of each time, -1 where it is absent or flagged invalid."""
        return self._table

    @property
    def regular(self) -> bool:
        """True when the file is its frames in time order, every thread present and
        valid in each time step, in polarisation order: frame k of the file is time
        frame ``k // npol`` of polarisation ``k % npol``, so byte ranges of whole time
        frames can be read as they are, headers included."""
        t = self._table.reshape(-1)
        return bool((t == np.arange(t.size)).all())

    def packed_layout(self) -> PackedLayout:
        """Where each sample's bits sit in :meth:`read_packed`'s bytes (GPU unpack)."""
        o = self.obs
        enc = "vdif2" if self._nbit == 2 else "offset"
        return PackedLayout.vdif_frames(
            self._nbit, enc, o.nchan, o.npol, self._ndim, self.samples_per_frame
        )

    def read_packed(
        self, f0: int, f1: int, out: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """The data arrays of time frames f0..f1 as stored: (f1-f0, npol, frame_data_len)
        uint8 (absent frames zero), and :meth:`valid_samples` of them.

        ``out`` (e.g. pinned memory) receives the bytes when given.
        """
        if not 0 <= f0 <= f1 <= self._table.shape[0]:
            raise ConfigError(f"frames {f0}..{f1} are outside 0..{self._table.shape[0]}")
        shape = (f1 - f0, self.obs.npol, self.frame_data_len)
        if out is None:
            out = np.empty(shape, dtype=np.uint8)
        out = out.reshape(-1)[: int(np.prod(shape))].reshape(shape)
        rows = self._table[f0:f1]
        have = rows >= 0
        out[have] = self._open()[rows[have], self._hlen :]
        out[~have] = 0
        return out, self.valid_samples(f0, f1)

    def read(self) -> np.ndarray:
        """The whole file as one (nsamp, nchan, npol) array."""
        return self._samples(0, self._table.shape[0])

    def close(self) -> None:
        self._frames = None

    def _open(self) -> np.ndarray:
        """The file's frames; a clear error after ``close``."""
        if self._frames is None:
            raise ConfigError(f"{self.path} was closed: open it again to read")
        return self._frames

    def __enter__(self) -> VdifFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _absurd_span(
    path: Any,
    h: dict[str, np.ndarray],
    absf: np.ndarray,
    valid: np.ndarray,
    flen: int,
    ntime: int,
    nframes: int,
) -> str:
    """Why a span is refused: the valid frame furthest in time from the median one."""
    idx = np.flatnonzero(valid) if valid.any() else np.arange(len(absf))
    mid = np.median(absf[idx])
    k = int(idx[np.argmax(np.abs(absf[idx] - mid))])
    return (
        f"{path}: frame {k} (byte {k * flen}) has seconds={h['seconds'][k]}, "
        f"frame={h['frame'][k]}, thread={h['thread'][k]}: {abs(int(absf[k] - mid))} frames "
        f"from the middle of the file, making {nframes} frames span {ntime} frame times; "
        "its header is corrupt (or the frame rate is wrong): cut the frame out or fix it"
    )  # fmt: skip


def open_vdif(path: str | os.PathLike, **opts: Any) -> VdifFile:
    """Opens and validates a VDIF file; see the module docs for ``opts``."""
    return VdifFile(path, **opts)

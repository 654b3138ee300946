"""SIGPROC filterbank files (.fil): what `voltstream filterbank` writes.

The header (Lorimer's SIGPROC manual, filterbank_header.c) is a run of keywords, each
a string: a little-endian int32 length then its characters, followed by its value
(int32 or float64 by keyword, or another string), between HEADER_START and
HEADER_END. Written here: telescope_id and machine_id (0: no registered id for
voltstream), data_type 1 (filterbank), rawdatafile and source_name (at most 80
characters each, as SIGPROC's and PRESTO's readers take; never empty, which they
read as the header's end: "unknown" instead), fch1 (MHz, centre of the
first channel), foff (MHz, signed: negative when channels descend), nchans, nbits
(8: unsigned bytes, 32: IEEE float), nifs (polarisation products), tstart (MJD of the
first sample, float64: about a microsecond's precision) and tsamp (s). Only keywords
every common reader knows: an unknown one makes some (your, PRESTO) misread the rest.

Data follow the header: time, then IF, then channel (``(nsamp, nifs, nchans)`` in C
order), little-endian.

Reading (``read_filterbank``, ``SigprocFile``): any header the SIGPROC manual allows,
its keywords in any order (int32, float64, one-byte or string values by keyword;
FREQUENCY_START .. FREQUENCY_END with one ``fchannel`` per channel instead of fch1 and
foff); the data as a memory map, so a long file is read a gulp at a time. What the
search takes: 8- or 32-bit samples and one IF (others are refused in one line).
"""

from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np

from voltstream.errors import FormatError, TruncatedFileError
from voltstream.observation import Observation

__all__ = ["SigprocFile", "SigprocWriter", "read_filterbank", "sigproc_header"]

#: The longest string SIGPROC's readers accept.
MAX_STRING = 80


def _string(text: str) -> bytes:
    # An empty string reads as the end of the header in SIGPROC's readers (your's too).
    raw = (text or "unknown").encode("ascii", "replace")[:MAX_STRING]
    return struct.pack("<i", len(raw)) + raw


def sigproc_header(obs: Observation, nifs: int, rawdatafile: str) -> bytes:
    """The header of a filterbank of ``obs``' channels (``obs.chan_freqs_mhz`` are the
    channels' centres, ``obs.tsamp_s`` the sampling, ``obs.start_*`` the first
    sample's time, ``obs.nbit`` 8 or 32) with ``nifs`` products."""
    if obs.nbit not in (8, 32):
        raise FormatError(f"SIGPROC filterbank of {obs.nbit}-bit samples: use 8 or 32")
    out = [_string("HEADER_START")]

    def key(name: str, fmt: str, value: object) -> None:
        out.append(_string(name))
        out.append(_string(str(value)) if fmt == "s" else struct.pack("<" + fmt, value))

    key("telescope_id", "i", 0)
    key("machine_id", "i", 0)
    key("data_type", "i", 1)
    key("rawdatafile", "s", rawdatafile)
    key("source_name", "s", obs.source)
    key("fch1", "d", float(obs.chan_freqs_mhz[0]))
    key("foff", "d", float(obs.chan_bw_mhz))
    key("nchans", "i", int(obs.nchan))
    key("nbits", "i", int(obs.nbit))
    key("nifs", "i", int(nifs))
    key("tstart", "d", obs.start_mjd + obs.start_sec / 86400.0)
    key("tsamp", "d", float(obs.tsamp_s))
    out.append(_string("HEADER_END"))
    return b"".join(out)


class SigprocWriter:
    """A .fil file: the header at once, then rows of samples as they come."""

    def __init__(
        self, path: str | os.PathLike[str], obs: Observation, nifs: int, rawdatafile: str = ""
    ) -> None:
        self.path, self.obs, self.nifs = Path(path), obs, int(nifs)
        self.dtype = np.dtype("<f4") if obs.nbit == 32 else np.dtype(np.uint8)
        header = sigproc_header(obs, self.nifs, rawdatafile)
        try:
            self._f: BinaryIO = open(self.path, "wb")  # noqa: SIM115 - closed by close()
            self._f.write(header)
        except OSError as e:
            raise FormatError(f"cannot write {path}: {e.strerror}") from e
        self.samples = 0

    def write_row(
        self, data: np.ndarray, scale: object = None, offset: object = None,
        weight: object = None, nsamp: int | None = None,
    ) -> None:  # fmt: skip
        """The first ``nsamp`` (None: all) samples of ``data`` (n, nifs, nchans), in the
        file's type; scale, offset and weight are PSRFITS' (a .fil has none)."""
        if data.shape[1:] != (self.nifs, self.obs.nchan) or data.dtype != self.dtype:
            raise FormatError(f"a row of {data.dtype} {data.shape} does not fit a .fil of "
                              f"{self.nifs} IFs x {self.obs.nchan} channels")  # fmt: skip
        data = data if nsamp is None else data[:nsamp]
        self._f.write(np.ascontiguousarray(data, self.dtype).tobytes())
        self.samples += data.shape[0]

    def close(self) -> None:
        self._f.close()


# The SIGPROC manual's header keywords (filterbank_header.c, read_header.c) by the
# type of their value; FREQUENCY_START/FREQUENCY_END carry none.
_INT_KEYS = frozenset((
    "telescope_id", "machine_id", "data_type", "barycentric", "pulsarcentric", "nbits",
    "nsamples", "nchans", "nifs", "nbeams", "ibeam", "npuls", "nbins",
))  # fmt: skip
_DOUBLE_KEYS = frozenset((
    "az_start", "za_start", "src_raj", "src_dej", "tstart", "tsamp", "fch1", "foff",
    "refdm", "period", "fchannel",
))  # fmt: skip
_BYTE_KEYS = frozenset(("signed",))
_STRING_KEYS = frozenset(("source_name", "rawdatafile"))
_FLAG_KEYS = frozenset(("FREQUENCY_START", "FREQUENCY_END"))
_MAX_HEADER = 1 << 20  # no real header comes near; a bound for files that are not SIGPROC


@dataclass
class SigprocFile:
    """A SIGPROC filterbank opened for reading: its header and its samples."""

    path: Path
    header: dict[str, int | float | str]
    header_bytes: int
    nchans: int
    nifs: int
    nbits: int
    tsamp_s: float
    tstart_mjd: float
    freqs_mhz: np.ndarray  # each channel's centre, in the file's order
    data: np.ndarray = field(repr=False)  # (nsamp, nchans) memory map, the file's type

    @property
    def nsamp(self) -> int:
        return int(self.data.shape[0])

    @property
    def fch1_mhz(self) -> float:
        return float(self.freqs_mhz[0])

    @property
    def foff_mhz(self) -> float:
        return float(self.freqs_mhz[1] - self.freqs_mhz[0]) if self.nchans > 1 else 0.0

    @property
    def source_name(self) -> str:
        return str(self.header.get("source_name", ""))


def _read_string(f: BinaryIO, path: object) -> str:
    raw = f.read(4)
    if len(raw) < 4:
        raise FormatError(f"{path}: the SIGPROC header ends before HEADER_END")
    (n,) = struct.unpack("<i", raw)
    if not 0 < n <= MAX_STRING:
        raise FormatError(f"{path}: not a SIGPROC filterbank (a header string of length {n})")
    text = f.read(n)
    if len(text) < n:
        raise FormatError(f"{path}: the SIGPROC header ends before HEADER_END")
    return text.decode("ascii", "replace")


def _read_header(f: BinaryIO, path: object) -> tuple[dict[str, int | float | str], list[float]]:
    if _read_string(f, path) != "HEADER_START":
        raise FormatError(f"{path}: not a SIGPROC filterbank (no HEADER_START)")
    header: dict[str, int | float | str] = {}
    fchannel: list[float] = []
    while True:
        if f.tell() > _MAX_HEADER:
            raise FormatError(f"{path}: no HEADER_END in the first {_MAX_HEADER} bytes")
        key = _read_string(f, path)
        if key == "HEADER_END":
            return header, fchannel
        if key in _FLAG_KEYS:
            continue
        if key in _STRING_KEYS:
            header[key] = _read_string(f, path)
            continue
        fmt = "<i" if key in _INT_KEYS else "<d" if key in _DOUBLE_KEYS else (
            "<b" if key in _BYTE_KEYS else None)  # fmt: skip
        if fmt is None:
            raise FormatError(f"{path}: unknown SIGPROC header keyword {key!r}")
        raw = f.read(struct.calcsize(fmt))
        if len(raw) < struct.calcsize(fmt):
            raise FormatError(f"{path}: the SIGPROC header ends before HEADER_END")
        (value,) = struct.unpack(fmt, raw)
        if key == "fchannel":
            fchannel.append(float(value))
        else:
            header[key] = value


def read_filterbank(path: str | os.PathLike[str]) -> SigprocFile:
    """Opens a SIGPROC filterbank (module docstring): 8- or 32-bit samples, one IF."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            header, fchannel = _read_header(f, p)
            start = f.tell()
            size = os.fstat(f.fileno()).st_size
    except OSError as e:
        raise FormatError(f"cannot read {path}: {e.strerror}") from e
    for need in ("nchans", "nbits", "tsamp"):
        if need not in header:
            raise FormatError(f"{p}: the SIGPROC header has no {need}")
    nchans, nbits = int(header["nchans"]), int(header["nbits"])
    nifs = int(header.get("nifs", 1))
    tsamp = float(header["tsamp"])
    if nbits not in (8, 32):
        raise FormatError(f"{p}: {nbits}-bit samples; the search reads 8 or 32 (rewrite it "
                          "with voltstream filterbank --nbits 8 or 32)")  # fmt: skip
    if nifs != 1:
        raise FormatError(f"{p}: {nifs} IFs; the search reads total intensity, one IF "
                          "(voltstream filterbank --pol I)")  # fmt: skip
    if nchans < 1 or not (math.isfinite(tsamp) and tsamp > 0):
        raise FormatError(f"{p}: nchans {nchans}, tsamp {tsamp}: not a usable filterbank")
    if fchannel:
        if len(fchannel) != nchans:
            raise FormatError(f"{p}: {len(fchannel)} fchannel values for {nchans} channels")
        freqs = np.array(fchannel)
    elif "fch1" in header and "foff" in header:
        fch1, foff = float(header["fch1"]), float(header["foff"])
        freqs = fch1 + foff * np.arange(nchans)
    else:
        raise FormatError(f"{p}: the SIGPROC header has neither fch1 and foff nor fchannel")
    if not np.all(np.isfinite(freqs) & (freqs > 0)):
        raise FormatError(f"{p}: channel frequencies must be > 0 MHz")
    dtype = np.dtype("<f4") if nbits == 32 else np.dtype(np.uint8)
    row = nchans * dtype.itemsize
    nsamp = (size - start) // row
    if "nsamples" in header and 0 < int(header["nsamples"]) < nsamp:
        nsamp = int(header["nsamples"])
    if nsamp < 1:
        raise TruncatedFileError(f"{p}: no samples after the SIGPROC header")
    data = np.memmap(p, dtype=dtype, mode="r", offset=start, shape=(nsamp, nchans))
    return SigprocFile(
        path=p, header=header, header_bytes=start, nchans=nchans, nifs=nifs, nbits=nbits,
        tsamp_s=tsamp, tstart_mjd=float(header.get("tstart", 0.0)),
        freqs_mhz=freqs, data=data,
    )  # fmt: skip

"""DADA baseband files: the recorder's output and the fold pipeline's input.

(Over 500 lines for one format: its writer and its reader share the key table, the
ORDER axes and the time arithmetic; a multi-file observation is io/dada_sequence.py.)

A DADA file is an ASCII header followed by raw samples.

Header
    ``KEY value`` lines (one per line, the value is the rest of the line after
    the first run of blanks), padded with NUL bytes to ``HDR_SIZE`` bytes, in any
    order. ``#`` starts a comment, on a line of its own or after a value (PSRDADA's
    templates: ``NBIT 8  # number of bits per sample``); blank lines are skipped.
    ``HDR_SIZE`` is 4096 unless the header declares more; readers honour the
    declared size and writers grow it (in 4096-byte steps) when the text needs
    more room. Keys voltstream requires (:data:`REQUIRED_KEYS`, what DSPSR requires):

    ``TELESCOPE``, ``SOURCE``,
    ``FREQ`` centre of the band in MHz,
    ``BW`` total bandwidth in MHz, signed: negative for a lower sideband (sky
    frequency falls as the channel index or baseband frequency rises),
    ``NPOL``, ``NBIT`` (8 or 16, two's complement, little-endian),
    ``TSAMP`` sample interval of one channel in microseconds,
    ``UTC_START`` as ``YYYY-MM-DD-hh:mm:ss`` (integer seconds),
    ``OBS_OFFSET`` bytes of the observation that precede this file's data.

    Defaulted with a warning that names them (:data:`DEFAULTS`, DSPSR's): ``HDR_SIZE``
    4096, ``NCHAN`` 1, ``NDIM`` 1 (2 = complex re/im pairs). ``HEADER DADA``,
    ``HDR_VERSION`` and ``DADA_VERSION`` are written, and not required.
    The writer also writes ``FILE_SIZE`` (data bytes, set at close), ``FILE_NUMBER``,
    ``OBS_OVERLAP``, ``BYTES_PER_SECOND`` and ``RESOLUTION`` (bytes of one sample) as
    PSRDADA's recorder does: baseband needs ``FILE_SIZE``, dada_dbdisk the rate.

    Optional: ``ORDER`` (:data:`ORDERS`, T time, F channel, P polarisation, slowest
    first; a letter of a size-1 axis may be left out; missing means TFP),
    ``PICOSECONDS`` (integer sub-second part of the start, in ps),
    ``MJD_START`` (informative; the start is always taken from ``UTC_START``).

Start time
    The first sample of the file is at
    ``UTC_START + PICOSECONDS * 1e-12 + OBS_OFFSET / bytes_per_second``, where
    ``bytes_per_second = NCHAN * NPOL * NDIM * NBIT / 8 / TSAMP``. It becomes
    ``Observation.start_mjd`` (integer MJD) plus ``start_sec`` (seconds into
    that day). PICOSECONDS is exact in the header; as float64 seconds of the day
    the start keeps ~10 ps resolution, where a float MJD would keep ~1 us.

Data (ORDER TFP)
    Time-major: for each sample, every channel; within a channel, every
    polarisation; within a polarisation, re then im (NDIM 2), or one real value
    (NDIM 1: a real-sampled band, read as float32 blocks that the fold turns into
    complex baseband first, voltstream.dsp.real). Other orders are read through a
    strided view (their ``FILE_SIZE`` gives the time axis's length). A file whose data is not a
    whole number of samples is read with a warning and the partial sample at
    the end ignored (a recorder killed mid-write leaves such files).

Files of one observation (the same UTC_START, each file's OBS_OFFSET where the one
before it ends) are read as one by :mod:`voltstream.io.dada_sequence`.

The reader memory-maps the data, so reading a file of any size takes memory
bounded by the block size asked for.
"""

from __future__ import annotations

import datetime as _dt
import errno
import math
import os
import re
import warnings
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from voltstream.errors import FormatError, RecordError, TruncatedFileError, VoltstreamError
from voltstream.observation import Observation

__all__ = ["DadaReader", "DadaWriter", "REQUIRED_KEYS", "is_dada_header", "open_dada"]

HDR_SIZE = 4096
REQUIRED_KEYS = (
    # What DSPSR requires of a DADA header (with HDR_SIZE for the layout, defaulted
    # to 4096 here); every other key has a default (DEFAULTS), named in a warning.
    "TELESCOPE",
    "SOURCE",
    "FREQ",
    "BW",
    "NPOL",
    "NBIT",
    "TSAMP",
    "UTC_START",
    "OBS_OFFSET",
)
#: Keys a header may leave out, and what the reader takes then (DSPSR's defaults).
DEFAULTS = {"HDR_SIZE": str(HDR_SIZE), "NCHAN": "1", "NDIM": "1"}
_INT_KEYS = ("HDR_SIZE", "NCHAN", "NPOL", "NBIT", "NDIM", "OBS_OFFSET")
_FLOAT_KEYS = ("FREQ", "BW", "TSAMP")
_MJD_EPOCH = _dt.date(1858, 11, 17).toordinal()
_UTC_FORMAT = "%Y-%m-%d-%H:%M:%S"
_DTYPES: dict[int, np.dtype] = {8: np.dtype(np.int8), 16: np.dtype("<i2")}
#: A comment: ``#`` at the start of a line or after a blank, to the end of the line
#: (PSRDADA's templates put one after most values: ``NBIT 8  # bits per sample``).
_COMMENT = re.compile(r"(^|\s)#.*$")


#: The sample orders the reader takes (PSRDADA's baseband writers use TFP; FPT and PFT
#: hold each channel's, or polarisation's, whole time series in turn).
ORDERS = ("TFP", "TPF", "FTP", "FPT", "PTF", "PFT")


def _axes(order: str, nchan: int, npol: int) -> str | None:
    """ORDER as all three axes, slowest first (a size-1 axis the header left out goes
    where it changes nothing), or None for an order this reader cannot take."""
    if len(set(order)) != len(order) or "T" not in order or not set(order) <= set("TFP"):
        return None
    for axis, size in (("F", nchan), ("P", npol)):
        if axis not in order:
            if size != 1:
                return None
            order += axis
    return order if order in ORDERS else None


def _bytes_per_sample(nchan: int, npol: int, ndim: int, nbit: int) -> int:
    return nchan * npol * ndim * nbit // 8


def _split_start(start_mjd: int, start_sec: float) -> tuple[int, int, int]:
    """(mjd, whole seconds, picoseconds), normalised so 0 <= seconds < 86400."""
    whole = math.floor(start_sec)
    ps = round((start_sec - whole) * 1e12)  # the subtraction is exact in float64
    if ps >= 10**12:
        whole, ps = whole + 1, ps - 10**12
    day, sec = divmod(whole, 86400)
    return start_mjd + day, sec, ps


def _rate_text(obs: Observation) -> str:
    """BYTES_PER_SECOND: a whole number where the rate is one (PSRDADA reads it as an
    integer), else the nearest."""
    rate = _bytes_per_sample(obs.nchan, obs.npol, obs.ndim, obs.nbit) / obs.tsamp_s
    return str(round(rate))


def _utc_string(mjd: int, sec: int) -> str:
    day = _dt.date.fromordinal(mjd + _MJD_EPOCH)
    t = _dt.datetime(day.year, day.month, day.day) + _dt.timedelta(seconds=sec)
    return t.strftime(_UTC_FORMAT)


def format_header(obs: Observation, extra: dict | None = None) -> bytes:
    """The NUL-padded header block for ``obs``; ``extra`` keys are appended or override."""
    if obs.nbit not in _DTYPES:
        raise FormatError(f"DADA writer supports NBIT 8 or 16, not {obs.nbit}; requantise first")
    mjd, sec, ps = _split_start(obs.start_mjd, obs.start_sec)
    keys: dict[str, str] = {
        "HEADER": "DADA",
        "HDR_VERSION": "1.0",
        "HDR_SIZE": str(HDR_SIZE),
        "DADA_VERSION": "1.0",
        "TELESCOPE": obs.telescope,
        "SOURCE": obs.source,
        "FREQ": repr(float(obs.freq_mhz)),
        "BW": repr(float(obs.bw_mhz)),
        "NCHAN": str(obs.nchan),
        "NPOL": str(obs.npol),
        "NBIT": str(obs.nbit),
        "NDIM": str(obs.ndim),
        "TSAMP": repr(obs.tsamp_s * 1e6),
        "UTC_START": _utc_string(mjd, sec),
        "PICOSECONDS": str(ps),
        "MJD_START": f"{mjd + (sec + ps * 1e-12) / 86400.0:.15f}",
        "OBS_OFFSET": "0",
        # As PSRDADA's recorder (dada_dbdisk) writes them; FILE_SIZE (data bytes of
        # this file) is rewritten at close, since readers such as baseband need it.
        "FILE_SIZE": "0",
        "FILE_NUMBER": "0",
        "OBS_OVERLAP": "0",
        # PSRDADA's own tools (dada_dbdisk, dada_dbevent) size their work by these.
        "BYTES_PER_SECOND": _rate_text(obs),
        "RESOLUTION": str(_bytes_per_sample(obs.nchan, obs.npol, obs.ndim, obs.nbit)),
        "ORDER": "TFP",
        "INSTRUMENT": "voltstream",
    }
    for k, v in (extra or {}).items():
        keys[str(k).upper()] = str(v)
    if not keys["OBS_OFFSET"].isdigit():
        raise FormatError(f"OBS_OFFSET {keys['OBS_OFFSET']!r} must be a byte count >= 0")
    for k, v in keys.items():
        if not k or any(c.isspace() for c in k) or "\n" in v or "\0" in v or _COMMENT.search(v):
            raise FormatError(
                f"DADA header key {k!r} or its value has blanks, newlines or a ' #' "
                "(which starts a comment)"
            )

    def render(size: int) -> bytes:
        keys["HDR_SIZE"] = str(size)
        return "".join(f"{k:<15} {v}\n" for k, v in keys.items()).encode("ascii")

    size = HDR_SIZE
    while len(text := render(size)) >= size:  # keep at least one NUL as terminator
        size += HDR_SIZE
    return text.ljust(size, b"\0")


class DadaWriter:
    """Writes one DADA file: the header at creation, then TFP samples.

    ``write`` takes an integer array shaped ``(nsamp, nchan, npol, ndim)`` of the
    header's sample type, or bytes already in TFP order (the capture path hands
    over raw chunk memory) holding a whole number of samples.

    ``obs`` start becomes UTC_START/PICOSECONDS. A recorder that splits one
    observation over several files passes the same ``obs`` to each and
    ``extra={"OBS_OFFSET": bytes_before_this_file}``; readers then place each
    file's first sample correctly.
    """

    def __init__(
        self, path: str | os.PathLike, obs: Observation, extra: dict | None = None
    ) -> None:
        self.path = Path(path)
        self.obs = obs
        self.dtype = _DTYPES.get(obs.nbit)
        header = format_header(obs, extra)
        self.extra, self.header_len = dict(extra or {}), len(header)
        self.bytes_per_sample = _bytes_per_sample(obs.nchan, obs.npol, obs.ndim, obs.nbit)
        self.bytes_written = 0
        self.nsamp = 0
        try:
            self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as exc:
            raise VoltstreamError(
                f"cannot create DADA file {self.path}: {exc.strerror}; check the directory"
            ) from exc
        self._write_all(memoryview(header))

    def _write_all(self, buf: memoryview) -> None:
        if self._fd is None:
            raise VoltstreamError(f"DADA file {self.path} is already closed; open a new writer")
        buf = buf.cast("B")
        while len(buf):
            try:
                n = os.write(self._fd, buf)
            except OSError as exc:
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise RecordError(
                        f"disk full writing {self.path} after {self.bytes_written} bytes; "
                        "free space or record to another disk"
                    ) from exc
                raise RecordError(
                    f"write to {self.path} failed after {self.bytes_written} bytes: {exc.strerror}"
                ) from exc
            self.bytes_written += n
            buf = buf[n:]

    def write(self, samples: Any) -> None:  # a numpy array or a bytes-like object
        """Append samples: an array (nsamp, nchan, npol, ndim), or TFP bytes (bytes-like
        or a 1-D uint8/int8 array, as a capture chunk hands them over)."""
        raw_array = isinstance(samples, np.ndarray) and samples.ndim == 1 and samples.itemsize == 1
        if isinstance(samples, np.ndarray) and not raw_array:
            o = self.obs
            want = (o.nchan, o.npol, o.ndim)
            if samples.ndim != 4 or samples.shape[1:] != want:
                raise FormatError(
                    f"samples have shape {samples.shape}; DadaWriter for {self.path} needs "
                    f"(nsamp, {o.nchan}, {o.npol}, {o.ndim})"
                )
            if samples.dtype != self.dtype:
                raise FormatError(
                    f"samples are {samples.dtype}; NBIT {o.nbit} needs {self.dtype}, "
                    "quantise before writing"
                )
            buf = np.ascontiguousarray(samples).data.cast("B")
        else:
            try:
                buf = (np.ascontiguousarray(samples).data if raw_array
                       else memoryview(samples)).cast("B")  # fmt: skip
            except TypeError as exc:
                raise FormatError(
                    f"DadaWriter.write takes a numpy array or bytes, not {type(samples).__name__}"
                ) from exc
        if len(buf) % self.bytes_per_sample:
            raise FormatError(
                f"{len(buf)} bytes is not a whole number of {self.bytes_per_sample}-byte "
                "samples; pass complete samples only"
            )
        self._write_all(buf)
        self.nsamp += len(buf) // self.bytes_per_sample

    def amend(self, **keys: Any) -> None:
        """Header values known only once the data is written (a dump's lost samples):
        rewritten with FILE_SIZE at close, where they fit the header's padding."""
        self.extra.update(keys)

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                self._set_file_size(fd)
                os.close(fd)
            except OSError as exc:
                raise RecordError(
                    f"closing {self.path} failed after {self.bytes_written} bytes: {exc.strerror}"
                ) from exc

    def _set_file_size(self, fd: int) -> None:
        """Rewrites the header with FILE_SIZE = the data bytes written (same header size:
        the value grows by a few digits into the NUL padding; if it could not fit, the
        header keeps FILE_SIZE 0 and readers use the file's length)."""
        data_bytes = self.nsamp * self.bytes_per_sample
        header = format_header(self.obs, {**self.extra, "FILE_SIZE": data_bytes})
        if len(header) == self.header_len:
            os.pwrite(fd, header, 0)

    def __enter__(self) -> DadaWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        fd = getattr(self, "_fd", None)
        if fd is not None:
            os.close(fd)


def parse_header(text: str) -> dict[str, str]:
    """``KEY value`` lines to a dict: comments (whole lines, or after a value) and blank
    lines are skipped; the value is the rest of the line, comment and blanks stripped."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = _COMMENT.sub("", line).split(None, 1)
        if parts:
            out[parts[0]] = parts[1].strip() if len(parts) > 1 else ""
    return out


def is_dada_header(head: bytes) -> bool:
    """Whether ``head`` (a file's first bytes, up to HDR_SIZE) is a DADA header: ASCII
    text whose keys include ``HEADER DADA``, ``HDR_SIZE`` or ``HDR_VERSION`` (comment
    lines may come first, as in PSRDADA's templates)."""
    try:
        text = head.split(b"\0", 1)[0].decode("ascii")
    except UnicodeDecodeError:
        return False
    keys = parse_header(text)
    return keys.get("HEADER") == "DADA" or "HDR_SIZE" in keys or "HDR_VERSION" in keys


def _header_text(raw: bytes, path: Path) -> str:
    text = raw.split(b"\0", 1)[0]
    try:
        decoded = text.decode("ascii")
    except UnicodeDecodeError:
        decoded = ""
    printable = all(c.isprintable() or c in "\t\r\n" for c in decoded)
    keys = parse_header(decoded)
    if not printable or ("HEADER" not in keys and "HDR_SIZE" not in keys):
        raise FormatError(
            f"{path} is not a DADA file: it does not start with an ASCII header "
            "holding 'HEADER DADA'"
        )
    return decoded


def _number(path: Path, header: dict[str, str], key: str, kind: type) -> Any:
    try:
        return kind(header[key])
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise FormatError(
            f"{path}: DADA header {key} is {header[key]!r}, not {what}; fix the header"
        ) from None


def samples_of(raw: np.ndarray) -> np.ndarray:
    """Stored samples (n, nchan, npol, ndim) as a block (n, nchan, npol): complex64 for
    NDIM 2, float32 for real samples (NDIM 1)."""
    if raw.shape[3] == 1:
        return raw[..., 0].astype(np.float32)
    out = np.empty(raw.shape[:3], dtype=np.complex64)
    out.real = raw[..., 0]
    out.imag = raw[..., 1]
    return out


class DadaReader:
    """A DADA file opened for reading; see :func:`open_dada`."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        try:
            size = self.path.stat().st_size
            with open(self.path, "rb") as f:
                raw = f.read(HDR_SIZE)
                header = parse_header(_header_text(raw, self.path))
                if header.get("HEADER", "DADA") != "DADA":
                    raise FormatError(
                        f"{self.path}: HEADER is {header.get('HEADER')!r}, expected DADA; "
                        "this is not a DADA file"
                    )
                hdr_size = HDR_SIZE
                if header.get("HDR_SIZE"):
                    hdr_size = _number(self.path, header, "HDR_SIZE", int)
                if size < hdr_size:
                    raise TruncatedFileError(
                        f"{self.path} is {size} bytes, shorter than its {hdr_size}-byte "
                        "header; the file is truncated"
                    )
                if hdr_size > HDR_SIZE:
                    f.seek(0)
                    header = parse_header(_header_text(f.read(hdr_size), self.path))
        except OSError as exc:
            raise FormatError(f"cannot read {self.path}: {exc.strerror}") from exc
        missing = [k for k in REQUIRED_KEYS if not header.get(k)]
        if missing:
            raise FormatError(
                f"{self.path}: DADA header lacks {missing[0]}; the required keys are "
                + " ".join(REQUIRED_KEYS)
            )
        for k, v in DEFAULTS.items():
            if not header.get(k):
                header[k] = v
                warnings.warn(f"{self.path}: no {k} in the DADA header; using {k} {v}",
                              stacklevel=3)  # fmt: skip
        num: dict[str, float] = {k: _number(self.path, header, k, int) for k in _INT_KEYS}
        num.update({k: _number(self.path, header, k, float) for k in _FLOAT_KEYS})
        if header.get("PICOSECONDS"):
            num["PICOSECONDS"] = _number(self.path, header, "PICOSECONDS", int)
        self.header = header
        self.hdr_size = int(num["HDR_SIZE"])
        nchan, npol, nbit, ndim = (int(num[k]) for k in ("NCHAN", "NPOL", "NBIT", "NDIM"))
        tsamp_us, freq, bw = num["TSAMP"], num["FREQ"], num["BW"]
        order = header.get("ORDER", "TFP").upper()
        problems = [
            (self.hdr_size < 64, f"HDR_SIZE {self.hdr_size} is too small"),
            (nchan < 1 or npol < 1, f"NCHAN {nchan} and NPOL {npol} must be positive"),
            (nbit not in _DTYPES, f"NBIT {nbit} is not supported (use 8 or 16)"),
            (ndim not in (1, 2), f"NDIM {ndim} must be 1 (real) or 2 (complex)"),
            (not tsamp_us > 0 or not math.isfinite(tsamp_us), f"TSAMP {tsamp_us} must be > 0"),
            (bw == 0 or not math.isfinite(bw), f"BW {bw} must be non-zero"),
            (not math.isfinite(freq), f"FREQ {freq} must be finite"),
            (
                _axes(order, nchan, npol) is None,
                f"ORDER {order} is not supported: voltstream reads {', '.join(ORDERS)} "
                "(T time, F channel, P polarisation; a letter of a size-1 axis may be left out)",
            ),
            (num["OBS_OFFSET"] < 0, "OBS_OFFSET must not be negative"),
            (not 0 <= num.get("PICOSECONDS", 0) < 10**12, "PICOSECONDS must be in [0, 1e12)"),
        ]
        for bad, msg in problems:
            if bad:
                raise FormatError(f"{self.path}: {msg}; fix the DADA header")
        try:
            utc = _dt.datetime.strptime(header["UTC_START"], _UTC_FORMAT)
        except ValueError:
            raise FormatError(
                f"{self.path}: UTC_START {header['UTC_START']!r} is not YYYY-MM-DD-hh:mm:ss"
            ) from None
        self.bytes_per_sample = _bytes_per_sample(nchan, npol, ndim, nbit)
        data_bytes = size - self.hdr_size
        file_size = header.get("FILE_SIZE", "")
        if order != "TFP" and file_size.isdigit() and 0 < int(file_size) < data_bytes:
            data_bytes = int(file_size)  # a time axis not outermost: its length must be right
        self.nsamp, partial = divmod(data_bytes, self.bytes_per_sample)
        self.leftover_bytes = partial  # of a partial sample at the end, ignored
        if partial:
            warnings.warn(
                f"{self.path}: {partial} trailing bytes of a partial sample ignored "
                f"(data is not a whole number of {self.bytes_per_sample}-byte samples)",
                stacklevel=3,
            )
        if self.nsamp == 0:
            raise FormatError(f"{self.path} holds no complete samples after its header")

        tsamp_s = tsamp_us * 1e-6
        mjd = utc.date().toordinal() - _MJD_EPOCH
        # Exact rational arithmetic on the header's decimal strings: OBS_OFFSET
        # can be terabytes, and float seconds would lose the picoseconds.
        start = (
            Fraction(utc.hour * 3600 + utc.minute * 60 + utc.second)
            + Fraction(int(num.get("PICOSECONDS", 0)), 10**12)
            + Fraction(int(num["OBS_OFFSET"]), self.bytes_per_sample)
            * Fraction(header["TSAMP"])
            / 10**6
        )
        whole = math.floor(start)
        extra_days, sec = divmod(whole, 86400)
        self.obs = Observation(
            nchan=nchan,
            npol=npol,
            freq_mhz=freq,
            bw_mhz=bw,
            tsamp_s=tsamp_s,
            start_mjd=mjd + extra_days,
            start_sec=sec + float(start - whole),
            source=header["SOURCE"],
            telescope=header["TELESCOPE"],
            nbit=nbit,
            ndim=ndim,
        )
        self._dtype = _DTYPES[nbit]
        self.order = order
        axes = _axes(order, nchan, npol) or "TFP"
        sizes = {"T": self.nsamp, "F": nchan, "P": npol}
        stored = np.memmap(
            self.path,
            dtype=self._dtype,
            mode="r",
            offset=self.hdr_size,
            shape=(*(sizes[a] for a in axes), ndim),
        )
        # Any order is seen as (T, F, P, D); only TFP is a plain view of the bytes (the
        # GPU file path reads TFP bytes straight, see pipeline/file_source.py).
        self._data: np.memmap | None = stored.transpose(
            *(axes.index(a) for a in "TFP"), 3
        )  # fmt: skip

    def read_raw(self, start: int, n: int) -> np.ndarray:
        """Samples ``start .. start+n``: a read-only (n, nchan, npol, ndim) view of the
        file (ORDER TFP), or a copy (other orders)."""
        if start < 0 or n < 0 or start + n > self.nsamp:
            raise FormatError(
                f"{self.path}: samples {start}..{start + n} are outside 0..{self.nsamp}; "
                "ask for a range inside the file"
            )
        raw = self._mapped()[start : start + n]
        # Another order's view is strided: a copy, contiguous as a TFP file's is.
        return raw if self.order == "TFP" else np.ascontiguousarray(raw)

    def _mapped(self) -> np.memmap:
        """The file's samples; a clear error after ``close``."""
        if self._data is None:
            raise FormatError(f"{self.path} was closed: open it again to read")
        return self._data

    def read_blocks(self, nsamp: int, start: int = 0) -> Iterator[np.ndarray]:
        """Blocks (nsamp, nchan, npol), the last one maybe shorter: complex64 for NDIM 2,
        float32 for real samples (NDIM 1, as the VDIF reader gives them: RealToComplex
        makes them complex baseband)."""
        if nsamp < 1:
            raise FormatError(f"block size must be at least one sample, not {nsamp}")
        for s in range(start, self.nsamp, nsamp):
            yield samples_of(self._mapped()[s : s + nsamp])

    def close(self) -> None:
        # Dropping the memmap releases the mapping once no returned view holds it.
        self._data = None

    def __enter__(self) -> DadaReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_dada(path: str | os.PathLike) -> DadaReader:
    """Open a DADA file, check its header and map its data; see the module doc."""
    return DadaReader(path)

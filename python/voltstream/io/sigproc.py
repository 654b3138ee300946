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
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import BinaryIO

import numpy as np

from voltstream.errors import FormatError
from voltstream.observation import Observation

__all__ = ["SigprocWriter", "sigproc_header"]

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

"""PSRFITS search mode: a filterbank as SUBINT rows of NSBLK samples (`voltstream
filterbank -o x.fits`).

PRIMARY is the fold-mode archive's (io/psrfits.py ``primary_hdu``) with OBS_MODE
'SEARCH': STT_IMJD, STT_SMJD and STT_OFFS the first sample's time exactly, OBSFREQ the
centre of the channels (half a fine channel off the coarse band's centre: see
search/filterbank.py), OBSBW signed, OBSNCHAN the output channels, CHAN_DM the DM of
coherent dedispersion (0 without). SUBINT (the last HDU), one row per NSBLK samples:
TSUBINT (NSBLK x TBIN), OFFS_SUB (the row's centre, s from the start), LST_SUB and the
position columns, DAT_FREQ (each channel's centre, MHz, in channel order), DAT_WTS (1,
or 0 for a row whose every sample was lost), DAT_OFFS and DAT_SCL (NPOL x NCHAN,
product-major: ``value = DATA * DAT_SCL + DAT_OFFS``), DATA (TDIM (NCHAN, NPOL, NSBLK):
``(nsblk, npol, nchan)`` in C order; unsigned bytes for NBITS 8, float32 for NBITS 32).
Header: NBITS, NCHAN, NPOL, POL_TYPE (AA+BB, AABB or IQUV), TBIN, NSBLK, CHAN_BW
(signed), NSTOT (the samples written: the last row is padded beyond them with the
quantiser's zero, the channel means), ZERO_OFF 0, SIGNINT 0.

Written row by row: the first row with astropy, each later one appended as the first
row's record with its own values (io/psrfits_append.py's way), NAXIS2 rewritten after
each; NSTOT and SCANLEN at close. A live run's file never sits whole in memory.
"""

from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path
from typing import Any

import numpy as np

from voltstream.errors import FormatError
from voltstream.io.psrfits import _hms_to_deg, _start, primary_hdu
from voltstream.io.psrfits_append import BLOCK, _card, _rewrite_card, _subint_geometry
from voltstream.io.psrfits_tables import col
from voltstream.observation import Observation

__all__ = ["PsrfitsSearchWriter"]

_SIDEREAL = 1.00273781191135448


class PsrfitsSearchWriter:
    """A search-mode file of ``obs``' channels (as io/sigproc.py's writer takes it):
    ``npol`` products of type ``pol_type``, ``nsblk`` samples a row."""

    def __init__(
        self, path: str | os.PathLike[str], obs: Observation, npol: int, pol_type: str,
        nsblk: int, dm: float = 0.0, history: str = "",
    ) -> None:  # fmt: skip
        if obs.nbit not in (8, 32):
            raise FormatError(f"PSRFITS search mode of {obs.nbit}-bit samples: use 8 or 32")
        self.path, self.obs, self.npol, self.pol_type = Path(path), obs, int(npol), pol_type
        self.nsblk, self.dm, self.history = int(nsblk), float(dm), history
        self.dtype = np.dtype(">f4") if obs.nbit == 32 else np.dtype(np.uint8)
        self.rows = 0
        self.samples = 0
        self._rec: np.ndarray | None = None  # the first row's record: later rows' template
        self._geometry: tuple[int, int, int, int, int] | None = None
        over: dict = {}
        self._start = _start(obs, over)
        self._lst0 = self._start.lst
        try:
            with open(self.path, "wb"):
                pass  # the path is writable before any work
        except OSError as e:
            raise FormatError(f"cannot write {path}: {e.strerror}") from e

    @property
    def tsubint_s(self) -> float:
        return self.nsblk * self.obs.tsamp_s

    def write_row(
        self, data: np.ndarray, scale: np.ndarray, offset: np.ndarray, weight: float,
        nsamp: int | None = None,
    ) -> None:  # fmt: skip
        """One row: ``data`` (nsblk, npol, nchan) of which the first ``nsamp`` (None:
        all) are samples, the rest padding; ``scale``/``offset`` (npol, nchan);
        ``weight`` for every channel."""
        n = data.shape[0] if nsamp is None else int(nsamp)
        if data.shape != (self.nsblk, self.npol, self.obs.nchan):
            raise FormatError(f"a row of {data.shape} does not fit {self.nsblk} samples x "
                              f"{self.npol} pols x {self.obs.nchan} channels")  # fmt: skip
        offs_sub = (self.rows + 0.5) * self.tsubint_s
        values = {
            "INDEXVAL": float(self.rows),
            "TSUBINT": self.tsubint_s,
            "OFFS_SUB": offs_sub,
            "LST_SUB": (self._lst0 + offs_sub * _SIDEREAL) % 86400.0,
            "DAT_WTS": np.full(self.obs.nchan, weight, np.float32),
            "DAT_OFFS": np.asarray(offset, np.float32).reshape(-1),
            "DAT_SCL": np.asarray(scale, np.float32).reshape(-1),
            "DATA": np.asarray(data, self.dtype),
        }
        if self._rec is None:
            self._first_row(values)
        else:
            self._append(values)
        self.rows += 1
        self.samples += n

    def _first_row(self, values: dict) -> None:
        from astropy.io import fits

        obs, start = self.obs, self._start
        now = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
        hdus = [primary_hdu(obs, self.dm, self.tsubint_s, now, start, {}, mode="SEARCH"),
                self._subint_hdu(values)]  # fmt: skip
        if self.history:
            hdus[0].header["HISTORY"] = self.history[:70]
        try:
            fits.HDUList(hdus).writeto(self.path, overwrite=True)
        except OSError as exc:
            raise FormatError(f"cannot write PSRFITS file {self.path}: {exc}") from exc
        self._geometry = _subint_geometry(self.path)
        with fits.open(self.path, memmap=False) as hdul:
            self._rec = np.array(hdul["SUBINT"].data[:1]).copy()

    def _subint_hdu(self, v: dict) -> Any:
        from astropy.io import fits

        obs, nchan, npol = self.obs, self.obs.nchan, self.npol
        ra, dec = _hms_to_deg(self._start.ra, True), _hms_to_deg(self._start.dec, False)
        form = "E" if obs.nbit == 32 else "B"
        one = np.zeros(1)
        cols = [
            col("INDEXVAL", "1D", [v["INDEXVAL"]]),
            col("TSUBINT", "1D", [v["TSUBINT"]], "s"),
            col("OFFS_SUB", "1D", [v["OFFS_SUB"]], "s"),
            col("LST_SUB", "1D", [v["LST_SUB"]], "s"),
            col("RA_SUB", "1D", one + ra, "deg"),
            col("DEC_SUB", "1D", one + dec, "deg"),
            *(col(k, "1D", one, "deg") for k in ("GLON_SUB", "GLAT_SUB")),
            *(
                col(k, "1E", one, "deg")
                for k in ("FD_ANG", "POS_ANG", "PAR_ANG", "TEL_AZ", "TEL_ZEN")
            ),  # fmt: skip
            col("DAT_FREQ", f"{nchan}D", obs.chan_freqs_mhz[None], "MHz"),
            col("DAT_WTS", f"{nchan}E", v["DAT_WTS"][None]),
            col("DAT_OFFS", f"{nchan * npol}E", v["DAT_OFFS"][None]),
            col("DAT_SCL", f"{nchan * npol}E", v["DAT_SCL"][None]),
            col(
                "DATA",
                f"{self.nsblk * npol * nchan}{form}",
                v["DATA"][None],
                "Jy",
                f"({nchan},{npol},{self.nsblk})",
            ),  # fmt: skip
        ]
        subint = fits.BinTableHDU.from_columns(cols, name="SUBINT")
        for key, value, comment in [
            ("INT_TYPE", "TIME", "Time axis (TIME, BINPHSPERI, BINLNGASC, etc)"),
            ("INT_UNIT", "SEC", "Unit of time axis (SEC, PHS (0-1), DEG)"),
            ("SCALE", "FluxDen", "Intensity units (FluxDen/RefFlux/Jansky)"),
            ("POL_TYPE", self.pol_type, "Polarisation identifier (e.g., AABBCRCI, AA+BB)"),
            ("NPOL", npol, "Nr of polarisations"),
            ("TBIN", float(obs.tsamp_s), "[s] Time per bin or sample"),
            ("NBIN", 1, "Nr of bins (PSR/CAL mode; else 1)"),
            ("NBIN_PRD", 0, "Nr of bins/pulse period (for gated data)"),
            ("PHS_OFFS", 0.0, "Phase offset of bin 0 for gated data"),
            ("NBITS", int(obs.nbit), "Nr of bits/datum (SEARCH mode data, else 1)"),
            ("ZERO_OFF", 0.0, "Zero offset for SEARCH-mode data"),
            ("SIGNINT", 0, "1 for signed ints in SEARCH-mode data, else 0"),
            ("NSUBOFFS", 0, "Subint offset (Contiguous SEARCH-mode files)"),
            ("NCHAN", nchan, "Number of channels/sub-bands in this file"),
            ("CHAN_BW", float(obs.chan_bw_mhz), "[MHz] Channel/sub-band width"),
            ("REFFREQ", float(obs.freq_mhz), "[MHz] Reference frequency"),
            ("DM", self.dm, "[cm-3 pc] DM for post-detection dedisperion"),
            ("RM", 0.0, "[rad m-2] RM for post-detection deFaraday"),
            ("NCHNOFFS", 0, "Channel/sub-band offset for split files"),
            ("NSBLK", self.nsblk, "Samples/row (SEARCH mode, else 1)"),
            ("NSTOT", 0, "Total number of samples (SEARCH mode, else 0)"),
        ]:
            subint.header[key] = (value, comment)
        return subint

    def _append(self, values: dict) -> None:
        assert self._rec is not None and self._geometry is not None
        rec = self._rec.copy()
        for key, value in values.items():
            rec[key] = np.asarray(value).reshape(rec[key].shape)
        hdr, dat, row_bytes = self._geometry[:3]
        end = dat + self.rows * row_bytes
        with open(self.path, "r+b") as f:
            f.truncate(end)
            f.seek(end)
            f.write(rec.tobytes())
            f.write(b"\0" * (-(end + row_bytes) % BLOCK))
            _rewrite_card(f, hdr, dat, "NAXIS2", _card("NAXIS2", self.rows + 1,
                          "number of rows in table"))  # fmt: skip

    def close(self) -> None:
        """NSTOT and SCANLEN say what was written; a file with no row gets one of
        weight 0 (readers refuse a SUBINT table without rows), NSTOT 0."""
        if self._rec is None:
            shape = (self.nsblk, self.npol, self.obs.nchan)
            zero = np.zeros((self.npol, self.obs.nchan), np.float32)
            self.write_row(np.full(shape, 128 if self.obs.nbit == 8 else 0, self.dtype),
                           zero + 1, zero, 0.0, nsamp=0)  # fmt: skip
        assert self._geometry is not None
        hdr, dat, _, _, primary_end = self._geometry
        with open(self.path, "r+b") as f:
            _rewrite_card(f, hdr, dat, "NSTOT", _card("NSTOT", self.samples,
                          "Total number of samples (SEARCH mode, else 0)"))  # fmt: skip
            scanlen = float(self.samples * self.obs.tsamp_s)
            _rewrite_card(f, 0, primary_end, "SCANLEN", _card("SCANLEN", scanlen,
                          "[s] Requested scan length"))  # fmt: skip
            f.flush()
            os.fsync(f.fileno())

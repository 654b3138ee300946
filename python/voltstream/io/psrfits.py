"""PSRFITS fold-mode archives: what ``voltstream fold`` writes.

Layout follows the PSRFITS definition (Hotan, van Straten & Manchester 2004,
PASA 21, 302, and the "PSRFITS Definition File" template published by ATNF,
http://www.atnf.csiro.au/research/pulsar/psrfits/fitsdef.html; header version
6.1 keys):

- PRIMARY: observation keys (telescope, frequencies, source, start time as
  STT_IMJD + STT_SMJD + STT_OFFS, OBS_MODE = 'PSR' for fold mode).
- HISTORY: one row per processing step, each recording the archive's state
  (NSUB, NPOL, NBIN, NCHAN, DM, DEDISP, DDS_MTHD = 'COHERENT').
- SUBINT: one row per sub-integration with TSUBINT, OFFS_SUB (centre of the
  sub-integration, seconds from the start), PERIOD, DAT_FREQ, DAT_WTS and the
  profiles as int16 ``DATA`` with ``TDIM = (NBIN, NCHAN, NPOL)``; in NumPy
  (C) order that is ``(npol, nchan, nbin)`` per row. The value of bin ``b`` of
  channel ``c`` and polarisation ``p`` is
  ``DATA[p, c, b] * DAT_SCL[p*NCHAN + c] + DAT_OFFS[p*NCHAN + c]``.
- POLYCO: when the fold used a TEMPO polyco, one row per polyco block.
- PSRPARAM: when the fold used a .par file (``archive.par_text``), its text,
  one row per non-blank line in the single fixed-width string column PARAM
  (128A as in the template, wider only if a line is longer).
- COHDDISP: always, since every voltstream archive is coherently dedispersed.
  Keys and columns are those of the PSRFITS template shipped with PSRCHIVE
  (Base/Formats/PSRFITS/psrheader.fits, "Coherent Dedispersion Parameters",
  the layout PSRCHIVE's CoherentDedispersion extension writes): header DOMAIN
  = 'FREQ' (overlap-save in the Fourier domain), CHRPTYPE, DM, DOPPLER (1.0:
  no Doppler correction), DATANBIT and CHRPNBIT (32: the float32 GPU path;
  the CPU reference works in float64), NCHAN (input channels), plus NFFT (the
  header key of the older template); one row per input channel with FREQ,
  BW (signed, MHz), OUT_NCHAN (1: each channel is dedispersed in place),
  OUT_FREQ, OUT_BW, NCHIRP (FFT length, ``archive.coherent_nfft``, 0 when
  unknown), NCYC_POS and NCYC_NEG (samples discarded at the start and end of
  each FFT: ``archive.coherent_discard``, which the fold's plan sets, else
  computed by voltstream.dsp.dedisperse.discard_samples, the Dedisperser's rule).
  read_psrfits returns PSRPARAM as ``par_text`` and NCHIRP as
  ``coherent_nfft`` (None when 0).

Each (sub-integration, polarisation, channel) profile is quantised on its own
scale, so the int16 values reconstruct it within 1/65534 of its range (plus
the float32 rounding of DAT_OFFS, absorbed into the scale).

Choices the definition leaves open: TBIN is PERIOD/NBIN; STT_LST and LST_SUB
are mean sidereal time at the antenna longitude with UT1 taken as UTC (~1 s);
POLYCO REF_PHS holds the whole RPHASE and PRED_PHS the fractional phase each
block predicts at the observation start; a polyco's Doppler factor has no
column and reads back as 0.

Keys voltstream has no measurement for (antenna position, sky position,
receiver) get neutral values; pass ``primary={...}`` to set them. Sky position
defaults to the one a J2000 ``Jhhmm+ddmm`` source name implies.

Written HDU by HDU: PRIMARY, HISTORY and SUBINT here (``_primary_hdu``,
``_history_hdu``, ``_subint_hdu``), the extension tables in io/psrfits_tables.py;
read back by io/psrfits_read.py (``read_psrfits``, re-exported here).
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import re
from collections.abc import Iterable
from typing import Any, BinaryIO, NamedTuple

import numpy as np

from voltstream.errors import FormatError
from voltstream.io.psrfits_read import read_psrfits
from voltstream.io.psrfits_tables import cohddisp_hdu, col, polyco_hdu, psrparam_hdu
from voltstream.observation import FoldedArchive, Observation

__all__ = ["read_psrfits", "write_psrfits"]

HDRVER = "6.1"
_MJD_EPOCH = _dt.datetime(1858, 11, 17)
_POL_NPOL = {"AA+BB": 1, "INTEN": 1, "AABBCRCI": 4, "IQUV": 4, "AABB": 2}
_QMAX = 32767


# --- helpers -----------------------------------------------------------------


def _mjd_datetime(mjd: int, sec: float) -> _dt.datetime:
    return _MJD_EPOCH + _dt.timedelta(days=mjd, seconds=sec)


def _sky_from_name(name: str) -> tuple[str, str]:
    """RA/DEC strings a J2000 pulsar name implies (to its rounding), else zeros."""
    m = re.fullmatch(r"J(\d{2})(\d{2})(\d*)([+-])(\d{2})(\d{2})?\w*", name.strip())
    if not m:
        return "00:00:00.0000", "+00:00:00.000"
    ra = f"{m[1]}:{m[2]}:00.0000"
    dec = f"{m[4]}{m[5]}:{m[6] or '00'}:00.000"
    return ra, dec


def _hms_to_deg(s: str, hours: bool) -> float:
    sign = -1.0 if s.strip().startswith("-") else 1.0
    parts = [abs(float(p)) for p in s.strip().lstrip("+-").split(":")]
    val = sum(p / 60.0**k for k, p in enumerate(parts))
    return sign * val * (15.0 if hours else 1.0)


def _lst_seconds(mjd: int, sec: float, ant_x: float, ant_y: float) -> float:
    """Local mean sidereal time in seconds (UT1 taken as UTC: good to ~1 s)."""
    du = (mjd - 51544.5) + sec / 86400.0
    era = 2 * math.pi * ((0.7790572732640 + 0.00273781191135448 * du + du) % 1.0)
    t = du / 36525.0
    gmst_arcsec = 0.014506 + 4612.156534 * t + 1.3915817 * t * t
    gmst = era + math.radians(gmst_arcsec / 3600.0)
    lon = math.atan2(ant_y, ant_x) if (ant_x or ant_y) else 0.0
    return ((gmst + lon) % (2 * math.pi)) / (2 * math.pi) * 86400.0


def _quantise(data: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """int16 DATA, float32 DAT_SCL and DAT_OFFS for each profile along the last axis."""
    lo, hi = data.min(axis=-1), data.max(axis=-1)
    offs = ((lo + hi) / 2).astype(np.float32)
    off64 = offs.astype(np.float64)
    half = np.maximum(hi - off64, off64 - lo)
    scl = (half / _QMAX).astype(np.float32)
    # float32 rounding may shrink the scale below what the extremes need.
    short = scl.astype(np.float64) * _QMAX < half
    scl[short] = np.nextafter(scl[short], np.float32(np.inf))
    scl[half == 0] = 1.0
    q = np.rint((data - off64[..., None]) / scl.astype(np.float64)[..., None])
    return np.clip(q, -_QMAX, _QMAX).astype(np.int16), scl, offs


def _check(archive: FoldedArchive) -> None:
    d = archive.data
    if d.ndim != 4 or min(d.shape) < 1:
        raise FormatError(f"archive data has shape {d.shape}; need (nsub, npol, nchan, nbin)")
    nsub, npol, nchan, _ = d.shape
    want = _POL_NPOL.get(archive.pol_type)
    if want is None or want != npol:
        raise FormatError(
            f"archive pol_type {archive.pol_type!r} does not fit npol {npol}; "
            "use AA+BB (1), AABBCRCI or IQUV (4)"
        )
    if archive.obs.nchan != nchan:
        raise FormatError(
            f"archive has {nchan} channels but its observation says {archive.obs.nchan}"
        )
    for name, arr, shape in (
        ("weights", archive.weights, (nsub, nchan)),
        ("tsubint_s", archive.tsubint_s, (nsub,)),
        ("offs_sub_s", archive.offs_sub_s, (nsub,)),
        ("period_s", archive.period_s, (nsub,)),
    ):
        if np.shape(arr) != shape:
            raise FormatError(f"archive {name} has shape {np.shape(arr)}; need {shape}")
    if not np.all(np.isfinite(d)):
        raise FormatError("archive data holds NaN or infinity; zero-weight those channels first")


# --- writer ------------------------------------------------------------------


class _Start(NamedTuple):
    """When and where the observation starts, as the PRIMARY and SUBINT HDUs say it."""

    imjd: int
    smjd: int
    offs: float
    date: _dt.datetime
    ra: str
    dec: str
    lst: float
    ant: tuple[float, float, float]  # ITRF position (m), for the local sidereal time


def _start(obs: Observation, over: dict) -> _Start:
    """The start of ``obs``; RA and DEC from ``over`` (taken out of it) or the source name."""
    stt_smjd = math.floor(obs.start_sec)
    stt_offs = obs.start_sec - stt_smjd
    start_dt = _mjd_datetime(obs.start_mjd, stt_smjd)
    stt_imjd = obs.start_mjd + stt_smjd // 86400
    stt_smjd %= 86400
    ra, dec = _sky_from_name(obs.source)
    ax, ay, az = (float(over.get(k, 0.0)) for k in ("ANT_X", "ANT_Y", "ANT_Z"))
    ra, dec = str(over.pop("RA", ra)), str(over.pop("DEC", dec))
    lst = _lst_seconds(stt_imjd, stt_smjd + stt_offs, ax, ay)
    return _Start(stt_imjd, stt_smjd, stt_offs, start_dt, ra, dec, lst, (ax, ay, az))


def _primary_hdu(archive: FoldedArchive, now: str, start: _Start, over: dict) -> Any:
    """PRIMARY of a fold-mode archive."""
    scanlen = float(np.sum(archive.tsubint_s))
    return primary_hdu(archive.obs, archive.dm, scanlen, now, start, over)


def primary_hdu(
    obs: Observation, dm: float, scanlen: float, now: str, start: _Start, over: dict,
    mode: str = "PSR",
) -> Any:  # fmt: skip
    """PRIMARY: the observation's keys (OBS_MODE ``mode``: PSR, or SEARCH for
    io/psrfits_search.py); ``over`` (upper-case keys) replaces or adds keys."""
    from astropy.io import fits

    nchan = obs.nchan
    ra, dec, ant = start.ra, start.dec, start.ant
    cards = [
        ("HDRVER", HDRVER, "Header version"),
        ("FITSTYPE", "PSRFITS", "FITS definition for pulsar data files"),
        ("DATE", now, "File creation UTC date (YYYY-MM-DDThh:mm:ss)"),
        ("OBSERVER", "voltstream", "Observer name(s)"),
        ("PROJID", "", "Project name"),
        ("TELESCOP", obs.telescope, "Telescope name"),
        ("ANT_X", ant[0], "[m] Antenna ITRF X-coordinate"),
        ("ANT_Y", ant[1], "[m] Antenna ITRF Y-coordinate"),
        ("ANT_Z", ant[2], "[m] Antenna ITRF Z-coordinate"),
        ("FRONTEND", "", "Receiver ID"),
        ("IBEAM", "1", "Beam ID for multibeam systems"),
        ("NRCVR", obs.npol, "Number of receiver polarisation channels"),
        ("FD_POLN", "LIN", "LIN or CIRC"),
        ("FD_HAND", 1, "+/- 1. +1 is LIN:A=X,B=Y, CIRC:A=L,B=R"),
        ("FD_SANG", 45.0, "[deg] FA of E vect for equal sig in A&B"),
        ("FD_XYPH", 0.0, "[deg] Phase of A^* B for injected cal"),
        ("BACKEND", "voltstream", "Backend ID"),
        ("BECONFIG", "", "Backend configuration file name"),
        ("BE_PHASE", 0, "0/+1/-1 BE cross-phase:0 unknown,+/-1 std/rev"),
        ("BE_DCC", 0, "0/1 BE downconversion conjugation corrected"),
        ("BE_DELAY", 0.0, "[s] Backend propn delay from digitiser input"),
        ("TCYCLE", 0.0, "[s] On-line cycle time"),
        ("OBS_MODE", mode, "(PSR, CAL, SEARCH)"),
        ("DATE-OBS", start.date.strftime("%Y-%m-%dT%H:%M:%S"), "UTC date of observation"),
        ("OBSFREQ", float(obs.freq_mhz), "[MHz] Centre frequency for observation"),
        ("OBSBW", float(obs.bw_mhz), "[MHz] Bandwidth for observation"),
        ("OBSNCHAN", nchan, "Number of frequency channels (original)"),
        ("CHAN_DM", float(dm), "[cm-3 pc] DM used for on-line dedispersion"),
        ("PNT_ID", "", "Name or ID for pointing ctr (multibeam feeds)"),
        ("SRC_NAME", obs.source, "Source or scan ID"),
        ("COORD_MD", "J2000", "Coordinate mode (J2000, GALACTIC, ECLIPTIC)"),
        ("EQUINOX", 2000.0, "Equinox of coords (e.g. 2000.0)"),
        ("RA", ra, "Right ascension (hh:mm:ss.ssss)"),
        ("DEC", dec, "Declination (-dd:mm:ss.sss)"),
        ("BMAJ", 0.0, "[deg] Beam major axis length"),
        ("BMIN", 0.0, "[deg] Beam minor axis length"),
        ("BPA", 0.0, "[deg] Beam position angle"),
        ("STT_CRD1", ra, "Start coord 1 (hh:mm:ss.sss or ddd.ddd)"),
        ("STT_CRD2", dec, "Start coord 2 (-dd:mm:ss.sss or -dd.ddd)"),
        ("TRK_MODE", "TRACK", "Track mode (TRACK, SCANGC, SCANLAT)"),
        ("STP_CRD1", ra, "Stop coord 1 (hh:mm:ss.sss or ddd.ddd)"),
        ("STP_CRD2", dec, "Stop coord 2 (-dd:mm:ss.sss or -dd.ddd)"),
        ("SCANLEN", scanlen, "[s] Requested scan length"),
        ("FD_MODE", "FA", "Feed track mode - FA, CPA, SPA, TPA"),
        ("FA_REQ", 0.0, "[deg] Feed/Posn angle requested"),
        ("CAL_MODE", "OFF", "Cal mode (OFF, SYNC, EXT1, EXT2)"),
        ("CAL_FREQ", 0.0, "[Hz] Cal modulation frequency"),
        ("CAL_DCYC", 0.0, "Cal duty cycle"),
        ("CAL_PHS", 0.0, "Cal phase (wrt start time)"),
        ("CAL_NPHS", 0, "Number of states in cal pulse"),
        ("STT_IMJD", int(start.imjd), "Start MJD (UTC days) (J - long integer)"),
        ("STT_SMJD", int(start.smjd), "[s] Start time (sec past UTC 00h) (J)"),
        ("STT_OFFS", float(start.offs), "[s] Start time offset (D)"),
        ("STT_LST", start.lst, "[s] Start LST (D)"),
    ]
    hdr = fits.Header()
    for key, value, comment in cards:
        hdr[key] = (over.pop(key, value), comment)
    for key, value in over.items():
        hdr[key] = value
    return fits.PrimaryHDU(header=hdr)


def _history_hdu(archive: FoldedArchive, now: str, steps: list[str]) -> Any:
    """HISTORY: one row per processing step, each with the archive's state."""
    from astropy.io import fits

    obs = archive.obs
    nsub, npol, nchan, nbin = archive.data.shape
    chan_bw = float(obs.chan_bw_mhz)
    tbin = float(archive.period_s[0]) / nbin
    n = len(steps)
    return fits.BinTableHDU.from_columns(
        [
            col("DATE_PRO", "24A", [now] * n),
            col("PROC_CMD", "256A", [s[:256] for s in steps]),
            col("SCALE", "8A", ["FluxDen"] * n),
            col("POL_TYPE", "8A", [archive.pol_type] * n),
            col("NSUB", "1J", [nsub] * n),
            col("NPOL", "1I", [npol] * n),
            col("NBIN", "1I", [nbin] * n),
            col("NBIN_PRD", "1I", [nbin] * n),
            col("TBIN", "1D", [tbin] * n, "s"),
            col("CTR_FREQ", "1D", [obs.freq_mhz] * n, "MHz"),
            col("NCHAN", "1J", [nchan] * n),
            col("CHAN_BW", "1D", [chan_bw] * n, "MHz"),
            col("REF_FREQ", "1D", [obs.freq_mhz] * n, "MHz"),
            col("DM", "1D", [archive.dm] * n, "CM-3 PC"),
            col("RM", "1D", [0.0] * n, "RAD M-2"),
            col("PR_CORR", "1I", [0] * n),
            col("FD_CORR", "1I", [0] * n),
            col("BE_CORR", "1I", [0] * n),
            col("RM_CORR", "1I", [0] * n),
            col("DEDISP", "1I", [1] * n),
            col("DDS_MTHD", "32A", ["COHERENT"] * n),
            col("SC_MTHD", "32A", ["NONE"] * n),
            col("CAL_MTHD", "32A", ["NONE"] * n),
            col("CAL_FILE", "256A", ["NONE"] * n),
            col("RFI_MTHD", "32A", ["NONE"] * n),
            col("RM_MODEL", "32A", ["NONE"] * n),
            col("AUX_RM_C", "1I", [0] * n),
            col("DM_MODEL", "32A", ["NONE"] * n),
            col("AUX_DM_C", "1I", [0] * n),
        ],
        name="HISTORY",
    )


def _subint_hdu(archive: FoldedArchive, start: _Start) -> Any:
    """SUBINT: one row per sub-integration, the profiles quantised to int16."""
    from astropy.io import fits

    obs = archive.obs
    nsub, npol, nchan, nbin = archive.data.shape
    chan_bw = float(obs.chan_bw_mhz)
    tbin = float(archive.period_s[0]) / nbin
    q, scl, offs = _quantise(np.asarray(archive.data, dtype=np.float64))
    ra_deg, dec_deg = _hms_to_deg(start.ra, True), _hms_to_deg(start.dec, False)
    offs_sub = np.asarray(archive.offs_sub_s, dtype=np.float64)
    lst_sub = (start.lst + offs_sub * 1.00273781191135448) % 86400.0
    freqs = np.broadcast_to(obs.chan_freqs_mhz, (nsub, nchan))
    zeros = np.zeros(nsub)
    subint = fits.BinTableHDU.from_columns(
        [
            col("INDEXVAL", "1D", np.arange(nsub, dtype=np.float64)),
            col("TSUBINT", "1D", np.asarray(archive.tsubint_s, dtype=np.float64), "s"),
            col("OFFS_SUB", "1D", offs_sub, "s"),
            col("PERIOD", "1D", np.asarray(archive.period_s, dtype=np.float64), "s"),
            col("LST_SUB", "1D", lst_sub, "s"),
            col("RA_SUB", "1D", zeros + ra_deg, "deg"),
            col("DEC_SUB", "1D", zeros + dec_deg, "deg"),
            col("GLON_SUB", "1D", zeros, "deg"),
            col("GLAT_SUB", "1D", zeros, "deg"),
            col("FD_ANG", "1E", zeros, "deg"),
            col("POS_ANG", "1E", zeros, "deg"),
            col("PAR_ANG", "1E", zeros, "deg"),
            col("TEL_AZ", "1E", zeros, "deg"),
            col("TEL_ZEN", "1E", zeros, "deg"),
            col("AUX_DM", "1D", zeros, "CM-3 PC"),
            col("AUX_RM", "1D", zeros, "RAD M-2"),
            col("DAT_FREQ", f"{nchan}D", freqs, "MHz"),
            col("DAT_WTS", f"{nchan}E", np.asarray(archive.weights, dtype=np.float32)),
            col("DAT_OFFS", f"{nchan * npol}E", offs.reshape(nsub, npol * nchan)),
            col("DAT_SCL", f"{nchan * npol}E", scl.reshape(nsub, npol * nchan)),
            col("DATA", f"{nbin * nchan * npol}I", q, "Jy", f"({nbin},{nchan},{npol})"),
        ],
        name="SUBINT",
    )
    sh = subint.header
    for key, value, comment in [
        ("INT_TYPE", "TIME", "Time axis (TIME, BINPHSPERI, BINLNGASC, etc)"),
        ("INT_UNIT", "SEC", "Unit of time axis (SEC, PHS (0-1), DEG)"),
        ("SCALE", "FluxDen", "Intensity units (FluxDen/RefFlux/Jansky)"),
        ("POL_TYPE", archive.pol_type, "Polarisation identifier (e.g., AABBCRCI, AA+BB)"),
        ("NPOL", npol, "Nr of polarisations"),
        ("TBIN", tbin, "[s] Time per bin or sample"),
        ("NBIN", nbin, "Nr of bins (PSR/CAL mode; else 1)"),
        ("NBIN_PRD", nbin, "Nr of bins/pulse period (for gated data)"),
        ("PHS_OFFS", 0.0, "Phase offset of bin 0 for gated data"),
        ("NBITS", 16, "Nr of bits/datum (SEARCH mode data, else 1)"),
        ("ZERO_OFF", 0.0, "Zero offset for SEARCH-mode data"),
        ("SIGNINT", 0, "1 for signed ints in SEARCH-mode data, else 0"),
        ("NSUBOFFS", 0, "Subint offset (Contiguous SEARCH-mode files)"),
        ("NCHAN", nchan, "Number of channels/sub-bands in this file"),
        ("CHAN_BW", chan_bw, "[MHz] Channel/sub-band width"),
        ("REFFREQ", float(obs.freq_mhz), "[MHz] Reference frequency"),
        ("DM", float(archive.dm), "[cm-3 pc] DM for post-detection dedisperion"),
        ("RM", 0.0, "[rad m-2] RM for post-detection deFaraday"),
        ("NCHNOFFS", 0, "Channel/sub-band offset for split files"),
        ("NSBLK", 1, "Samples/row (SEARCH mode, else 1)"),
        ("NSTOT", 0, "Total number of samples (SEARCH mode, else 0)"),
    ]:
        sh[key] = (value, comment)
    return subint


def write_psrfits(
    path: str | os.PathLike | BinaryIO,
    archive: FoldedArchive,
    extra_history: Iterable[str] = (),
    *,
    primary: dict | None = None,
    subint_last: bool = False,
) -> None:
    """Write ``archive`` as a PSRFITS fold-mode file (overwrites ``path``; a path or a
    binary file object). ``subint_last`` puts the SUBINT table after every other HDU,
    so that rows can be appended at the file's end (io/psrfits_append.py)."""
    from astropy.io import fits

    _check(archive)
    now = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    over = {k.upper(): v for k, v in (primary or {}).items()}
    start = _start(archive.obs, over)
    steps = [*archive.history, *extra_history] or ["voltstream fold"]
    primary_hdu = _primary_hdu(archive, now, start, over)
    subint = _subint_hdu(archive, start)
    hdus = [primary_hdu, _history_hdu(archive, now, steps), subint]
    if archive.polyco_text:
        hdus.append(polyco_hdu(archive.polyco_text, archive.obs, now))
    if archive.par_text:
        hdus.append(psrparam_hdu(archive.par_text))
    hdus.append(cohddisp_hdu(archive))
    if subint_last:
        hdus.remove(subint)
        hdus.append(subint)
    try:
        fits.HDUList(hdus).writeto(path, overwrite=True)
    except OSError as exc:
        raise FormatError(f"cannot write PSRFITS file {path}: {exc}") from exc

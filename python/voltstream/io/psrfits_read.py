"""Reading PSRFITS fold-mode archives back (``read_psrfits``, re-exported by io/psrfits.py,
whose docstring describes the layout both follow)."""

from __future__ import annotations

import datetime as _dt
import math
import os
from typing import Any

import numpy as np

from voltstream.errors import FormatError
from voltstream.io.polyco import PolycoEntry, write_polyco
from voltstream.observation import FoldedArchive, Observation

__all__ = ["read_psrfits"]

_MJD_EPOCH = _dt.datetime(1858, 11, 17)


# --- polyco ------------------------------------------------------------------


def _polyco_entries(rows: Any, src: str, dm: float) -> list[PolycoEntry]:
    """Polyco entries back from POLYCO table rows (PSRFITS keeps no Doppler: 0)."""
    entries = []
    for r in rows:
        ref_mjd = float(r["REF_MJD"])
        # TEMPO's UTC field has 0.01 s resolution; round TMID to it before splitting.
        day, cs = divmod(round(ref_mjd * 8640000), 8640000)
        hh, rem = divmod(cs, 360000)
        mm, rem = divmod(rem, 6000)
        ncoef = int(r["NCOEF"])
        entries.append(
            PolycoEntry(
                psr=src,
                tmid_mjd=math.floor(ref_mjd),
                tmid_frac=ref_mjd - math.floor(ref_mjd),
                rphase=float(r["REF_PHS"]),
                f0_hz=float(r["REF_F0"]),
                span_min=float(r["NSPAN"]),
                coeffs=np.asarray(r["COEFF"][:ncoef], dtype=np.float64),
                dm=dm,
                date=(_MJD_EPOCH + _dt.timedelta(days=day)).strftime("%d-%b-%y").upper(),
                utc=f"{hh:02d}{mm:02d}{rem // 100:02d}.{rem % 100:02d}",
                log10_rms=float(r["LGFITERR"]),
                site=str(r["NSITE"]).strip(),
                ref_freq_mhz=float(r["REF_FREQ"]),
            )
        )
    return entries


# --- reader ------------------------------------------------------------------


def read_psrfits(path: str | os.PathLike) -> FoldedArchive:
    """A fold-mode PSRFITS file as a FoldedArchive, profiles rescaled to float64."""
    from astropy.io import fits

    try:
        hdul = fits.open(path, memmap=False)
    except FileNotFoundError:
        raise FormatError(f"cannot read {path}: no such file") from None
    except (OSError, ValueError, TypeError) as exc:
        raise FormatError(f"{path} is not a FITS file ({exc}); pass a PSRFITS archive") from None
    with hdul:
        try:
            return _read(path, hdul)
        except (KeyError, ValueError, TypeError, IndexError) as exc:
            raise FormatError(
                f"{path} is not a readable PSRFITS fold-mode file ({exc}); "
                "check it was written as PSRFITS"
            ) from None


def _read(path: str | os.PathLike[str], hdul: Any) -> FoldedArchive:
    ph = hdul[0].header
    if str(ph.get("FITSTYPE", "")).strip() != "PSRFITS":
        raise FormatError(f"{path} is a FITS file but not PSRFITS (FITSTYPE is not 'PSRFITS')")
    if str(ph.get("OBS_MODE", "")).strip() != "PSR":
        raise FormatError(
            f"{path} has OBS_MODE {ph.get('OBS_MODE')!r}; only fold-mode (PSR) archives are read"
        )
    names = [h.name for h in hdul]
    if "SUBINT" not in names:
        raise FormatError(f"{path} has no SUBINT table; the archive holds no profiles")
    sub = hdul["SUBINT"]
    sh, rows = sub.header, sub.data
    nchan, npol, nbin = int(sh["NCHAN"]), int(sh["NPOL"]), int(sh["NBIN"])
    nsub = len(rows)
    if nsub == 0:
        raise FormatError(f"{path} has an empty SUBINT table; nothing to read")
    raw = np.asarray(rows["DATA"], dtype=np.float64).reshape(nsub, npol, nchan, nbin)
    scl = np.asarray(rows["DAT_SCL"], dtype=np.float64).reshape(nsub, npol, nchan)
    offs = np.asarray(rows["DAT_OFFS"], dtype=np.float64).reshape(nsub, npol, nchan)
    data = raw * scl[..., None] + offs[..., None]
    weights = np.asarray(rows["DAT_WTS"], dtype=np.float64).reshape(nsub, nchan)
    bw = float(ph["OBSBW"])
    obs = Observation(
        nchan=nchan,
        npol=int(ph.get("NRCVR", 2) or 2),
        freq_mhz=float(ph["OBSFREQ"]),
        bw_mhz=bw,
        tsamp_s=abs(nchan / (bw * 1e6)),
        start_mjd=int(ph["STT_IMJD"]),
        start_sec=float(ph["STT_SMJD"]) + float(ph.get("STT_OFFS", 0.0)),
        source=str(ph.get("SRC_NAME", "")).strip(),
        telescope=str(ph.get("TELESCOP", "")).strip(),
    )
    cols = rows.columns.names
    period = (
        np.asarray(rows["PERIOD"], dtype=np.float64)
        if "PERIOD" in cols
        else np.full(nsub, float(sh.get("TBIN", 0.0)) * nbin)
    )
    history: list[str] = []
    if "HISTORY" in names and hdul["HISTORY"].data is not None:
        history = [str(s).strip() for s in hdul["HISTORY"].data["PROC_CMD"]]
    polyco_text = None
    if "POLYCO" in names and hdul["POLYCO"].data is not None and len(hdul["POLYCO"].data):
        src = str(hdul["POLYCO"].header.get("SRC_NAME", obs.source))
        dm = float(hdul["POLYCO"].header.get("DM", sh.get("DM", 0.0)))
        prows = [{c: r[c] for c in hdul["POLYCO"].data.columns.names} for r in hdul["POLYCO"].data]
        polyco_text = write_polyco(None, _polyco_entries(prows, src, dm))
    par_text = None
    if "PSRPARAM" in names and hdul["PSRPARAM"].data is not None:
        par_lines = [str(s).rstrip() for s in hdul["PSRPARAM"].data["PARAM"]]
        par_text = "".join(ln + "\n" for ln in par_lines) or None
    coherent_nfft = None
    if "COHDDISP" in names and hdul["COHDDISP"].data is not None:
        coh = hdul["COHDDISP"]
        if "NCHIRP" in coh.columns.names and len(coh.data):
            coherent_nfft = int(np.ravel(coh.data["NCHIRP"])[0]) or None
        else:
            coherent_nfft = int(coh.header.get("NFFT", 0)) or None
    return FoldedArchive(
        obs=obs,
        data=data,
        weights=weights,
        tsubint_s=np.asarray(rows["TSUBINT"], dtype=np.float64),
        offs_sub_s=np.asarray(rows["OFFS_SUB"], dtype=np.float64),
        period_s=period,
        dm=float(sh.get("DM", ph.get("CHAN_DM", 0.0))),
        pol_type=str(sh.get("POL_TYPE", "AA+BB")).strip(),
        polyco_text=polyco_text,
        history=history,
        par_text=par_text,
        coherent_nfft=coherent_nfft,
    )

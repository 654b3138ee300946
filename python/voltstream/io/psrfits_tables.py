"""The extension tables of a PSRFITS fold-mode archive: POLYCO, PSRPARAM and COHDDISP,
each written when the fold had what it records (io/psrfits.py's docstring gives the
layout); and ``col``, the column maker every table of io/psrfits.py uses."""

from __future__ import annotations

from typing import Any

import numpy as np

from voltstream.errors import FormatError
from voltstream.io.polyco import Polyco, PolycoEntry
from voltstream.observation import FoldedArchive, Observation

__all__ = ["cohddisp_hdu", "col", "polyco_hdu", "psrparam_hdu"]

_NCOEF_COL = 15


def col(name: str, fmt: str, values: Any, unit: str | None = None, dim: str | None = None) -> Any:
    from astropy.io import fits

    return fits.Column(name=name, format=fmt, array=values, unit=unit, dim=dim)


def polyco_hdu(polyco_text: str, obs: Observation, now: str) -> Any:
    """POLYCO: one row per block of the polyco the fold used."""
    from astropy.io import fits

    entries = Polyco.from_text(polyco_text, name="archive polyco").entries
    if not entries:
        raise FormatError("the archive's polyco text holds no entries; pass a TEMPO polyco")
    ncol = max(_NCOEF_COL, max(e.coeffs.size for e in entries))
    coeff = np.zeros((len(entries), ncol))
    for k, e in enumerate(entries):
        coeff[k, : e.coeffs.size] = e.coeffs
    nb = len(entries)

    def pred_phase(e: PolycoEntry) -> float:
        return float(e.phase_dt(e.dt_min(obs.start_mjd, obs.start_sec))) % 1.0

    hdu = fits.BinTableHDU.from_columns(
        [
            col("DATE_PRO", "24A", [now] * nb),
            col("POLYVER", "16A", ["TEMPO"] * nb),
            col("NSPAN", "1I", [round(e.span_min) for e in entries], "min"),
            col("NCOEF", "1I", [e.coeffs.size for e in entries]),
            col("NPBLK", "1I", [nb] * nb),
            col("NSITE", "8A", [e.site for e in entries]),
            col("REF_FREQ", "1D", [e.ref_freq_mhz for e in entries], "MHz"),
            # Fractional phase each block predicts for the observation start.
            col("PRED_PHS", "1D", [pred_phase(e) for e in entries]),
            col("REF_MJD", "1D", [e.tmid_mjd + e.tmid_frac for e in entries]),
            col("REF_PHS", "1D", [e.rphase_int + e.rphase_frac for e in entries]),
            col("REF_F0", "1D", [e.f0_hz for e in entries], "Hz"),
            col("LGFITERR", "1D", [e.log10_rms for e in entries]),
            col("COEFF", f"{ncol}D", coeff),
        ],
        name="POLYCO",
    )
    hdu.header["DM"] = (entries[0].dm, "[cm-3 pc] DM of the polyco")
    hdu.header["SRC_NAME"] = (entries[0].psr, "Pulsar of the polyco")
    return hdu


def psrparam_hdu(par_text: str) -> Any:
    """PSRPARAM: the .par file, one row per non-blank line (column PARAM)."""
    from astropy.io import fits

    lines = [ln.rstrip() for ln in par_text.splitlines() if ln.strip()]
    if not lines:
        raise FormatError("the archive's .par text is empty; pass the .par file folded with")
    if not all(ln.isascii() for ln in lines):
        raise FormatError("the archive's .par text is not ASCII; FITS strings must be ASCII")
    width = max(128, max(len(ln) for ln in lines))
    col = fits.Column(name="PARAM", format=f"{width}A", array=lines)
    return fits.BinTableHDU.from_columns([col], name="PSRPARAM")


def _cohddisp_geometry(archive: FoldedArchive) -> tuple[int, int]:
    """Samples discarded at the start and end of each FFT: the fold's plan's (set on the
    archive, fold/plan.py), else the Dedisperser's rule for the archive's channels."""
    if archive.coherent_discard is not None:
        head, tail = archive.coherent_discard
        return int(head), int(tail)
    from voltstream.dsp.dedisperse import discard_samples

    obs = archive.obs
    return discard_samples(float(archive.dm), obs.chan_freqs_mhz, float(obs.chan_bw_mhz))


def cohddisp_hdu(archive: FoldedArchive) -> Any:
    """COHDDISP: the coherent dedispersion applied (see the module docstring)."""
    from astropy.io import fits

    obs = archive.obs
    nchan = obs.nchan
    nfft = int(archive.coherent_nfft or 0)
    if nfft < 0:
        raise FormatError(f"archive coherent_nfft is {nfft}; give the FFT length (> 0) or None")
    head, tail = _cohddisp_geometry(archive)
    freqs = np.asarray(obs.chan_freqs_mhz, dtype=np.float64)
    bw = np.full(nchan, float(obs.chan_bw_mhz))
    ones = np.ones(nchan, dtype=np.int32)
    hdu = fits.BinTableHDU.from_columns(
        [
            fits.Column(name="FREQ", format="1D", unit="MHz", array=freqs),
            fits.Column(name="BW", format="1D", unit="MHz", array=bw),
            fits.Column(name="OUT_NCHAN", format="1J", array=ones),
            fits.Column(name="OUT_FREQ", format="1D", unit="MHz", array=freqs),
            fits.Column(name="OUT_BW", format="1D", unit="MHz", array=bw),
            fits.Column(name="NCHIRP", format="1J", array=ones * nfft),
            fits.Column(name="NCYC_POS", format="1J", array=ones * head),
            fits.Column(name="NCYC_NEG", format="1J", array=ones * tail),
        ],
        name="COHDDISP",
    )
    h = hdu.header
    for key, value, comment in [
        ("DOMAIN", "FREQ", "Coherent dedisp domain (TIME/FREQ)"),
        ("CHRPTYPE", "voltstream overlap-save", "Chirp function descriptor"),
        ("DM", float(archive.dm), "[cm-3 pc] DM used for coherent dedispersion"),
        ("DOPPLER", 1.0, "[v/c] Doppler correction factor"),
        ("DATANBIT", 32, "Number of quantization levels for data"),
        ("CHRPNBIT", 32, "Number of quantization levels for chirp"),
        ("NCHAN", nchan, "Number of input frequency channels"),
        ("NFFT", nfft, "Size of forward FFT (0: unknown)"),
    ]:
        h[key] = (value, comment)
    return hdu

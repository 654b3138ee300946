"""Timing-model (.par) files: polycos from PINT, and a PINT-free label reader.

``predictor_from_par`` turns a .par file into a :class:`~voltstream.io.polyco.Polyco`
with PINT (``pip install pint-pulsar``) when it is importable; PINT is an optional
dependency, never needed otherwise. Without it, make a polyco with TEMPO
(``tempo -z``) and fold with ``--polyco``. ``read_par_text`` reads the pulsar
name, F0 and DM from a .par file without PINT, enough to label an archive.

Running PINT without the internet
---------------------------------
PINT fetches three kinds of data on first use; on an offline backend provide
them locally:

- Observatory clock corrections. Set the environment variable
  ``PINT_CLOCK_OVERRIDE`` to a directory holding the clock files (TEMPO
  ``time_*.dat`` and/or TEMPO2 ``*.clk``, e.g. copied from
  https://github.com/ipta/pulsar-clock-corrections); files found there are
  used instead of PINT's global clock repository, which is otherwise
  downloaded. The default site here, ``coe`` (geocentre), needs no
  observatory clock file at all.
- Earth orientation (IERS) tables. ``predictor_from_par(offline=True)`` (the
  default) runs PINT with ``astropy.utils.iers.conf.auto_download = False``
  (astropy then uses the IERS-A/B tables bundled in ``astropy-iers-data``;
  update that package to refresh them) and with
  ``astropy.utils.data.conf.allow_internet = False``, so nothing is fetched.
- The solar-system ephemeris (the par file's EPHEM, DE421 by default) and, if
  the model asks for it, BIPM TT corrections: PINT reads these through
  astropy's download cache. Fill the cache once on a connected machine (run
  this function there, or ``astropy.utils.data.download_file(url,
  cache=True)``) and copy ``~/.astropy/cache`` (or ``$XDG_CACHE_HOME/astropy``)
  to the backend, or ``astropy.utils.data.import_file_to_cache(url, path)``.

Conversion (our glue): each row of PINT's ``Polycos.polycoTable`` (TEMPO
method: RPHASE as int + frac, F0, coefficients in minutes from TMID) becomes a
:class:`~voltstream.io.polyco.PolycoEntry`. TMID is moved onto the 1e-11 day
grid of the TEMPO text format, the polynomial being re-expanded about the moved
TMID, so the in-memory predictor and its written polyco text (``.text``, which
fills the POLYCO HDU) predict the same phases.
"""

from __future__ import annotations

import contextlib
import math
import os

import numpy as np

from voltstream.errors import ConfigError, FormatError
from voltstream.io.polyco import Polyco, PolycoEntry, _date_utc, write_polyco

__all__ = ["NO_PINT_MESSAGE", "predictor_from_par", "read_par_text"]

NO_PINT_MESSAGE = (
    "reading .par files needs PINT (pip install pint-pulsar); "
    "or make a polyco with TEMPO and pass --polyco"
)


def _read_text(path: str | os.PathLike) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError as exc:
        raise ConfigError(f"cannot read .par file {path}: {exc.strerror}") from None


def _number(token: str) -> float:
    return float(token.replace("D", "E").replace("d", "e"))


def read_par_text(path: str | os.PathLike) -> dict:
    """Name, spin frequency and DM of a .par file, without PINT.

    Returns ``{"psr": str | None, "f0_hz": float | None, "dm": float | None,
    "text": str}``. The name is PSRJ, else PSR, else PSRB; F0 comes from F0
    (or 1/P0 when only P0 is given). Fortran ``D`` exponents are accepted;
    lines starting with ``#`` or ``C `` are comments.
    """
    text = _read_text(path)
    keys: dict[str, str] = {}
    for line in text.splitlines():
        tok = line.split()
        if len(tok) < 2 or tok[0].startswith("#") or tok[0] == "C":
            continue
        keys.setdefault(tok[0].upper(), tok[1])

    def num(key: str) -> float | None:
        if key not in keys:
            return None
        try:
            return _number(keys[key])
        except ValueError:
            raise FormatError(f"{path}: {key} is {keys[key]!r}, not a number") from None

    psr = keys.get("PSRJ") or keys.get("PSR") or keys.get("PSRB")
    f0 = num("F0")
    if f0 is None:
        p0 = num("P0")
        f0 = 1.0 / p0 if p0 else None
    if psr is None and f0 is None:
        raise FormatError(f"{path} has neither PSR/PSRJ nor F0/P0: is it a .par file?")
    return {"psr": psr, "f0_hz": f0, "dm": num("DM"), "text": text}


def _scalar(x) -> float:
    """A plain float from a float, NumPy scalar/array of one, or astropy Quantity."""
    x = getattr(x, "value", x)
    return float(np.asarray(x, dtype=np.longdouble).ravel()[0])


def _longdouble(x) -> np.longdouble:
    x = getattr(x, "value", x)
    return np.asarray(x, dtype=np.longdouble).ravel()[0]


def _entry_from_pint(row, psr: str, dm: float) -> PolycoEntry:
    """One PINT polyco-table row as our PolycoEntry, TMID moved onto the 1e-11 day grid."""
    e = row["entry"]
    tmid = _longdouble(row["tmid"])
    day = int(np.floor(tmid))
    frac_exact = tmid - np.longdouble(day)
    frac = round(float(frac_exact) * 1e11) / 1e11
    if frac >= 1.0:
        day, frac = day + 1, 0.0
    # Minutes from PINT's TMID to ours; re-expand p(x) about it: q(x) = p(x + delta).
    delta = float((np.longdouble(day) + np.longdouble(frac) - tmid) * 1440)
    coeffs = np.asarray(getattr(e.coeffs, "value", e.coeffs), dtype=np.float64).ravel()
    q = np.polynomial.Polynomial(coeffs)(np.polynomial.Polynomial([delta, 1.0])).coef
    q = np.concatenate([q, np.zeros(coeffs.size - q.size)])[: coeffs.size]
    f0 = _scalar(e.f0)
    r_int, r_frac = _scalar(e.rphase.int), _scalar(e.rphase.frac)
    shift = 60.0 * delta * f0  # phase the linear term gains over delta
    whole = math.floor(r_frac + shift)
    r_int, r_frac = r_int + whole, (r_frac + shift) - whole
    date, utc = _date_utc(day, frac * 86400.0)
    return PolycoEntry(
        psr=psr,
        tmid_mjd=day,
        tmid_frac=frac,
        rphase=r_int + r_frac,
        rphase_int=float(r_int),
        rphase_frac=float(r_frac),
        f0_hz=f0,
        span_min=float(_scalar(row["mjd_span"])),
        coeffs=q,
        dm=dm,
        date=date,
        utc=utc,
        log10_rms=float(_scalar(row["logrms"])) if "logrms" in _colnames(row) else -6.0,
        site=str(row["obs"]),
        ref_freq_mhz=float(_scalar(row["obsfreq"])),
    )


def _colnames(row) -> list[str]:
    names = getattr(row, "colnames", None)
    return list(names) if names is not None else list(row.keys())


@contextlib.contextmanager
def _offline(enabled: bool):
    if not enabled:
        yield
        return
    from astropy.utils import data, iers

    with iers.conf.set_temp("auto_download", False), data.conf.set_temp("allow_internet", False):
        yield


def predictor_from_par(
    path: str | os.PathLike,
    start_mjd: int,
    start_sec: float,
    duration_s: float,
    obs_freq_mhz: float,
    site: str = "coe",
    span_min: int = 60,
    ncoeff: int = 12,
    *,
    offline: bool = True,
) -> Polyco:
    """Polycos from a .par file with PINT, covering ``duration_s`` from the start.

    Returns our :class:`Polyco` (``.text`` is the TEMPO polyco text, for the
    POLYCO HDU) with ``.par_text`` set to the .par file's text (for PSRPARAM).
    Raises ConfigError when PINT is not installed, or when the polycos do not
    cover the observation. ``site`` is a PINT observatory name or TEMPO code
    (default ``coe``, the geocentre). See the module docstring for running
    offline.
    """
    if not duration_s > 0:
        raise ConfigError(f"duration must be > 0 s to make polycos, got {duration_s}")
    if not (span_min > 0 and ncoeff > 0):
        raise ConfigError(f"polyco span ({span_min} min) and ncoeff ({ncoeff}) must be > 0")
    try:
        from pint.models import get_model
        from pint.polycos import Polycos
    except ImportError:
        raise ConfigError(NO_PINT_MESSAGE) from None
    par_text = _read_text(path)
    start_mjd = int(start_mjd)
    mjd0 = start_mjd + float(start_sec) / 86400.0
    mjd1 = start_mjd + (float(start_sec) + float(duration_s)) / 86400.0
    # PINT puts TMIDs a segment apart from the start's hour up to the end's *hour*
    # only (int(mjdEnd * 24)), which can leave the end uncovered: ask an hour more.
    mjd_end = mjd1 + 1.0 / 24.0
    try:
        with _offline(offline):
            model = get_model(str(path))
            pint_polycos = Polycos.generate_polycos(
                model, mjd0, mjd_end, site, int(span_min), int(ncoeff), float(obs_freq_mhz)
            )
    except (ValueError, KeyError, OSError) as exc:
        raise ConfigError(f"PINT could not make polycos from {path}: {exc}") from None
    psr = str(getattr(model.PSR, "value", model.PSR) or "")
    dm_value = getattr(getattr(model, "DM", None), "value", None)
    dm = float(dm_value) if dm_value is not None else 0.0
    rows = list(pint_polycos.polycoTable)
    if not rows:
        raise ConfigError(f"PINT made no polycos from {path} for MJD {mjd0:.6f}-{mjd1:.6f}")
    entries = [_entry_from_pint(r, psr, dm) for r in rows]
    predictor = Polyco(entries, text=write_polyco(None, entries), name=f"PINT polycos for {path}")
    predictor.phase(start_mjd, np.array([float(start_sec), float(start_sec) + duration_s]))
    predictor.par_text = par_text
    return predictor

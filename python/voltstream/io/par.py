"""Timing-model (.par) files: polycos from PINT, and a PINT-free label reader.

``predictor_from_par`` turns a .par file into a :class:`~voltstream.io.polyco.Polyco`
with PINT (``pip install pint-pulsar``; verified with PINT 1.1.8, astropy 8.0.2,
astropy-iers-data 0.2026.11.2) when it is importable; PINT is an optional
dependency, never needed otherwise. Without it, make a polyco with TEMPO
(``tempo -z``) and fold with ``--polyco``. ``read_par_text`` reads the pulsar
name, F0 and DM from a .par file without PINT, enough to label an archive.

How the polycos are made (our code; PINT only evaluates the model)
------------------------------------------------------------------
PINT's ``model.phase`` gives the absolute phase at TOAs built with
``pint.toa.get_TOAs_array`` at the site and observing frequency; each polyco
entry (TEMPO method) holds RPHASE at a whole-minute TMID and a least-squares
fit of the rest (minus 60 DT F0) at Chebyshev nodes over its span. We do not
call PINT's ``Polycos.generate_polycos`` because it ignores the .par file's CLK
(it always applies its latest TT(BIPM): a CLK TT(TAI) model comes out off by
F0 x 27.5 us, 9.3e-3 turns for a 339 Hz MSP) and so needs a BIPM clock file even
at the geocentre. Here CLK picks the clock chain as ``pint.toa.get_TOAs`` does:
TT(TAI) or UNCORR: no BIPM; TT(BIPMyyyy): that file; otherwise PINT's latest.
When the .par file sets no TZRMJD, phase zero is PEPOCH at the barycentre (PINT
would take the first TOA it sees, so each observation would get its own zero).
TMIDs sit on the 1e-11 day grid and RPHASE on the 1e-9 turn grid of the TEMPO
text, so the predictor and its ``.text`` (the POLYCO HDU) predict the same phases.

Verified against real PINT (tests/test_par_pint.py): at 5000 random times per case,
entries evaluated in long double match ``model.phase`` to 1.2e-7 turns for a 339 Hz
MSP (isolated and ELL1 binary, geocentre and CHIME) and 2.5e-10 turns for a
0.84 Hz pulsar (geocentre and GMRT); the MSP figure is PINT's own resolution (it
holds TDB as a long double MJD: 3.1e-10 s steps, 1e-7 turns at 339 Hz). With the
same clock chain they match PINT's own ``Polycos.eval_abs_phase`` to the same
figures. ``Polyco.phase`` returns float64 turns, so a large absolute phase
(1.6e11 turns: an MSP years from PEPOCH) is resolved to 1.5e-5 turns; the
PSRFITS POLYCO columns REF_MJD and REF_PHS are one double each (0.6 us of TMID).

Running PINT without the internet
---------------------------------
``predictor_from_par(offline=True)`` (the default) runs PINT with astropy's
``iers.conf.auto_download = False`` and ``data.conf.allow_internet = False``:
nothing is fetched (checked with the network namespace cut off, ``unshare -n``,
and an empty astropy cache: a missing file is a ConfigError naming it, no hang).
What PINT may need, and how to provide it:

- The solar-system ephemeris (EPHEM, DE421 when absent), read through astropy's
  download cache under ``https://naif.jpl.nasa.gov/pub/naif/generic_kernels/spk/
  planets/<name>.bsp``. Offline, import a local copy into the cache once:
  ``astropy.utils.data.import_file_to_cache(<that url>, "/path/de440.bsp")``,
  or copy ``~/.astropy/cache`` (``$XDG_CACHE_HOME/astropy``) from a machine that
  ran this function with ``offline=False`` (PINT caches its downloads there; from
  reading PINT, not tried: the machine this was verified on reaches no NAIF).
  The cache key was checked: astropy opens the file imported under that url.
  ``EPHEM builtin`` (astropy's ERFA model, ~km, ~10 us) needs no file at all.
- Clock files: none at the geocentre (``coe``, our default site) with CLK
  TT(TAI); TT(BIPMyyyy) needs ``tai2tt_bipmyyyy.clk``; a topocentric site needs
  ``gps2utc.clk`` and usually its own observatory file. Put them (TEMPO2 ``.clk``
  or TEMPO ``time_*.dat``, from https://github.com/ipta/pulsar-clock-corrections)
  in a directory named by ``PINT_CLOCK_OVERRIDE``. PINT 1.1 still reads that
  repository's ``index.txt`` through astropy's cache before it looks there, and
  fails offline without it: copy the cache from a connected machine, or import a
  local index; one listing no files makes PINT use PINT_CLOCK_OVERRIDE alone::

      from astropy.utils.data import import_file_to_cache
      open("index.txt", "w").write("# no global files")
      import_file_to_cache(
          "https://raw.githubusercontent.com/ipta/pulsar-clock-corrections/main/index.txt",
          "index.txt",
      )

  (Once cached, an index older than PINT's one-day update interval is re-fetched
  when online and, offline, used with a warning: checked; clock files go through
  the same code in PINT.)
- Earth orientation (IERS) for topocentric sites: astropy's bundled tables
  (the ``astropy-iers-data`` package; update it for newer ones).
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from voltstream.errors import ConfigError, FormatError
from voltstream.io.polyco import Polyco, PolycoEntry, _date_utc, write_polyco

__all__ = [
    "NO_PINT_MESSAGE",
    "load_pint_model",
    "predictor_from_par",
    "quiet_pint_logging",
    "read_par_text",
]

NO_PINT_MESSAGE = (
    "reading .par files needs PINT (pip install pint-pulsar); "
    "or make a polyco with TEMPO and pass --polyco"
)


def quiet_pint_logging(level: str = "WARNING") -> None:
    """Only PINT's warnings and errors on stderr (it starts at DEBUG); no-op without PINT.

    This replaces loguru's handlers process-wide, so the CLI calls it, the library not.
    """
    try:
        import pint.logging
    except ImportError:
        return
    pint.logging.setup(level=level)


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


def _longdouble(x: np.ndarray) -> np.ndarray:
    """A longdouble array from a NumPy array or an astropy Quantity."""
    return np.asarray(getattr(x, "value", x), dtype=np.longdouble)


def _clock_options(model: Any) -> dict:
    """PINT TOA clock options matching the .par file's CLK, as pint.toa.get_TOAs picks them.

    PINT's own Polycos.generate_polycos ignores CLK (it always applies its latest
    TT(BIPM)), which shifts a TT(TAI) model by ~27 us and needs a BIPM file even at
    the geocentre; following CLK avoids both.
    """
    clk = getattr(getattr(model, "CLOCK", None), "value", None)
    clk = str(clk).upper().replace(" ", "") if clk else ""
    if clk in ("TT(TAI)", "UNCORR"):
        return {"include_bipm": False}
    if clk.startswith("TT(BIPM") and clk.endswith(")") and clk != "TT(BIPM)":
        return {"include_bipm": True, "bipm_version": clk[3:-1]}
    return {"include_bipm": True}  # TT(BIPM), none or others: PINT's latest TT(BIPM)


def load_pint_model(path: str | os.PathLike) -> Any:
    """The PINT TimingModel of a .par file, with its absolute phase pinned.

    PINT otherwise puts phase zero (TZRMJD) at the first TOA it is given, so
    polycos made for two observations would disagree on phase zero. When the
    .par file sets no TZRMJD, phase zero is put at PEPOCH at the solar-system
    barycentre (TZRSITE @, infinite TZRFRQ).
    """
    try:
        from pint.models import get_model
        from pint.models.absolute_phase import AbsPhase
    except ImportError:
        raise ConfigError(NO_PINT_MESSAGE) from None
    _read_text(path)  # a clear error for a missing file
    try:
        model = get_model(str(path))
    except (ValueError, KeyError, AttributeError, OSError) as exc:
        raise ConfigError(f"PINT cannot read {path}: {exc}") from None
    if "AbsPhase" not in model.components:
        pepoch = getattr(getattr(model, "PEPOCH", None), "value", None)
        if pepoch is None:
            raise ConfigError(f"{path} sets neither TZRMJD nor PEPOCH: phase zero is undefined")
        model.add_component(AbsPhase(), validate=False)
        model.TZRMJD.value = pepoch
        model.TZRSITE.value = "@"
        model.TZRFRQ.value = np.inf
        model.validate()
    return model


def _ephemeris(model: Any) -> str:
    ephem = getattr(getattr(model, "EPHEM", None), "value", None)
    return str(ephem).lower() if ephem else "de421"  # PINT's default too


def _load_ephemeris(ephem: str, offline: bool) -> None:
    """Load the solar-system ephemeris up front, for a clear error when it is missing."""
    from pint.solar_system_ephemerides import load_kernel

    try:
        load_kernel(ephem)
    except Exception as exc:  # noqa: BLE001 - PINT/astropy raise many kinds here
        where = "in astropy's download cache" if offline else "in the cache or online"
        raise ConfigError(
            f"solar-system ephemeris {ephem} ({ephem}.bsp) is not available {where}: "
            f"fetch it on a connected machine with astropy.utils.data.download_file("
            f"'https://naif.jpl.nasa.gov/pub/naif/generic_kernels/spk/planets/{ephem}.bsp', "
            f"cache=True) and copy the astropy cache, or import a local copy with "
            f"astropy.utils.data.import_file_to_cache(<that url>, '/path/{ephem}.bsp') "
            f"(see voltstream.io.par); PINT said: {str(exc)[:300]}"
        ) from None


_CLOCK_INDEX_URL = "https://raw.githubusercontent.com/ipta/pulsar-clock-corrections/main/index.txt"


def _pint_failure(path: str | os.PathLike[str], site: str, exc: Exception) -> ConfigError:
    """PINT's error while building TOAs, with where to put the missing data."""
    msg = f"{exc}"
    if exc.__cause__ is not None:
        msg += f" ({exc.__cause__})"
    hint = ""
    low = msg.lower()
    if "index.txt" in low:
        hint = (
            "; PINT reads the clock repository's index.txt through astropy's cache "
            "before it looks in $PINT_CLOCK_OVERRIDE: copy the astropy cache from a "
            "connected machine, or import a local index (one that lists no files makes "
            "PINT use $PINT_CLOCK_OVERRIDE alone) with astropy.utils.data."
            f"import_file_to_cache('{_CLOCK_INDEX_URL}', 'index.txt') "
            "(see voltstream.io.par)"
        )
    elif "clock" in low or "bipm" in low:
        override = os.environ.get("PINT_CLOCK_OVERRIDE")
        hint = (
            "; put the clock file(s) named above (TEMPO2 .clk or TEMPO time_*.dat, "
            "e.g. from https://github.com/ipta/pulsar-clock-corrections) into the "
            "directory named by $PINT_CLOCK_OVERRIDE"
            + (f" (now {override})" if override else " (not set)")
        )
    elif "iers" in low or "ut1" in low:
        hint = "; update the astropy-iers-data package for newer Earth-orientation tables"
    elif isinstance(exc, KeyError):
        hint = f"; is {site!r} a PINT observatory name or TEMPO code?"
    return ConfigError(f"PINT could not make polycos from {path} at site {site!r}: {msg}{hint}")


def _segment_minutes(
    start_mjd: int, start_sec: float, duration_s: float, span_min: int
) -> list[int]:
    """Whole-minute TMIDs (minutes since MJD 0) of abutting segments covering the interval.

    A minute of margin on each side keeps the 1e-11 day rounding of TMID (< 1e-8 min)
    from uncovering the first or last sample.
    """
    first = start_mjd * 1440 + math.floor(start_sec / 60.0) - 1
    end = start_mjd * 1440 + (start_sec + duration_s) / 60.0 + 1
    tmid = first + span_min // 2  # covers from tmid - span/2 <= first
    count = max(1, math.ceil((end - (tmid + span_min / 2.0)) / span_min) + 1)
    return [tmid + k * span_min for k in range(count)]


def _fit_entries(
    model: Any,
    tmid_minutes: list[int],
    span_min: Any,
    ncoeff: Any,
    site: Any,
    freq_mhz: Any,
    clock: Any,
    ephem: Any,
    psr: Any,
    dm: Any,
) -> list[PolycoEntry]:
    """TEMPO-style polyco entries: RPHASE at TMID plus a fit of the rest at Chebyshev nodes."""
    import pint.toa

    nnodes = max(20, 3 * ncoeff)
    # Chebyshev-Lobatto nodes (endpoints included) keep the fit error flat up to the edges.
    unit = np.cos(np.pi * np.arange(nnodes) / (nnodes - 1))[::-1]
    days, fracs, tmids = [], [], []
    for m in tmid_minutes:
        day = m // 1440
        frac = round((m % 1440) / 1440.0, 11)  # exactly what the text format can hold
        tmids.append((day, frac))
        days.append(np.full(nnodes + 1, float(day)))
        fracs.append(np.concatenate([[frac], frac + unit * (span_min / 2.0) / 1440.0]))
    toas = pint.toa.get_TOAs_array(
        (np.concatenate(days), np.concatenate(fracs)),
        obs=site,
        freqs=float(freq_mhz),
        ephem=ephem,
        **clock,
    )
    ph = model.phase(toas, abs_phase=True)
    ph_int = _longdouble(ph.int).reshape(len(tmid_minutes), nnodes + 1)
    ph_frac = _longdouble(ph.frac).reshape(len(tmid_minutes), nnodes + 1)
    f0 = float(_longdouble(model.F0.value))  # the F0 the polyco text holds
    entries = []
    for k, (day, frac) in enumerate(tmids):
        node_fracs = fracs[k][1:]
        dt = (node_fracs - frac) * 1440.0  # minutes, as actually sampled
        r_int, r_frac = ph_int[k, 0], ph_frac[k, 0]
        r_frac_grid = np.longdouble(round(float(r_frac - np.floor(r_frac)), 9))
        r_int = r_int + np.floor(r_frac)
        # Phase relative to RPHASE (as written, 9 decimals) less the F0 term, in
        # longdouble before the subtraction so no turns are lost.
        rest = (ph_int[k, 1:] - r_int) + (ph_frac[k, 1:] - r_frac_grid)
        rest = (rest - np.asarray(dt, dtype=np.longdouble) * 60 * np.longdouble(f0)).astype(
            np.float64
        )
        coeffs = np.polynomial.polynomial.polyfit(dt, rest, ncoeff - 1)
        rms = float(np.sqrt(np.mean((np.polynomial.polynomial.polyval(dt, coeffs) - rest) ** 2)))
        if r_frac_grid >= 1:
            r_int, r_frac_grid = r_int + 1, r_frac_grid - 1
        date, utc = _date_utc(day, frac * 86400.0)
        entries.append(
            PolycoEntry(
                psr=psr,
                tmid_mjd=int(day),
                tmid_frac=frac,
                rphase=float(r_int) + float(r_frac_grid),
                rphase_int=float(r_int),
                rphase_frac=float(r_frac_grid),
                f0_hz=f0,
                span_min=float(span_min),
                coeffs=coeffs,
                dm=dm,
                date=date,
                utc=utc,
                # The format's 7-character field would run into the Doppler field below -9.999.
                log10_rms=max(math.log10(max(rms, 1e-30)), -9.999),
                site=site,
                ref_freq_mhz=float(freq_mhz),
            )
        )
    return entries


@contextlib.contextmanager
def _offline(enabled: bool) -> Iterator[None]:
    """Astropy (and so PINT) with no downloads: bundled IERS tables, cache only."""
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
    Raises ConfigError when PINT is not installed, when PINT cannot evaluate the
    model (a missing ephemeris or clock file is named, with where to put it), or
    when the polycos do not cover the observation. ``site`` is a PINT observatory
    name or TEMPO code (default ``coe``, the geocentre). See the module docstring
    for running offline.
    """
    if not duration_s > 0:
        raise ConfigError(f"duration must be > 0 s to make polycos, got {duration_s}")
    if not (span_min > 0 and ncoeff > 0) or int(span_min) != span_min:
        raise ConfigError(
            f"polyco span ({span_min} min, whole minutes) and ncoeff ({ncoeff}) must be > 0"
        )
    try:
        import pint.toa  # noqa: F401 - only to fail early without PINT
    except ImportError:
        raise ConfigError(NO_PINT_MESSAGE) from None
    par_text = _read_text(path)
    start_mjd, span_min, ncoeff = int(start_mjd), int(span_min), int(ncoeff)
    with _offline(offline):
        model = load_pint_model(path)
        psr = str(getattr(model.PSR, "value", model.PSR) or "")
        dm_value = getattr(getattr(model, "DM", None), "value", None)
        dm = float(dm_value) if dm_value is not None else 0.0
        ephem = _ephemeris(model)
        _load_ephemeris(ephem, offline)
        tmids = _segment_minutes(start_mjd, float(start_sec), float(duration_s), span_min)
        try:
            entries = _fit_entries(
                model,
                tmids,
                span_min,
                ncoeff,
                site,
                obs_freq_mhz,
                _clock_options(model),
                ephem,
                psr,
                dm,
            )
        except (ValueError, KeyError, IndexError, OSError) as exc:
            raise _pint_failure(path, site, exc) from None
    predictor = Polyco(entries, text=write_polyco(None, entries), name=f"PINT polycos for {path}")
    predictor.phase(start_mjd, np.array([float(start_sec), float(start_sec) + duration_s]))
    predictor.par_text = par_text
    return predictor

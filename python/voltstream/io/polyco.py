"""Pulse-phase predictors: TEMPO polyco files and a constant period.

Every predictor has ``phase(mjd_int, sec)`` (turns, float64) and
``freq_hz(mjd_int, sec)`` (apparent spin frequency), vectorised over ``sec``
(and ``mjd_int``), and ``text`` (the polyco file, or None). Times are always an
integer MJD plus seconds into that day (UTC; ``sec`` may exceed 86400): a float
MJD has only ~1 microsecond of resolution, too coarse for phase.

TEMPO polyco format, as parsed here (tokens separated by blanks; Fortran "D"
exponents accepted). Each entry is:

    line 1: PSR name, date (dd-Mmm-yy), UTC (hhmmss.ss), TMID (MJD), DM,
            Doppler shift (1e-4), log10 of the fit rms (turns)
    line 2: RPHASE (turns), F0 (Hz), observatory code, span (minutes),
            number of coefficients, observing frequency (MHz), [binary phase...]
    then the coefficients, three per line.

The phase at a time with DT = (t - TMID) in minutes is
    phase = RPHASE + 60 DT F0 + sum_i c_i DT^i
and the frequency is F0 + (1/60) sum_i i c_i DT^(i-1). An entry applies while
|DT| <= span/2; of the entries covering a time the one with the nearest TMID
is used.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from voltstream.errors import ConfigError, FormatError

__all__ = [
    "ConstantPeriod",
    "Polyco",
    "PolycoEntry",
    "polyco_entries_from_spin",
    "read_polyco",
    "write_polyco",
]


def _split_mjd(token: str) -> tuple[int, float]:
    # Split the decimal string itself so the integer day never passes through
    # a float (which would leave ~1e-11 days of resolution for the fraction).
    token = token.strip()
    if "." in token:
        ip, fp = token.split(".", 1)
        return int(ip), float("0." + (fp or "0"))
    return int(token), 0.0


def _split_turns(token: str) -> tuple[float, float]:
    value = float(token.replace("D", "E").replace("d", "e"))
    whole = np.floor(value)
    if "." in token and "e" not in token.lower():
        ip, fp = token.strip().split(".", 1)
        sign = -1.0 if ip.strip().startswith("-") else 1.0
        return float(int(ip)), sign * float("0." + (fp or "0"))
    return float(whole), value - whole


def _float(token: str) -> float:
    return float(token.replace("D", "E").replace("d", "e"))


@dataclass
class PolycoEntry:
    """One polyco entry (one time span)."""

    psr: str
    tmid_mjd: int
    tmid_frac: float  # fraction of the day, in [0, 1)
    rphase: float  # reference phase (turns) at TMID
    f0_hz: float
    span_min: float
    coeffs: np.ndarray
    dm: float = 0.0
    date: str = "01-Jan-00"
    utc: str = "000000.00"
    doppler: float = 0.0
    log10_rms: float = -6.0
    site: str = "@"
    ref_freq_mhz: float = 0.0
    binary_phase: list[float] = field(default_factory=list)
    # Integer and fractional parts of RPHASE kept apart for precision.
    rphase_int: float = 0.0
    rphase_frac: float = 0.0

    def __post_init__(self) -> None:
        self.coeffs = np.asarray(self.coeffs, dtype=np.float64)
        if self.rphase_int == 0.0 and self.rphase_frac == 0.0 and self.rphase != 0.0:
            self.rphase_int = float(np.floor(self.rphase))
            self.rphase_frac = self.rphase - self.rphase_int

    def dt_min(self, mjd_int: npt.ArrayLike, sec: npt.ArrayLike) -> np.ndarray:
        """Minutes from TMID, computed without forming a float MJD."""
        days = np.asarray(mjd_int, dtype=np.int64) - self.tmid_mjd
        return days * 1440.0 + (np.asarray(sec, dtype=np.float64) - self.tmid_frac * 86400.0) / 60.0

    def phase_dt(self, dt: np.ndarray) -> np.ndarray:
        poly = np.polynomial.polynomial.polyval(dt, self.coeffs)
        return self.rphase_int + (self.rphase_frac + 60.0 * dt * self.f0_hz + poly)

    def freq_dt(self, dt: np.ndarray) -> np.ndarray:
        d = np.polynomial.polynomial.polyder(self.coeffs) if self.coeffs.size > 1 else [0.0]
        return self.f0_hz + np.polynomial.polynomial.polyval(dt, d) / 60.0

    def format(self) -> str:
        """This entry as TEMPO polyco text."""
        tmid = f"{self.tmid_mjd:d}.{round(self.tmid_frac * 1e11):011d}"
        lines = [
            f"{self.psr:<10s} {self.date:>9s}{self.utc:>12s}{tmid:>22s}{self.dm:21.6f}"
            f" {self.doppler:6.3f}{self.log10_rms:7.3f}",
        ]
        frac = f"{self.rphase_frac:.9f}"
        ip = int(self.rphase_int)
        if frac.startswith("1."):
            ip, frac = ip + 1, "0." + frac[2:]
        if ip >= 0:
            rphase = f"{ip}.{frac.split('.')[1]}"
        else:
            rphase = f"{self.rphase_int + self.rphase_frac:.9f}"
        line2 = (
            # " " + 4 wide is the usual 5-wide site field, and keeps a long site name
            # (PINT's "chime") from running into F0; likewise " " + 4 for the span, the
            # usual 5 columns below 10000 minutes, and a blank before a longer one.
            f"{rphase:>20s}{self.f0_hz:22.15f} {self.site:>4s} {int(self.span_min):4d}"
            f"{self.coeffs.size:5d}{self.ref_freq_mhz:10.3f}"
        )
        for b in self.binary_phase:
            line2 += f"{b:7.4f}"
        lines.append(line2)
        cs = [f"{c:25.17e}".replace("e", "D") for c in self.coeffs]
        for i in range(0, len(cs), 3):
            lines.append("".join(cs[i : i + 3]))
        return "\n".join(lines) + "\n"


class Polyco:
    """A set of polyco entries; the predictor interface over all of them."""

    def __init__(self, entries: list[PolycoEntry], text: str | None = None, name: str = "") -> None:
        if not entries:
            raise FormatError(f"polyco {name or 'text'} holds no entries: check the file")
        self.entries = sorted(entries, key=lambda e: (e.tmid_mjd, e.tmid_frac))
        self.text = text if text is not None else "".join(e.format() for e in self.entries)
        self.name = name
        self.par_text: str | None = None  # the .par file it was made from, if any
        ref = self.entries[0].tmid_mjd
        self._ref_mjd = ref
        self._tmid_min = np.array(
            [(e.tmid_mjd - ref) * 1440.0 + e.tmid_frac * 1440.0 for e in self.entries]
        )
        self._half_span = np.array([e.span_min / 2.0 for e in self.entries])

    @property
    def psr(self) -> str:
        return self.entries[0].psr

    @property
    def dm(self) -> float:
        return self.entries[0].dm

    @classmethod
    def from_text(cls, text: str, name: str = "") -> Polyco:
        return cls(_parse(text, name), text=text, name=name)

    def _select(
        self, mjd_int: npt.ArrayLike, sec: npt.ArrayLike
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        mjd = np.asarray(mjd_int, dtype=np.int64)
        s = np.asarray(sec, dtype=np.float64)
        mjd, s = np.broadcast_arrays(mjd, s)
        t_min = (mjd - self._ref_mjd) * 1440.0 + s / 60.0
        i = np.clip(np.searchsorted(self._tmid_min, t_min), 1, max(len(self.entries) - 1, 1))
        if len(self.entries) == 1:
            idx = np.zeros(t_min.shape, dtype=np.intp)
        else:
            left, right = self._tmid_min[i - 1], self._tmid_min[i]
            idx = np.where(np.abs(t_min - left) <= np.abs(right - t_min), i - 1, i)
        # 1e-9 min of slack: entries abut exactly at span/2 in TEMPO output.
        outside = np.abs(t_min - self._tmid_min[idx]) > self._half_span[idx] + 1e-9
        if np.any(outside):
            bad = t_min[outside].ravel()[0]
            first = self._tmid_min[0] - self._half_span[0]
            last = self._tmid_min[-1] + self._half_span[-1]
            raise ConfigError(
                f"polyco {self.name or ''} does not cover MJD "
                f"{self._ref_mjd + bad / 1440.0:.6f} (its entries span MJD "
                f"{self._ref_mjd + first / 1440.0:.6f} to {self._ref_mjd + last / 1440.0:.6f}); "
                "generate polycos that span the whole observation"
            )
        return idx, mjd, s

    def _evaluate(
        self, mjd_int: npt.ArrayLike, sec: npt.ArrayLike, what: str
    ) -> np.ndarray | float:
        idx, mjd, s = self._select(mjd_int, sec)
        out = np.empty(idx.shape, dtype=np.float64)
        for k in np.unique(idx):
            e = self.entries[k]
            m = idx == k
            dt = e.dt_min(mjd[m], s[m])
            out[m] = e.phase_dt(dt) if what == "phase" else e.freq_dt(dt)
        return out if out.ndim else float(out)

    def phase(self, mjd_int: npt.ArrayLike, sec: npt.ArrayLike) -> np.ndarray | float:
        """Pulse phase in turns (float64), vectorised."""
        return self._evaluate(mjd_int, sec, "phase")

    def freq_hz(self, mjd_int: npt.ArrayLike, sec: npt.ArrayLike) -> np.ndarray | float:
        """Apparent spin frequency in Hz, vectorised."""
        return self._evaluate(mjd_int, sec, "freq")


def _parse(text: str, name: str) -> list[PolycoEntry]:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    where = name or "polyco text"
    entries: list[PolycoEntry] = []
    i = 0
    while i < len(lines):
        head = lines[i].split()
        if i + 1 >= len(lines):
            raise FormatError(f"{where}: entry at line {i + 1} ends after its first line")
        second = lines[i + 1].split()
        try:
            if len(head) < 4 or len(second) < 6:
                raise ValueError("too few fields")
            psr, date, utc, tmid = head[:4]
            tmid_mjd, tmid_frac = _split_mjd(tmid)
            dm = _float(head[4]) if len(head) > 4 else 0.0
            doppler = _float(head[5]) if len(head) > 5 else 0.0
            log_rms = _float(head[6]) if len(head) > 6 else 0.0
            rint, rfrac = _split_turns(second[0])
            f0 = _float(second[1])
            site = second[2]
            span = _float(second[3])
            ncoeff = int(second[4])
            ref_freq = _float(second[5])
            binphase = [_float(t) for t in second[6:]]
        except ValueError as exc:
            raise FormatError(
                f"{where}: entry at line {i + 1} is not a TEMPO polyco header ({exc}); "
                "expected 'PSR DATE UTC TMID DM DOPPLER LOGRMS' then "
                "'RPHASE F0 SITE SPAN NCOEFF FREQ'"
            ) from None
        if ncoeff <= 0 or span <= 0:
            raise FormatError(f"{where}: entry at line {i + 1} has ncoeff={ncoeff}, span={span}")
        nlines = (ncoeff + 2) // 3
        ctoks = " ".join(lines[i + 2 : i + 2 + nlines]).split()
        if len(ctoks) != ncoeff:
            raise FormatError(
                f"{where}: entry at line {i + 1} promises {ncoeff} coefficients, "
                f"found {len(ctoks)}: the file is truncated or malformed"
            )
        try:
            coeffs = [_float(t) for t in ctoks]
        except ValueError:
            raise FormatError(f"{where}: bad coefficient in entry at line {i + 1}") from None
        entries.append(PolycoEntry(
            psr=psr, tmid_mjd=tmid_mjd, tmid_frac=tmid_frac, rphase=rint + rfrac, f0_hz=f0,
            span_min=span, coeffs=np.array(coeffs), dm=dm, date=date, utc=utc, doppler=doppler,
            log10_rms=log_rms, site=site, ref_freq_mhz=ref_freq, binary_phase=binphase,
            rphase_int=rint, rphase_frac=rfrac,
        ))  # fmt: skip
        i += 2 + nlines
    return entries


def read_polyco(path: str | os.PathLike) -> Polyco:
    """Read a TEMPO polyco file (``polyco.dat``); the text is kept in ``.text``."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as exc:
        raise ConfigError(f"cannot read polyco file {path}: {exc.strerror}") from None
    return Polyco.from_text(text, name=str(path))


def write_polyco(path: str | os.PathLike | None, entries: list[PolycoEntry]) -> str:
    """Write entries as a TEMPO polyco file (``path`` may be None); returns the text."""
    text = "".join(e.format() for e in entries)
    if path is not None:
        with open(path, "w") as f:
            f.write(text)
    return text


def _date_utc(mjd: int, sec: float) -> tuple[str, str]:
    when = datetime.datetime(1858, 11, 17) + datetime.timedelta(days=mjd, seconds=sec)
    date = f"{when.day}-{when.strftime('%b')}-{when.strftime('%y')}"
    utc = f"{when.strftime('%H%M%S')}.{when.microsecond // 10000:02d}"
    return date, utc


def polyco_entries_from_spin(
    psr: str, f0_hz: float, f1_hz_s: float, epoch_mjd: int, epoch_sec: float,
    first_tmid_mjd: int, first_tmid_sec: float, nentries: int = 1, span_min: float = 60.0,
    dm: float = 0.0, ref_freq_mhz: float = 1400.0, site: str = "@", ncoeff: int = 3,
) -> list[PolycoEntry]:  # fmt: skip
    """Entries that reproduce phase = f0 t + f1 t^2 / 2 (t from the epoch) exactly.

    A quadratic spin model is exact in three coefficients (c2 = 3600 f1 / 2),
    which makes these entries a precise oracle for tests.
    """
    out = []
    for k in range(nentries):
        sec = first_tmid_sec + k * span_min * 60.0
        day, sec = first_tmid_mjd + int(sec // 86400), sec % 86400.0
        # Put TMID on the 1e-11 day grid of the file format so that a written
        # and re-read entry predicts exactly what this one does.
        frac = round(sec / 86400.0 * 1e11) / 1e11
        sec = frac * 86400.0
        t = (day - epoch_mjd) * 86400.0 + (sec - epoch_sec)
        ph_int = np.floor(f0_hz * t)
        ph = (f0_hz * t - ph_int) + 0.5 * f1_hz_s * t * t
        extra = np.floor(ph)
        coeffs = np.zeros(max(ncoeff, 3))
        coeffs[2] = 0.5 * f1_hz_s * 3600.0
        date, utc = _date_utc(day, sec)
        out.append(PolycoEntry(
            psr=psr, tmid_mjd=day, tmid_frac=frac, rphase=ph_int + extra + (ph - extra),
            rphase_int=float(ph_int + extra), rphase_frac=float(ph - extra),
            f0_hz=f0_hz + f1_hz_s * t, span_min=span_min, coeffs=coeffs, dm=dm,
            ref_freq_mhz=ref_freq_mhz, site=site, date=date, utc=utc,
        ))  # fmt: skip
    return out


class ConstantPeriod:
    """A constant-period predictor: phase 0 at the epoch (for ``fold --period``,
    the epoch is the first sample)."""

    text = None

    def __init__(self, period_s: float, epoch_mjd_int: int, epoch_sec: float = 0.0) -> None:
        if not period_s > 0:
            raise ConfigError(f"folding period must be > 0 s, got {period_s}")
        self.period_s = float(period_s)
        self.epoch_mjd_int = int(epoch_mjd_int)
        self.epoch_sec = float(epoch_sec)

    def _t(self, mjd_int: npt.ArrayLike, sec: npt.ArrayLike) -> np.ndarray:
        days = np.asarray(mjd_int, dtype=np.int64) - self.epoch_mjd_int
        return days * 86400.0 + (np.asarray(sec, dtype=np.float64) - self.epoch_sec)

    def phase(self, mjd_int: npt.ArrayLike, sec: npt.ArrayLike) -> np.ndarray | float:
        """Pulse phase in turns since the epoch."""
        ph = self._t(mjd_int, sec) / self.period_s
        return ph if np.ndim(ph) else float(ph)

    def freq_hz(self, mjd_int: npt.ArrayLike, sec: npt.ArrayLike) -> np.ndarray | float:
        """Spin frequency (constant)."""
        f = np.full(np.broadcast(np.asarray(mjd_int), np.asarray(sec)).shape, 1.0 / self.period_s)
        return f if f.ndim else float(f)

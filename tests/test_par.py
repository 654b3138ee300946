""".par files: the no-PINT error, our polyco fit over an exact model, and the label reader.

Here the PINT path runs against a small fake ``pint`` package injected into
``sys.modules``, over an exact spin-down model (phase = F0 T + F1 T^2 / 2), so the
fit and the conversion into Polyco entries are checked against a known truth. It
mimics the real PINT 1.1 calls we make (``pint.models.get_model``,
``pint.toa.get_TOAs_array((day, fraction), obs=, freqs=, ephem=, include_bipm=,
bipm_version=)``, ``model.phase(toas, abs_phase=True)`` returning Phase(int, frac)
with frac in [-0.5, 0.5), ``pint.solar_system_ephemerides.load_kernel``).
tests/test_par_pint.py runs the same path against real PINT.
"""

import sys
import types

import astropy.units as u
import numpy as np
import pytest

from voltstream.errors import ConfigError, FormatError
from voltstream.io.par import predictor_from_par, read_par_text
from voltstream.io.polyco import Polyco
from voltstream.io.psrfits import read_psrfits, write_psrfits
from voltstream.observation import FoldedArchive, Observation

RNG = np.random.default_rng()


# --- no PINT -----------------------------------------------------------------


def test_no_pint_raises_config_error(tmp_path, monkeypatch):
    for name in ("pint", "pint.models", "pint.polycos"):
        monkeypatch.setitem(sys.modules, name, None)
    par = tmp_path / "a.par"
    par.write_text("PSRJ J0437-4715\nF0 173.6879\nDM 2.64\n")
    with pytest.raises(ConfigError) as exc:
        predictor_from_par(par, 60000, 100.0, 60.0, 1400.0)
    assert str(exc.value) == (
        "reading .par files needs PINT (pip install pint-pulsar); "
        "or make a polyco with TEMPO and pass --polyco"
    )


# --- the PINT path, against a fake pint (tests our glue only) -----------------


class _SpinModel:
    """Truth: phase = F0 T + F1 T^2 / 2, T in seconds from PEPOCH (longdouble)."""

    def __init__(self, psr, f0, f1, pepoch_mjd, pepoch_sec, dm, clock="TT(TAI)"):
        self.PSR = types.SimpleNamespace(value=psr)
        self.F0 = types.SimpleNamespace(value=np.longdouble(f0))
        self.DM = types.SimpleNamespace(value=dm)
        self.EPHEM = types.SimpleNamespace(value="DE440")
        self.CLOCK = types.SimpleNamespace(value=clock)
        self.components = {"AbsPhase": object()}  # as if the .par set TZRMJD
        self.f1, self.pep_mjd, self.pep_sec = f1, pepoch_mjd, pepoch_sec

    def phase_at(self, mjd_int, sec):
        t = (np.longdouble(mjd_int) - self.pep_mjd) * 86400 + (
            np.asarray(sec, dtype=np.longdouble) - self.pep_sec
        )
        return np.longdouble(self.F0.value) * t + np.longdouble(self.f1) * t * t / 2

    def phase(self, toas, abs_phase=False):
        """PINT's Phase: integer and fraction in [-0.5, 0.5), dimensionless Quantities."""
        assert abs_phase
        days, fracs = toas
        t = (np.asarray(days, dtype=np.longdouble) - self.pep_mjd) * 86400 + (
            np.asarray(fracs, dtype=np.longdouble) * 86400 - self.pep_sec
        )
        ph = np.longdouble(self.F0.value) * t + np.longdouble(self.f1) * t * t / 2
        whole = np.round(ph)
        one = u.dimensionless_unscaled
        return types.SimpleNamespace(int=whole * one, frac=(ph - whole) * one)


def _fake_pint(model, calls):
    """The parts of PINT predictor_from_par calls, over an exact spin-down model."""
    from astropy.utils import data, iers

    def get_toas_array(times, obs, freqs, ephem, **clock):
        calls.append((obs, freqs, ephem, clock, iers.conf.auto_download, data.conf.allow_internet))
        return times

    pint = types.ModuleType("pint")
    models = types.ModuleType("pint.models")
    absolute_phase = types.ModuleType("pint.models.absolute_phase")
    toa = types.ModuleType("pint.toa")
    ephemerides = types.ModuleType("pint.solar_system_ephemerides")
    models.get_model = lambda path: model
    absolute_phase.AbsPhase = object
    toa.get_TOAs_array = get_toas_array
    ephemerides.load_kernel = lambda ephem: calls.append(("load_kernel", ephem))
    pint.models, pint.toa, pint.solar_system_ephemerides = models, toa, ephemerides
    return {
        "pint": pint,
        "pint.models": models,
        "pint.models.absolute_phase": absolute_phase,
        "pint.toa": toa,
        "pint.solar_system_ephemerides": ephemerides,
    }


def test_pint_glue_reproduces_the_model_phases(tmp_path, monkeypatch):
    f0 = float(RNG.uniform(0.5, 700.0))
    f1 = -float(10 ** RNG.uniform(-16, -13))
    start_mjd, start_sec = 60000 + int(RNG.integers(0, 500)), float(RNG.uniform(0, 86400))
    model = _SpinModel(
        "J1136+1551",
        f0,
        f1,
        start_mjd - int(RNG.integers(0, 2)),
        float(RNG.uniform(0, 86400)),
        float(RNG.uniform(1, 300)),
    )
    calls = []
    no_bipm = {"include_bipm": False}
    for name, mod in _fake_pint(model, calls).items():
        monkeypatch.setitem(sys.modules, name, mod)
    par_text = f"PSRJ J1136+1551\nF0 {f0!r}\nF1 {f1!r}\nDM {model.DM.value!r}\n"
    par = tmp_path / "m.par"
    par.write_text(par_text)
    duration = float(RNG.uniform(600, 3 * 3600))
    freq = float(RNG.uniform(300, 3000))
    pc = predictor_from_par(par, start_mjd, start_sec, duration, freq, span_min=30, ncoeff=8)
    # The ephemeris is loaded first (for a clear error), then every node in one call,
    # with CLK TT(TAI) honoured and astropy kept offline.
    assert calls == [("load_kernel", "de440"), ("coe", freq, "de440", no_bipm, False, False)]
    assert pc.par_text == par_text and pc.psr == "J1136+1551" and pc.dm == model.DM.value
    assert all(e.coeffs.size == 8 and e.span_min == 30 for e in pc.entries)
    # Abutting 30-minute segments on whole minutes that cover the observation, no more.
    tmid_min = np.array([(e.tmid_mjd - start_mjd) * 1440 + e.tmid_frac * 1440 for e in pc.entries])
    np.testing.assert_allclose(np.diff(tmid_min), 30, atol=1e-7)
    np.testing.assert_allclose(tmid_min, np.round(tmid_min), atol=1e-7)
    assert tmid_min[0] - 15 <= start_sec / 60 and tmid_min[-1] + 15 >= (start_sec + duration) / 60
    assert len(pc.entries) <= (duration / 60 + 2) / 30 + 2
    assert all(e.site == "coe" and e.ref_freq_mhz == freq for e in pc.entries)
    secs = start_sec + np.sort(RNG.uniform(0, duration, 200))
    want = model.phase_at(start_mjd, secs)
    for pred in (pc, Polyco.from_text(pc.text)):  # in memory and as written for POLYCO
        err = (np.asarray(pred.phase(start_mjd, secs), dtype=np.longdouble) - want).astype(float)
        assert np.max(np.abs(err)) < 1e-6
        f_want = f0 + f1 * ((start_mjd - model.pep_mjd) * 86400 + secs - model.pep_sec)
        np.testing.assert_allclose(pred.freq_hz(start_mjd, secs), f_want, rtol=1e-11)
    # The archive then carries both: POLYCO from .text, PSRPARAM from .par_text.
    obs = Observation(4, 2, freq, -16.0, 4 / 16e6, start_mjd, start_sec, source=pc.psr)
    a = FoldedArchive(
        obs=obs,
        data=RNG.normal(size=(1, 1, 4, 16)),
        weights=np.ones((1, 4)),
        tsubint_s=np.array([duration]),
        offs_sub_s=np.array([duration / 2]),
        period_s=np.array([1 / f0]),
        dm=model.DM.value,
        polyco_text=pc.text,
        par_text=pc.par_text,
    )
    write_psrfits(tmp_path / "a.fits", a)
    b = read_psrfits(tmp_path / "a.fits")
    assert b.par_text == par_text
    back = Polyco.from_text(b.polyco_text)
    err = (np.asarray(back.phase(start_mjd, secs), dtype=np.longdouble) - want).astype(float)
    assert np.max(np.abs(err)) < 1e-5  # PSRFITS keeps REF_MJD as one double


def test_pint_failure_is_config_error(tmp_path, monkeypatch):
    model = _SpinModel("J0000+0000", 1.0, 0.0, 60000, 0.0, 1.0, clock="TT(BIPM2021)")
    calls = []
    mods = _fake_pint(model, calls)

    def broken(*a, **k):
        calls.append(k)
        raise ValueError("No clock file for time_xyz.dat")

    mods["pint.toa"].get_TOAs_array = broken
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setenv("PINT_CLOCK_OVERRIDE", str(tmp_path))
    par = tmp_path / "m.par"
    par.write_text("PSRJ J0000+0000\nF0 1.0\n")
    with pytest.raises(
        ConfigError, match=r"PINT could not make polycos.*'xyz'.*time_xyz.dat.*PINT_CLOCK_OVERRIDE"
    ):
        predictor_from_par(par, 60000, 0.0, 60.0, 1400.0, site="xyz")
    assert calls[-1]["include_bipm"] is True and calls[-1]["bipm_version"] == "BIPM2021"
    with pytest.raises(ConfigError, match="cannot read .par file"):
        predictor_from_par(tmp_path / "absent.par", 60000, 0.0, 60.0, 1400.0)


# --- the PINT-free label reader ------------------------------------------------


def test_read_par_text(tmp_path):
    f0, dm = float(RNG.uniform(0.5, 700)), float(RNG.uniform(1, 1000))
    mant, exp = f0 / 10 ** int(np.floor(np.log10(f0))), int(np.floor(np.log10(f0)))
    text = (
        "# comment F0 999\n"
        "C  TEMPO comment\n"
        f"PSRJ  J{RNG.integers(0, 24):02d}00+1551\n"
        "PSRB  B1133+16\n"
        f"F0    {mant!r}D{exp:+03d}  1  0.000001\n"
        f"DM    {dm!r}\n"
    )
    par = tmp_path / "a.par"
    par.write_text(text)
    got = read_par_text(par)
    assert got["psr"] == text.split("\n")[2].split()[1] and got["text"] == text
    assert got["f0_hz"] == pytest.approx(f0, rel=1e-14) and got["dm"] == dm
    p0 = float(RNG.uniform(0.001, 5))
    par.write_text(f"PSR  1133+16\nP0 {p0!r}\n")
    got = read_par_text(par)
    assert got["psr"] == "1133+16" and got["f0_hz"] == pytest.approx(1 / p0) and got["dm"] is None
    par.write_text("hello world\n")
    with pytest.raises(FormatError, match="neither PSR"):
        read_par_text(par)
    par.write_text("PSRJ J0000+0000\nF0 fast\n")
    with pytest.raises(FormatError, match="F0 is 'fast'"):
        read_par_text(par)
    with pytest.raises(ConfigError, match="cannot read .par file"):
        read_par_text(tmp_path / "absent.par")
